"""Per-block verdicts on a sharded model: each block's eager, compiled and golden-dtype (fp64) result on eager's own input
to it, on every rank (fusecheck/golden/streamed/per_block.py's idea; its recorder and compiled replay are reused).

The fp64 replay differs: under FSDP a block holds only its shard between calls, and upcasting that shard
before the call would let FSDP's hook put the run-dtype parameters back. So the block is gathered
explicitly (`unshard`), its full parameters upcast, its `forward` called without FSDP's hooks, and the block
resharded: one full fp64 block at a time, as in the golden. Every rank replays the blocks in the same
order, so the all-gathers match.
"""
from __future__ import annotations

import torch

from fusecheck.compare import compare
from fusecheck.runs.execute import flatten_outputs
from fusecheck.runs.cast import cast_tree
from fusecheck.policy import Policy
from fusecheck.golden.streamed.per_block import BlockRecorder, BlockVerdict
from fusecheck.golden.streamed.upcast import upcast


def judge_sharded_blocks(recorder: BlockRecorder, dtype: torch.dtype, device: torch.device,
                         policy: Policy) -> list[BlockVerdict]:
    verdicts = []
    for name, block in recorder.blocks:
        call = recorder.calls.get(name)
        if call is None:
            continue
        block.unshard()
        try:
            with torch.no_grad(), upcast(block, dtype, device):
                out = block.forward(*cast_tree(call.args, dtype, device),
                                    **cast_tree(call.kwargs, dtype, device))
        finally:
            block.reshard()
        golden = {k: v.detach() for k, v in flatten_outputs(out)[0].items()}
        rows = []
        for key, eager in call.eager.items():
            if not eager.is_floating_point() or key not in golden:
                continue
            compiled = call.compiled.get(key, eager) if call.compiled is not None else eager
            rows.append(compare(compiled, eager, golden[key].to(eager.device), policy=policy, name=f"{name}:{key}"))
        verdicts.append(BlockVerdict(name, rows, call.compiled is not None))
    return verdicts
