"""Verdict stability and power on a distribution of real architectures (issues 14 and 27), side by side with
torch's RMSE rule on the same runs.

Each seed draws one random tiny config per architecture family (models/families.py: GPT-2, Llama, Qwen2,
Gemma-2, BLOOM, Falcon, GPT-NeoX, Phi, BERT, RoBERTa, T5, BART, Mixtral, Qwen2-MoE, MobileNetV2, ConvNext,
ResNet, ViT/DeiT, Swin, Mamba, Mamba2; timm families where timm imports); weights and inputs come from the
same (family, seed). Every JSONL row records the drawn config.

stability: stock Inductor, fp32 and bf16, forward and --train: each run's verdict, every check's largest ratio
  to its limit over the run's rows (how close it came to flipping), and torch's rule on the same run
  (`torch._dynamo.utils.same` with fp64_ref: allclose, else rmse(res) <= m * rmse(ref) + tol/10, m = 3 in
  fp16/bf16 or under 1000 elements, else 2).
power: the same draws with a planted degradation of controlled strength, active only in the compiled graph
  (a forward hook that acts while `torch.compiler.is_compiling()`, so eager and the golden are untouched):
  detection per (plant, dtype, strength) for the verdict and for torch's rule.

A draw whose model fails to build, or whose eager run fails, is a row with status SKIP and the reason; a
compiler or golden failure is a row with status ERROR. Nothing is dropped.

    python benchmarks/verdict_stability.py --device cpu --seeds 0-1 --families gpt2,vit --jsonl out.jsonl
    python benchmarks/verdict_stability.py --part power --quick --seeds 0 --jsonl power.jsonl --shard 0/2
    python benchmarks/verdict_stability.py summary out.jsonl power.jsonl
Only the public `fusecheck.check.run_check` is called.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusecheck.policy import Ratios  # noqa: E402

SMALL_TENSOR = Ratios().small_tensor_numel  # the RMSE ratio limit is 2 from here up, 3 below
CHECKS = ["rmse", "mean_rel", "max_rel", "small_value_errors", "small_value_max_abs"]


def checks_of(rows: list[dict]) -> list[str]:
    """CHECKS, then any other check the rows' margins name (a check the verdict gained), in first-seen order."""
    extra = {c: None for r in rows for c in r.get("margins", {}) if c not in CHECKS}
    return CHECKS + list(extra)
# issue 14's fixed grid (models/hf.py), still runnable as families "hf:<model>"
MODELS = ["gpt2", "llama", "bert", "qwen2", "mixtral", "vit", "resnet", "mobilenet_v2"]
FIXED = [f"hf:{m}" for m in MODELS]


def build(model: str, seed: int):
    """One of issue 14's fixed tiny models (models/hf.py); weights and inputs both drawn from `seed`."""
    import models.hf as hf
    torch.manual_seed(seed)
    return getattr(hf, f"build_{model.removeprefix('hf:')}")()


def make_case(family: str, seed: int):
    """(Case, config) for a drawn family, or for a fixed `hf:<model>` one."""
    if family.startswith("hf:"):
        return build(family, seed), {"family": family, "kind": "fixed (models/hf.py)"}
    from models.families import draw
    return draw(family, seed)


def config_of(family: str, seed: int) -> dict:
    if family.startswith("hf:"):
        return {"family": family, "kind": "fixed (models/hf.py)"}
    from models.families import draw_config
    return draw_config(family, seed)


# ---- planted degradations: generic, with a strength, only inside the compiled graph -------------------

def _rounded(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to `bits` mantissa bits by arithmetic (frexp/round/ldexp): a dtype round trip such as
    .to(bf16).float() is one Inductor may drop inside a fused kernel."""
    m, e = torch.frexp(x.float())
    scale = 2.0 ** (bits + 1)
    return torch.ldexp(torch.round(m * scale) / scale, e)


def _round_bits(x: torch.Tensor, bits: float) -> torch.Tensor:
    """x rounded to `bits` mantissa bits (7 = bf16: a no-op in a bf16 model, 6 doubles bf16's rounding
    error, 5 quadruples it), straight-through in backward."""
    return x + (_rounded(x, int(bits)).to(x.dtype) - x).detach()


def _bf16_sum(module: torch.nn.Module, x: torch.Tensor, out: torch.Tensor, chunks: float) -> torch.Tensor:
    """A Linear's reduction accumulated in bf16: the K sum split into `chunks` partial products, the running
    sum rounded to bf16 after each (eager accumulates in fp32 and rounds once), straight-through in
    backward. In an fp32 model this is also the dropped fp32 upcast."""
    w = module.weight if isinstance(module, torch.nn.Linear) else module.weight.t()  # Conv1D: [in, out]
    acc = torch.zeros_like(out, dtype=torch.float32)
    for xc, wc in zip(x.chunk(int(chunks), -1), w.chunk(int(chunks), -1)):
        acc = _rounded(acc + (xc @ wc.t()).float(), 7)
    planted = acc.to(out.dtype) + (module.bias if module.bias is not None else 0)
    return out + (planted - out).detach()


def _perturb(x: torch.Tensor, rel: float) -> torch.Tensor:
    """x * (1 + rel * w) with w a fixed pseudo-random pattern in [-1, 1] (a function of x, no RNG)."""
    return x * (1 + rel * torch.sin(x.float() * 12345.678).to(x.dtype))


def _flip_small(x: torch.Tensor, share: float) -> torch.Tensor:
    """Sign flipped on the elements with |x| below `share` of the tensor's largest magnitude."""
    return torch.where(x.abs() < share * x.detach().abs().amax(), -x, x)


def _offset(x: torch.Tensor, rel: float) -> torch.Tensor:
    """x + rel * rms(x): a constant added to every element (a bias read twice, a zero point off), no slope."""
    return x + rel * x.detach().float().pow(2).mean().sqrt().to(x.dtype)


def _scale(x: torch.Tensor, rel: float) -> torch.Tensor:
    """x * (1 + rel): every element too large by the same share (a wrong epsilon or scale factor)."""
    return x * (1 + rel)


FEW_REL = 2.0 ** -3  # few_wrong's relative error: 32 of bf16's half-ulps, far outside fp32's rounding


def _few_positions(x: torch.Tensor, k: int) -> torch.Tensor:
    """A mask of `k` non-zero elements spread evenly over x (flattened), by arithmetic on whole tensors: no
    data-dependent shapes (nonzero, .item()), since the plant runs inside the compiled graph. Zeros are left
    out: a tied head whose padding row is zero has logits exactly 0.0, where a relative error or a sign flip
    changes nothing (it made the plant a no-op on ALBERT, DeBERTa-v2, OPT and Whisper)."""
    nz = x.detach().reshape(-1) != 0
    rank = torch.cumsum(nz.to(torch.int64), 0) - 1          # each non-zero element's index among them
    count = nz.sum()
    step = torch.clamp(count // k, min=1)
    picked = nz & ((rank - step // 2) % step == 0) & (rank >= step // 2) & ((rank - step // 2) // step < k)
    return picked.reshape(x.shape)


def _few_wrong(x: torch.Tensor, k: float) -> torch.Tensor:
    """`k` elements of the output (spread over it) off by a relative FEW_REL, straight-through in backward:
    a handful of wrong elements (a kernel's tail, say) where eager is within rounding; every other element
    and every gradient is exact."""
    planted = torch.where(_few_positions(x, int(k)), x * (1 + FEW_REL), x)
    return x + (planted - x).detach()


def _flip_few(x: torch.Tensor, k: float) -> torch.Tensor:
    """Sign flipped on the `k` non-zero elements of smallest magnitude (flipping a zero changes nothing),
    straight-through in backward; whole-tensor arithmetic, as _few_positions."""
    mag = x.detach().abs().reshape(-1)
    mag = torch.where(mag == 0, torch.full_like(mag, float("inf")), mag)
    ordered = torch.sort(mag).values
    count = torch.isfinite(mag).sum()
    at = torch.clamp(torch.minimum(count, torch.full_like(count, int(k))) - 1, min=0)
    threshold = ordered.gather(0, at.reshape(1))
    planted = torch.where(mag.reshape(x.shape) <= threshold, -x, x)
    return x + (planted - x).detach()


PLANTS = {  # name -> (transform(x, strength), strengths from weak to strong)
    # fewer mantissa bits: stronger (7 = bf16 in fp32); around 20 bits the error reaches fp32 eager's own;
    # in a bf16 model 6 and 5 bits double and quadruple that op's rounding error
    "round_bits": (_round_bits, [22, 20, 18, 16, 7, 6, 5, 4]),
    "perturb": (_perturb, [1e-7, 1e-6, 3e-6, 1e-5, 1e-3]),
    "flip_small": (_flip_small, [1e-4, 1e-3, 1e-2]),
    # few-element plants, in the model's last Linear/Conv (its head: the output itself), gradients exact
    "few_wrong": (_few_wrong, [1, 2, 4, 8, 16]),
    "flip_few": (_flip_few, [1, 2, 4, 8, 16]),
    # systematic plants: the same shift or share on every element of the middle layer's output
    "offset": (_offset, [1e-4, 1e-3, 3e-3, 1e-2]),
    "scale": (_scale, [1e-4, 1e-3, 3e-3, 1e-2]),
}
# plants that recompute the hooked Linear from its input: name -> (fn(module, x, out, strength), strengths)
LINEAR_PLANTS = {"bf16_sum": (_bf16_sum, [2, 4, 8, 16, 32])}
# plants that act on the last hooked layer (the head) rather than the middle one
ON_HEAD = {"few_wrong", "flip_few"}
# "<plant>_all": the same degradation in every hooked layer, not only the middle one (a pass that drops an
# upcast everywhere); in bf16 one layer's extra rounding drowns in every other layer's
EVERY_LAYER = "_all"
PLANTS.update({k + EVERY_LAYER: v for k, v in PLANTS.items() if k == "round_bits"})
LINEAR_PLANTS.update({k + EVERY_LAYER: v for k, v in LINEAR_PLANTS.items()})
QUICK = {"round_bits": [18, 6], "perturb": [1e-6, 3e-6], "flip_small": [1e-3, 1e-2], "bf16_sum": [4, 16],
         "round_bits_all": [6, 5, 4], "bf16_sum_all": [4, 16], "few_wrong": [1, 8], "flip_few": [1, 8],
         "offset": [1e-3, 1e-2], "scale": [1e-3, 1e-2]}
# the default power grid: dtype -> plants (issue 14's, plus the few-element plants in both dtypes)
POWER_PLAN = {"fp32": ["round_bits", "perturb", "flip_small", "bf16_sum", "few_wrong", "flip_few", "offset", "scale"],
              "bf16": ["round_bits_all", "bf16_sum_all", "flip_small", "few_wrong", "flip_few", "offset", "scale"]}


def _hookable(case, kind: str) -> list[torch.nn.Module]:
    try:
        from transformers.pytorch_utils import Conv1D  # GPT-2's projections
        conv1d = (Conv1D,)
    except ImportError:
        conv1d = ()
    kinds = (torch.nn.Linear, *conv1d) if kind in LINEAR_PLANTS else (torch.nn.Linear, *conv1d, torch.nn.Conv2d)
    return [m for m in case.model.modules() if isinstance(m, kinds)]


def plant(case, kind: str, strength: float):
    """Hook the middle Linear/Conv1D/Conv2d (Linear/Conv1D for LINEAR_PLANTS; every one for `*_all`; the
    last one for ON_HEAD plants) of the model so that its output is degraded in the compiled run only."""
    layers = _hookable(case, kind)
    if not layers:
        raise ValueError(f"no layer to plant {kind!r} in")
    targets = layers if kind.endswith(EVERY_LAYER) else [layers[-1] if kind in ON_HEAD else layers[len(layers) // 2]]
    if kind in LINEAR_PLANTS:
        fn = LINEAR_PLANTS[kind][0]

        def degrade(module, args, out):
            return fn(module, args[0], out, strength)
    else:
        fn = PLANTS[kind][0]

        def degrade(module, args, out):
            return fn(out, strength)

    def hook(module, args, out):
        return degrade(module, args, out) if torch.compiler.is_compiling() else out
    for target in targets:
        target.register_forward_hook(hook)
    return case


def strengths_of(kind: str, quick: bool) -> list[float]:
    return QUICK[kind] if quick else {**PLANTS, **LINEAR_PLANTS}[kind][1]


# ---- the two rules on one report ----------------------------------------------------------------------

def rmse_only_fails(row) -> bool:
    """torch._dynamo.utils.same(fp64_ref) on the row's metrics, with the applied policy tolerance as tol."""
    if row.vs_golden is None or row.reference_vs_golden is None or row.applied is None:
        # structural / exact rows: both rules agree; a row no rule could judge (no finite golden) is neither's FAIL
        return not row.passed and str(getattr(row.verdict.status, "value", row.verdict.status)) != "ERROR"
    if row.vs_reference.mismatches == 0:
        return False
    tol = row.applied.tolerance.atol
    m = 3.0 if row.dtype in ("float16", "bfloat16") or row.vs_golden.numel < 1000 else 2.0
    return row.vs_golden.rmse > m * row.reference_vs_golden.rmse + tol / 10


def summarize(report) -> dict:
    margins = {c: 0.0 for c in CHECKS}
    worst_row = {}
    for r in report.rows:
        for c, v in r.verdict.margins.items():
            if v > margins.get(c, 0.0):
                margins[c], worst_row[c] = v, r.name
    ratios = [r.error_ratio for r in report.rows if r.error_ratio is not None]
    # rows the golden checks judged (not passed by the tolerance shortcut, which torch.same shares)
    judged = [r for r in report.rows if r.error_ratio is not None
              and r.verdict.code not in ("within_tolerance", "bitwise_equal")]
    large = [r.error_ratio for r in judged if r.vs_golden.numel >= SMALL_TENSOR]
    return {"status": report.status, "fails": [f"{r.name}: {r.verdict.message}" for r in report.rows if not r.passed],
            "fail_codes": sorted({r.verdict.code for r in report.rows if not r.passed}),
            "max_judged_rmse_ratio": max((r.error_ratio for r in judged), default=0.0),
            "max_judged_rmse_ratio_large": max(large, default=0.0),
            "rmse_only_fails": [r.name for r in report.rows if rmse_only_fails(r)],
            "margins": margins, "margin_rows": worst_row, "max_rmse_ratio": max(ratios, default=0.0),
            "rows": len(report.rows), "decisions": [n for n in report.notes if n.startswith("decisions:")]}


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:400] if text else ''}"


def _detail(exc: BaseException, chars: int = 3000) -> str:
    """The message in full (a C++ compile error's compiler output follows its first line), and its cause's."""
    text = str(exc)
    if exc.__cause__ is not None and str(exc.__cause__) not in text:
        text += f"\ncaused by {type(exc.__cause__).__name__}: {exc.__cause__}"
    lines = text.splitlines()
    errors = [i for i, line in enumerate(lines) if re.search(r"\berror:", line)]
    if errors:  # a compiler's output: its error lines (and the line under each), not its warnings
        text = "\n".join([lines[0], *(f"{lines[i]}\n{lines[i + 1] if i + 1 < len(lines) else ''}" for i in errors)])
    return text if len(text) <= chars else text[:chars // 3] + "\n...\n" + text[-2 * chars // 3:]


def _where(exc: BaseException) -> str:
    """The innermost frame of the traceback outside torch (where a build or eager failure came from)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def one_run(family: str, dtype: str, train: bool, seed: int, device: str, plant_spec=None) -> dict:
    """One check of the (family, seed) draw. status: PASS / FAIL / ERROR from the report; SKIP when the model
    does not build or its eager run fails (`skip` says why); ERROR with `error` when the compiler or the
    golden fails."""
    from fusecheck.case import TargetError
    from fusecheck.check import CompileError, run_check
    out = {"family": family, "dtype": dtype, "train": train, "seed": seed}
    if plant_spec:
        out["plant"], out["strength"] = plant_spec
    t = time.perf_counter()
    try:
        case, config = make_case(family, seed)
        if plant_spec:
            case = plant(case, *plant_spec)
        module = isinstance(case.model, torch.nn.Module)
        out["params"] = sum(p.numel() for p in case.model.parameters()) if module else 0
    except Exception as exc:
        out.update(status="SKIP", skip=f"build: {_reason(exc)} ({_where(exc)})", config=config_of(family, seed))
        return _finish(out, t)
    out["config"] = config
    try:
        report = run_check(case, backend="inductor", dtype=dtype, device=device, train=train, seed=seed)
    except TargetError as exc:  # the model itself: fails in eager, draws random numbers, ...
        out.update(status="SKIP", skip=f"eager: {_reason(exc)}")
        return _finish(out, t)
    except CompileError as exc:
        out.update(status="ERROR", error=f"compile: {_reason(exc)}", error_detail=_detail(exc))
        return _finish(out, t)
    except Exception as exc:  # the golden, memory, the checker itself: reported, never dropped
        out.update(status="ERROR", error=f"{_reason(exc)} ({_where(exc)})", error_detail=_detail(exc))
        return _finish(out, t)
    out.update(summarize(report))
    out["phase_seconds"] = {k: round(v, 2) for k, v in report.seconds.items()}
    return _finish(out, t)


def _finish(out: dict, t: float) -> dict:
    out["seconds"] = round(time.perf_counter() - t, 1)
    return out


# ---- the grid: specs, shards, resume ---------------------------------------------------------------------

def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def parse_shard(text: str) -> tuple[int, int]:
    i, _, n = text.partition("/")
    i, n = int(i), int(n or 1)
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard {text}: expected i/n with 0 <= i < n")
    return i, n


def grid(part: str, families: list[str], seeds: list[int], dtypes: list[str], modes: list[str],
         power_plan: dict[str, list[str]], quick: bool) -> list[dict]:
    """Every run of the grid, in a fixed order (seed-major: a grid cut short has every family at the first
    seeds), as dicts of part/family/dtype/train/seed[/plant/strength]."""
    specs = []
    for seed in seeds:
        for family in families:
            if part in ("stability", "both"):
                specs += [{"part": "stability", "family": family, "dtype": d, "train": m == "train", "seed": seed}
                          for d in dtypes for m in modes]
            if part in ("power", "both"):
                specs += [{"part": "power", "family": family, "dtype": d, "train": True, "seed": seed,
                           "plant": k, "strength": s}
                          for d, kinds in power_plan.items() for k in kinds for s in strengths_of(k, quick)]
    return specs


def shard_of(specs: list[dict], shard: tuple[int, int]) -> list[dict]:
    i, n = shard
    return specs[i::n]


def key(r: dict) -> tuple:
    """What makes a run: a row with the same key (and the same drawn config) is not run again."""
    family = r.get("family") or f"hf:{r['model']}"  # issue 14's rows name a fixed model
    cid = r.get("config_id") or _config_id(r.get("config") or config_of(family, r["seed"]))
    return (r["part"], family, cid, r.get("dtype", "fp32"), bool(r["train"]), r["seed"], r.get("plant"),
            r.get("strength"))


def _config_id(config: dict) -> str:
    from models.families import config_id
    return config_id(config)


def read_rows(paths) -> list[dict]:
    rows = []
    for p in paths:
        if Path(p).exists():
            rows += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    return rows


def done_keys(paths) -> set[tuple]:
    return {key(r) for r in read_rows(paths)}


def append_row(path: str, row: dict) -> None:
    """One JSON line appended under an exclusive lock: shards of one grid may share the file."""
    line = json.dumps(row) + "\n"
    with open(path, "a") as f:
        try:
            import fcntl
            fcntl.flock(f, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        f.write(line)
        f.flush()


def _versions() -> dict:
    v = {"torch": torch.__version__}
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except ImportError:
        pass
    return v


def _line(r: dict) -> str:
    what = (f"power {r['plant']}={r['strength']:g}" if r["part"] == "power"
            else f"stability {'train' if r['train'] else 'fwd'}")
    head = f"{what} {r['family']:14s} {r['dtype']:5s} seed {r['seed']}: {r['status']}"
    if r["status"] == "SKIP":
        return f"{head} ({r['skip']}) ({r['seconds']}s)"
    if r["status"] == "ERROR" and "error" in r:
        return f"{head} ({r['error']}) ({r['seconds']}s)"
    tail = (f" torch rule {'FAIL' if r['rmse_only_fails'] else 'PASS'}"
            + (f" max judged rmse ratio {r['max_judged_rmse_ratio']:.3g}" if r["part"] == "power" else
               f" margins {json.dumps({k: round(v, 3) for k, v in r['margins'].items()})}")
            + f" ({r['seconds']}s)")
    return head + tail + "".join(f"\n    {f}" for f in r["fails"])


def _held_out_group(name: str) -> list[str]:
    """`any:all` (every held-out family), `any:vision` (the image classifiers alone), `any:encoder` (the text
    encoders alone), `any:seq2seq` (the encoder-decoders alone); [] for any other name."""
    from models.families import held_out
    kinds = {"any:all": None, "any:vision": "held-out-vision", "any:encoder": "held-out-encoder",
             "any:seq2seq": "held-out-seq2seq"}
    return held_out(kinds[name]) if name in kinds else []


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "summary":
        return summary_main(argv[1:])
    from models.families import FAMILIES, available
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seeds", default="0-9", help="e.g. 0-49 or 0,3,5")
    p.add_argument("--families", default="all",
                   help=f"comma-separated, or 'all' (every family that builds here); known: {','.join(FAMILIES)}; "
                        f"issue 14's fixed models as {','.join(FIXED)}; held-out families as any:<model type> "
                        f"(any transformers causal LM, image classifier, text encoder or seq2seq LM, shrunk: "
                        f"models/any_causal_lm.py, models/any_image_classifier.py, models/any_text_encoder.py, "
                        f"models/any_seq2seq_lm.py), any:all for all of them, any:vision for the image classifiers, "
                        f"any:encoder for the text encoders (masked LMs, else sequence classifiers), any:seq2seq "
                        f"for the encoder-decoders (seq2seq LMs)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--modes", default="fwd,train")
    p.add_argument("--part", default="stability", choices=["stability", "power", "both"])
    p.add_argument("--plants", help="power: these plants in every --power-dtypes (default: the plan "
                                    + "; ".join(f"{d}: {','.join(k)}" for d, k in POWER_PLAN.items()) + ")")
    p.add_argument("--power-dtypes", default="fp32,bf16", help="power is always --train, in these dtypes")
    p.add_argument("--quick", action="store_true", help="power: two or three strengths per plant (QUICK)")
    p.add_argument("--shard", type=parse_shard, default=(0, 1), metavar="I/N",
                   help="run only every N-th run of the grid, starting at the I-th (0-based)")
    p.add_argument("--jsonl", help="append each run here as it finishes (locked: shards may share one file); "
                                   "runs already there are skipped (a grid cut short resumes)")
    p.add_argument("--resume-from", nargs="*", default=[], metavar="JSONL",
                   help="more files whose runs count as done")
    p.add_argument("--jobs", type=int, default=1, help="run the grid as this many shard processes (--shard i/N "
                                                        "each, sharing --jsonl), then print the summary")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--dry-run", action="store_true", help="print how many runs this shard has left, and exit")
    p.add_argument("--table", metavar="JSONL", nargs="+", help="the same as `summary JSONL...`")
    a = p.parse_args(argv)
    if a.table:
        return summary_main(a.table)
    if a.jobs > 1:
        return run_jobs(a.jobs, argv, a.jsonl, a.shard)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and os.environ.get("FUSECHECK_GPU_SHARE") and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(float(os.environ["FUSECHECK_GPU_SHARE"]))
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("error: needs transformers (pip install -e '.[models]')", file=sys.stderr)
        return 2
    if a.families == "all":
        families, not_here = available()
        for name, why in not_here.items():
            print(f"note: family {name} not run here: {why}", flush=True)
    else:
        families = [f for name in a.families.split(",") for f in _held_out_group(name) or [name]]
        if unknown := [f for f in families if f not in FIXED and not _known(f)]:
            print(f"error: unknown families {unknown}; known: {', '.join([*FAMILIES, *FIXED])}", file=sys.stderr)
            return 2
    if a.plants:
        plants = a.plants.split(",")
        if unknown := [k for k in plants if k not in QUICK]:
            print(f"error: unknown plants {unknown}; known: {sorted(QUICK)}", file=sys.stderr)
            return 2
        plan = {d: plants for d in a.power_dtypes.split(",")}
    else:
        plan = {d: POWER_PLAN[d] for d in a.power_dtypes.split(",")}
    specs = shard_of(grid(a.part, families, parse_seeds(a.seeds), a.dtypes.split(","), a.modes.split(","), plan,
                          a.quick), a.shard)
    done = done_keys(([a.jsonl] if a.jsonl else []) + a.resume_from)
    todo = [s for s in specs if key(s) not in done]
    print(f"shard {a.shard[0]}/{a.shard[1]}: {len(specs)} runs, {len(specs) - len(todo)} already done, "
          f"{len(todo)} to run ({_versions()})", flush=True)
    if a.dry_run:
        return 0
    rows = []
    for s in todo:
        r = one_run(s["family"], s["dtype"], s["train"], s["seed"], a.device,
                    (s["plant"], s["strength"]) if s["part"] == "power" else None)
        from models.families import config_id
        r = {"part": s["part"], "device": a.device, **r, "config_id": config_id(r["config"]), **_versions()}
        rows.append(r)
        if a.jsonl:
            append_row(a.jsonl, r)
        print(_line(r), flush=True)
    if rows and not a.jsonl:
        print(tables(rows))
    return 0


def _known(name: str) -> bool:
    """A drawn family of models/families.py, held-out ones included."""
    from models.families import family
    try:
        family(name)
    except KeyError:
        return False
    return True


def run_jobs(jobs: int, argv: list[str], jsonl: str | None, shard: tuple[int, int]) -> int:
    """`jobs` processes, the i-th with `--shard i/jobs`, all appending to `jsonl`; then the summary of it."""
    import subprocess
    if not jsonl:
        print("error: --jobs needs --jsonl", file=sys.stderr)
        return 2
    if shard != (0, 1):
        print("error: --jobs and --shard do not combine (--jobs N is --shard 0/N ... N-1/N)", file=sys.stderr)
        return 2
    rest, skip = [], False
    for arg in argv:  # the same arguments, less --jobs
        if skip:
            skip = False
        elif arg == "--jobs":
            skip = True
        elif not arg.startswith("--jobs="):
            rest.append(arg)
    # one GPU shared by the shards: each gets its share of its memory, so one draw that needs more (an SSM's
    # scan at full chunk size) is that draw's OutOfMemory, not its neighbours'
    env = {**os.environ, "FUSECHECK_GPU_SHARE": f"{1 / jobs:.4f}"}
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *rest, "--shard", f"{i}/{jobs}"],
                              env=env) for i in range(jobs)]
    codes = [proc.wait() for proc in procs]
    if any(codes):
        print(f"shard exit codes: {codes}", file=sys.stderr)
    summary_main([jsonl])
    return max(codes)


# ---- the tables ---------------------------------------------------------------------------------------

def caught_without_rmse(r: dict) -> bool:
    """A FAIL in which no failing row failed the RMSE check: what the other checks (MeanRel, MaxRel per
    octave, small values) caught and an RMSE-only rule cannot (read from the rows' failure texts)."""
    return r["status"] == "FAIL" and not any(re.search(r"\brmse [-+.\de]+ vs eager", f) for f in r["fails"])


def _family(r: dict) -> str:
    return r.get("family") or f"hf:{r['model']}"


def _judged(r: dict) -> bool:
    """A run the verdict judged: PASS or FAIL (not SKIP, not ERROR: a compiler, golden or input error)."""
    return r["status"] in ("PASS", "FAIL")


def _order(families) -> list[str]:
    try:
        from models.families import FAMILIES
        known = [*FAMILIES, *FIXED]
    except ImportError:
        known = FIXED
    return sorted(families, key=lambda f: (known.index(f) if f in known else len(known), f))


def tables(rows: list[dict]) -> str:
    """Markdown: stability per (family, dtype, mode), with FAILs (seeds), SKIPs and ERRORs, torch-rule FAILs,
    runs whose golden followed a near-tied decision, and each check's largest ratio to its limit; the two rules
    on the same runs; every FAIL, SKIP and ERROR with its message; power per plant, dtype and strength, and
    by judged RMSE ratio."""
    from tabulate import tabulate
    out = []
    st = [r for r in rows if r["part"] == "stability"]
    if st:
        groups: dict[tuple, list[dict]] = {}
        for r in st:
            groups.setdefault((_family(r), r.get("dtype", "fp32"), "train" if r["train"] else "fwd"), []).append(r)
        order = _order({g[0] for g in groups})
        checks = checks_of(st)
        table = []
        for (family, dtype, mode), rs in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1:])):
            judged = [r for r in rs if _judged(r)]
            fails = sorted(r["seed"] for r in judged if r["status"] != "PASS")
            table.append([family, dtype, mode, len(rs), len(judged),
                          f"{len(fails)}" + (f" (seeds {','.join(map(str, fails))})" if fails else ""),
                          sum(r["status"] == "SKIP" for r in rs), sum(r["status"] == "ERROR" for r in rs),
                          sum(bool(r["rmse_only_fails"]) for r in judged),
                          sum(any("near-tied" in n for n in r.get("decisions", [])) for r in judged),
                          *[round(max((r["margins"].get(c, 0.0) for r in judged), default=0.0), 2) for c in checks],
                          round(sum(r["seconds"] for r in rs) / len(rs), 1),
                          round(max((r["seconds"] for r in rs), default=0.0), 1)])
        out.append(tabulate(table, headers=["family", "dtype", "mode", "runs", "judged", "FAIL", "SKIP", "ERROR",
                                            "torch rule FAIL", "decisions followed", *[f"max {c}" for c in checks],
                                            "mean s", "max s"], tablefmt="github"))
        out.append(two_rules(st, "stability: the verdict and torch's rule on the same runs"))
        out.append(check_maxima(st))
        out.append(listing(st))
    pw = [r for r in rows if r["part"] == "power"]
    if pw:
        out.append(power_table(pw))
        out.append(two_rules(pw, "power: the verdict and torch's rule on the same planted runs"))
        out.append(detection_by_ratio([r for r in pw if _judged(r)]))
        bad = [r for r in pw if not _judged(r)]
        if bad:
            out.append(listing(bad, title="power runs not judged"))
    return "\n\n".join(x for x in out if x)


def two_rules(rows: list[dict], title: str) -> str:
    """A 2x2 count: verdict PASS/FAIL against torch's rule PASS/FAIL, over the judged runs."""
    from tabulate import tabulate
    judged = [r for r in rows if _judged(r)]
    n = {(v, t): sum((r["status"] != "PASS") == v and bool(r["rmse_only_fails"]) == t for r in judged)
         for v in (False, True) for t in (False, True)}
    return f"**{title}** ({len(judged)} judged runs)\n\n" + tabulate(
        [["verdict PASS", n[False, False], n[False, True]], ["verdict FAIL", n[True, False], n[True, True]]],
        headers=["", "torch rule PASS", "torch rule FAIL"], tablefmt="github")


def check_maxima(rows: list[dict]) -> str:
    """Per check: the largest ratio to its limit over every judged run, and where (family dtype mode seed)."""
    from tabulate import tabulate
    judged = [r for r in rows if _judged(r)]
    table = []
    for c in checks_of(judged):
        best = max(judged, key=lambda r: r["margins"].get(c, 0.0), default=None)
        if best is None:
            continue
        table.append([c, round(best["margins"].get(c, 0.0), 3),
                      f"{_family(best)} {best.get('dtype', 'fp32')} {'train' if best['train'] else 'fwd'} "
                      f"seed {best['seed']}: {best.get('margin_rows', {}).get(c, '')}"])
    return tabulate(table, headers=["check", "largest ratio to its limit", "run: row"], tablefmt="github")


def listing(rows: list[dict], title: str = "FAIL, SKIP and ERROR runs") -> str:
    """Every run that did not pass, with its reason (FAIL: the first failing rows' messages)."""
    bad = [r for r in rows if r["status"] != "PASS"]
    if not bad:
        return ""
    lines = [f"**{title}** ({len(bad)})", ""]
    for r in sorted(bad, key=lambda r: (r["status"], _family(r), r.get("dtype", ""), r["train"], r["seed"])):
        what = f"{_family(r)} {r.get('dtype', 'fp32')} {'train' if r['train'] else 'fwd'} seed {r['seed']}"
        if r.get("plant"):
            what += f" {r['plant']}={r['strength']:g}"
        why = r.get("skip") or r.get("error") or "; ".join(r.get("fails", [])[:3]) + (
            f" (+{len(r['fails']) - 3} more rows)" if len(r.get("fails", [])) > 3 else "")
        lines.append(f"- {r['status']} {what}: {why}")
    return "\n".join(lines)


def power_table(rows: list[dict]) -> str:
    from tabulate import tabulate
    power: dict[tuple, list[dict]] = {}
    for r in rows:
        power.setdefault((r["plant"], r.get("dtype", "fp32"), r["strength"]), []).append(r)

    def judged(r, key="max_judged_rmse_ratio"):
        return r.get(key, 0.0)
    table = []
    for (k, d, s), rs in sorted(power.items()):
        ok = [r for r in rs if _judged(r)]
        table.append([k, d, s, len(rs), len(ok), sum(r["status"] != "PASS" for r in ok),
                      sum(bool(r["rmse_only_fails"]) for r in ok), sum(caught_without_rmse(r) for r in ok),
                      sum(bool(r["rmse_only_fails"]) and r["status"] == "PASS" for r in ok),
                      round(min((judged(r) for r in ok), default=0.0), 2),
                      round(max((judged(r) for r in ok), default=0.0), 2),
                      round(max((judged(r) for r in ok if r["status"] == "PASS"), default=0.0), 2),
                      round(max((judged(r, "max_judged_rmse_ratio_large") for r in ok if r["status"] == "PASS"),
                                default=0.0), 2)])
    return tabulate(table, headers=["plant", "dtype", "strength", "runs", "judged", "verdict caught",
                                    "torch rule caught", "caught without RMSE", "torch rule only",
                                    "min judged ratio", "max judged ratio", "largest missed",
                                    f"largest missed (>= {SMALL_TENSOR:g} el.)"], tablefmt="github")


RATIO_BINS = (0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, math.inf)


def detection_by_ratio(runs: list[dict]) -> str:
    """Planted runs binned by their largest judged RMSE ratio (compiled's RMSE over eager's, on rows outside
    the tolerance; a run with every row within it is not counted), over every tensor and over tensors of
    SMALL_TENSOR elements or more: how many were caught.
    The smallest bin caught in full, and every bin above it, is the ratio the verdict catches 100%."""
    from tabulate import tabulate
    out = []
    for lo, hi in zip(RATIO_BINS, RATIO_BINS[1:]):
        row = [f"[{lo:g}, {hi:g})"]
        for k in ("max_judged_rmse_ratio", "max_judged_rmse_ratio_large"):
            rs = [r for r in runs if lo <= r.get(k, 0.0) < hi and r.get(k, 0.0) > 0]  # 0: nothing judged
            row += [len(rs), sum(r["status"] != "PASS" for r in rs)]
        out.append(row)
    return tabulate(out, headers=["judged RMSE ratio", "runs (any tensor)", "caught",
                                  f"runs (tensors >= {SMALL_TENSOR:g} el.)", "caught"], tablefmt="github")


def summary(rows: list[dict]) -> dict:
    """The headline numbers as a dict."""
    st = [r for r in rows if r["part"] == "stability"]
    judged = [r for r in st if _judged(r)]
    out = {"stability_runs": len(st), "judged": len(judged), "skipped": sum(r["status"] == "SKIP" for r in st),
           "errors": sum(r["status"] == "ERROR" for r in st),
           "verdict_fail_runs": sum(r["status"] != "PASS" for r in judged),
           "rmse_only_fail_runs": sum(bool(r["rmse_only_fails"]) for r in judged),
           "largest_margin_per_check": {c: max((r["margins"].get(c, 0.0) for r in judged), default=0.0)
                                        for c in checks_of(judged)},
           "families": len({_family(r) for r in st})}
    power = {}
    for r in rows:
        if r["part"] != "power" or not _judged(r):
            continue
        e = power.setdefault(f"{r['plant']}={r['strength']:g} {r.get('dtype', 'fp32')}",
                             {"runs": 0, "verdict_caught": 0, "rmse_only_caught": 0})
        e["runs"] += 1
        e["verdict_caught"] += r["status"] != "PASS"
        e["rmse_only_caught"] += bool(r["rmse_only_fails"])
    out["power"] = power
    return out


def summary_main(paths: list[str]) -> int:
    p = argparse.ArgumentParser(prog="verdict_stability.py summary",
                                description="print the tables of JSONL results (any number of files)")
    p.add_argument("jsonl", nargs="+")
    p.add_argument("--json", action="store_true", help="also print the headline numbers as JSON")
    a = p.parse_args(paths)
    rows = read_rows(a.jsonl)
    if missing := [f for f in a.jsonl if not Path(f).exists()]:
        print(f"error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    # a row run twice (two shards, or a resumed file copied back) counts once: the last one
    unique = {key(r): r for r in rows}
    print(f"{len(unique)} runs ({len(rows) - len(unique)} duplicates dropped) from {len(a.jsonl)} file(s); "
          f"devices {sorted({r.get('device', '?') for r in rows})}, "
          f"torch {sorted({r.get('torch', '?') for r in rows})}")
    print()
    print(tables(list(unique.values())))
    if a.json:
        print(json.dumps(summary(list(unique.values())), indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
