"""Errors raised by the toggle registry (defined with their exit code in fusecheck/errors.py)."""
from fusecheck.errors import ToggleError, ToggleUnsupported

__all__ = ["ToggleError", "ToggleUnsupported"]
