"""What parking a compiled run's results on the host costs (fusecheck/runs/park.py), pinned against pageable
host memory, on gradients shaped like a Llama model's (one tensor per parameter, bf16).

    python benchmarks/park_cost.py --device cuda [--layers 32] [--hidden 4096] [--out park.md]

Why: the 8B `--train` check's compiled phase took 71, 98 and 106 s on three machines after parking came in,
and page-locking 16 GB is not free; this times the two ways apart, each way there and back.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusecheck.runs.execute import RunResult  # noqa: E402
from fusecheck.runs.park import park  # noqa: E402


def llama_grads(layers: int, hidden: int, inter: int, vocab: int, kv: int, device: str) -> dict[str, torch.Tensor]:
    shapes = {"embed": (vocab, hidden), "head": (vocab, hidden), "norm": (hidden,)}
    for i in range(layers):
        shapes.update({f"{i}.q": (hidden, hidden), f"{i}.k": (kv, hidden), f"{i}.v": (kv, hidden),
                       f"{i}.o": (hidden, hidden), f"{i}.gate": (inter, hidden), f"{i}.up": (inter, hidden),
                       f"{i}.down": (hidden, inter), f"{i}.ln1": (hidden,), f"{i}.ln2": (hidden,)})
    return {f"grad.{k}": torch.randn(s, dtype=torch.bfloat16, device=device) for k, s in shapes.items()}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--kv", type=int, default=1024)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    lines = [f"device: {args.device}, torch {torch.__version__}", "",
             "| host memory | tensors | GB | park (to host) | back (row by row) | GB/s there / back |",
             "|---|---|---|---|---|---|"]
    # pinned twice: the second finds the caching host allocator warm (on the host itself nothing can be pinned)
    for pin in ((True, False, True) if args.device == "cuda" else (False,)):
        grads = llama_grads(args.layers, args.hidden, args.inter, args.vocab, args.kv, args.device)
        gb = sum(t.numel() * t.element_size() for t in grads.values()) / 1e9
        result = RunResult(outputs={}, grads=grads)
        sync(args.device)
        t0 = time.perf_counter()
        moved = park(result, device, force=True, pin=pin)
        t1 = time.perf_counter()
        for k, where in moved.items():
            result.grads[k] = result.grads[k].to(where)
            result.grads[k] = None  # the judge drops each row's copy once judged
        sync(args.device)
        t2 = time.perf_counter()
        lines.append(f"| {'pinned' if pin else 'pageable'} | {len(grads)} | {gb:.1f} | {t1 - t0:.2f} s | "
                     f"{t2 - t1:.2f} s | {gb / (t1 - t0):.1f} / {gb / (t2 - t1):.1f} |")
        print(lines[-1], flush=True)
        del grads, result, moved
        torch.cuda.empty_cache() if args.device == "cuda" else None
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
