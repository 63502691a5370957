"""Plain torch.compile, no fusecheck in the loop: stock Inductor on this CPU (torch 2.13) returns a different
conv weight gradient on every call of a drawn ResNet in bf16, NaN on some, where eager is repeatable. The
stability grid's one FAIL on the decision families (`models/families.py:resnet_17`, seed 17, bf16 `--train`:
`nondeterministic_compiled`) is this compiler bug, not the verdict. docs/benchmarks.md says what was measured.

    python benchmarks/repro_inductor_conv_grad_race.py [--target models/families.py:resnet_17] [--calls 6]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fusecheck.case import load_target  # noqa: E402

PARAM = "model.resnet.encoder.stages.2.layers.0.layer.1.convolution.weight"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/families.py:resnet_17")
    ap.add_argument("--param", default=PARAM)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args(argv)
    case = load_target(args.target)
    model = case.model.to(torch.bfloat16)
    x = case.inputs[0] if isinstance(case.inputs, tuple) else case.inputs
    x = x.to(torch.bfloat16) if x.is_floating_point() else x

    def grad(fn):
        model.zero_grad(set_to_none=True)
        out = fn(x)
        out = out.logits if hasattr(out, "logits") else out
        torch.manual_seed(0)
        out.backward(torch.randn_like(out))
        return dict(model.named_parameters())[args.param].grad.float().clone()
    eager = grad(model)
    print(f"eager repeatable: {torch.equal(eager, grad(model))}")
    compiled = torch.compile(model)
    first = None
    for i in range(args.calls):
        g = grad(compiled)
        first = g if first is None else first
        print(f"compiled call {i + 1}: same bits as call 1: {torch.equal(g, first)}, "
              f"max |g - eager| {float((g - eager).abs().max()):.4g}, non-finite {int((~g.isfinite()).sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
