"""Is a drawn model's FAIL the compiler's? Plain torch.compile against eager and an fp64 copy, no fusecheck.

    python benchmarks/diag_compile_vs_fp64.py any:doge --device cuda
For a family draw (models/families.py, `any:<type>` included): forward and one backward (the mean square of the
output) in fp32 and bf16, each of eager, Inductor and `aot_eager_decomp_partition` against the same model in fp64;
prints the output's RMSE and the largest gradient RMSE per backend. A backend far from fp64 where eager is close is a
compiler problem fusecheck did not make; Inductor alone far from it points at code generation, both at the graph
(decompositions, AOT autograd)."""
import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.families import draw  # noqa: E402

BACKENDS = ("eager", "inductor", "aot_eager_decomp_partition")


def _run(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(*inputs)
    out.float().pow(2).mean().backward()
    grads = {n.replace("_orig_mod.", ""): p.grad.detach().double() for n, p in model.named_parameters()
             if p.grad is not None}
    return out.detach().double(), grads


def _rmse(a, b) -> float:
    return float((a - b).pow(2).mean().sqrt())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("family", help="e.g. any:doge, llama")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    for dtype in (torch.float32, torch.bfloat16):
        case, _ = draw(a.family, a.seed)
        model = case.model.to(a.device, dtype)
        inputs = [x.to(a.device) if isinstance(x, torch.Tensor) else x for x in case.inputs]
        golden_out, golden_grads = _run(copy.deepcopy(model).double(), inputs)
        cells = []
        for backend in BACKENDS:
            out, grads = _run(model if backend == "eager" else torch.compile(model, backend=backend), inputs)
            worst = max((_rmse(g, golden_grads[n]) for n, g in grads.items() if n in golden_grads), default=0.0)
            cells.append(f"{backend} output {_rmse(out, golden_out):.3g} gradients up to {worst:.3g}")
        print(f"{a.family} seed {a.seed} {str(dtype).removeprefix('torch.')} on {a.device}, RMSE against fp64: "
              + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
