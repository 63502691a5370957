"""Checking a model sharded over several processes (FSDP2 per block), launched by torchrun.

`launch` detects torchrun (or starts torch's elastic launcher for `--nproc N`) and names a rank that crashed
or hung; `shard` builds the model on every rank (from the meta device), shards it per block and compiles it
per block; `check` runs eager, compiled and the streamed fp64 golden on every rank and judges each rank's
outputs and gradient shards with the single-process comparison core; `ranks` keeps each rank's phase.
"""
