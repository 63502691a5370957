"""Planted culprits: compiler decisions made harmful on purpose, each installed by a context manager.

Every bug lives in a compiler decision (a custom pattern pass, a decomposition-table entry, what
lowering does when it inlines, what codegen does when two kernels fuse); the models are plain fp32 code.
"""
