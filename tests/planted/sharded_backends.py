"""Dynamo backends with a bug on one rank only, for the sharded check (`--backend tests/planted/sharded_backends.py:NAME`).

Each runs the captured graph as is (aot_eager-like) and does its harm only where torch.distributed says the
rank is 1: a per-rank bug a single-process check cannot see.
"""
import os
import time

import torch
import torch.distributed as dist


def _on_rank1(harm):
    def backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return harm(out) if dist.is_initialized() and dist.get_rank() == 1 else out
        return run
    return backend


def _perturb(out):
    """Relative noise of 1e-3 on every floating output: far above fp32 rounding, as a bad kernel would be."""
    def one(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            gen = torch.Generator().manual_seed(0)
            return t * (1 + 1e-3 * torch.randn(t.shape, generator=gen).to(t.dtype))
        return t
    return type(out)(one(t) for t in out) if isinstance(out, (tuple, list)) else one(out)


def _crash(out):
    raise ValueError("planted: a compiled block failed on rank 1")


def _die(out):
    os._exit(11)  # as a segfaulting kernel would: no Python error, no message


def _hang(out):
    time.sleep(3600)  # a kernel spinning forever
    return out


def _every_rank_on_call(n_mod: int, harm):
    """`harm` on every rank, on the calls of a compiled graph whose count is 0 mod `n_mod` (every second call)."""
    def backend(gm, example_inputs):
        calls = [0]

        def run(*args):
            calls[0] += 1
            out = gm(*args)
            return harm(out) if calls[0] % n_mod == 0 else out
        return run
    return backend


def _one_ulp(out):
    """One element of the first output one ULP up: atomic adds landing in another order."""
    def one(t):
        t = t.clone()
        t.view(-1)[0] = torch.nextafter(t.view(-1)[0], torch.tensor(float("inf"), dtype=t.dtype))
        return t
    return type(out)([one(out[0]), *out[1:]]) if isinstance(out, (tuple, list)) else one(out)


corrupt_on_rank1 = _on_rank1(_perturb)
ulp_jitter = _every_rank_on_call(2, _one_ulp)          # harmless nondeterminism: must pass as in one process
second_call_race = _every_rank_on_call(2, _perturb)    # wrong on every second call: must fail
crash_on_rank1 = _on_rank1(_crash)
die_on_rank1 = _on_rank1(_die)
hang_on_rank1 = _on_rank1(_hang)


def raises_when_built():
    """A target whose builder raises on every rank alike: one error line, one ERROR report."""
    raise RuntimeError("this target cannot be built")
