"""Chunk boundaries shared by kernels and the tool, so identity modes chunk exactly like the fused run."""
from __future__ import annotations


def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """Split `n` rows into at most `chunks` pieces of ceil(n/chunks) rows; the last one takes the tail."""
    if n <= 0:
        return []
    step = -(-n // max(1, chunks))
    return [(s, min(s + step, n)) for s in range(0, n, step)]
