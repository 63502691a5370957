"""fusecheck against torch's own accuracy check, on the same model: wall time, peak memory and both verdicts.

The anchor is what `benchmarks/dynamo/<suite>.py --accuracy` does in torch's repository (common.py's
`check_accuracy`): a whole fp64 deep copy of the model and inputs (made from the model as built, before the
cast to the run dtype, as torch does) runs first; then eager runs twice on fresh deep copies and must agree
bitwise; then `torch.compile(model_iter_fn)` runs on another copy, and `torch._dynamo.utils.same(eager,
compiled, fp64_ref, tol=...)` judges (allclose, else RMSE against fp64 at most 3x eager's plus tol/10). Each
run is `--iterations-per-run` iterations (torch's default 2). With `--train` an iteration is forward, the
loss `reduce_to_scalar_loss`, backward, and the results are `collect_results` (output, loss, every parameter's
gradient, the parameters, the buffers, the input gradients); no optimizer step (torch takes none on CPU).
The model stays in eval mode on both sides (fusecheck's rule; no dropout to make eager differ from itself).

fusecheck is `fusecheck.check.run_check(case, ...)`, the call `fusecheck check` makes, with `--golden`.

Each measurement runs in its own fresh process (`--child`), so that its peak is its own: the model is built
there from the same target and seed, then the baseline is taken, then the check runs. On CPU the peak is the
resident set's high-water mark (getrusage's ru_maxrss; fusecheck resets the mark per phase through
/proc/self/clear_refs, so its peak is the larger of ru_maxrss at the end and its report's per-phase peaks);
on CUDA torch.cuda.max_memory_allocated after reset_peak_memory_stats once the model is built. Both
processes compile cold (a fresh TORCHINDUCTOR_CACHE_DIR each, one compile thread). A process over
`--timeout` is killed and its row says TIMEOUT; one that runs out of memory (an allocation error, the kernel's
OOM killer, or the resident set over `--max-rss-gib`, which is killed) says OOM.

    python benchmarks/vs_torch_accuracy.py --dtype fp32,bf16 --golden auto,whole --out r.md --jsonl r.jsonl
    python benchmarks/vs_torch_accuracy.py --targets models/mlp.py:build --train --device cuda
    python benchmarks/vs_torch_accuracy.py --render r.jsonl --out r.md      # the table of rows measured earlier

Results: docs/benchmarks.md ("fusecheck against torch's accuracy check").
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = ("fusecheck/builtin/transformer_block.py:build", "models/wide_blocks.py:build_half_billion")
CHILD_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
GIB = 2 ** 30


# ---------------------------------------------------------------------------------------------- the children

def _target_path(target: str) -> str:
    file, _, name = target.rpartition(":")
    return f"{(ROOT / file).resolve()}:{name}"


def _preload() -> None:
    """The same modules in both children before the baseline (torch's dynamo and Inductor, fusecheck's check),
    so that what a peak adds over the baseline is the check's own work, not one side's imports."""
    import torch._dynamo.testing  # noqa: F401
    import torch._dynamo.utils  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import fusecheck.check  # noqa: F401


def _build(a):
    """The case from the target and seed, on the device (the baseline is taken after it exists there; fusecheck's
    own move to the device is then a no-op)."""
    import torch
    from torch.utils._pytree import tree_map
    from fusecheck.case import Case, load_target
    _preload()
    case = load_target(_target_path(a.target), seed=a.seed)

    def move(tree):
        return tree_map(lambda x: x.to(a.device) if isinstance(x, torch.Tensor) else x, tree)
    model = case.model.to(a.device) if isinstance(case.model, torch.nn.Module) else case.model
    case = Case(model, move(case.inputs), case.name, move(case.kwargs))
    params = {id(p): p for p in case.model.parameters()} if isinstance(case.model, torch.nn.Module) else {}
    return case, sum(p.numel() for p in params.values())


class _Memory:
    """The peak since `start()`: resident set on CPU (absolute and over the baseline), allocator on CUDA."""

    def __init__(self, device: str):
        import torch
        self.torch, self.cuda = torch, device.startswith("cuda")

    @staticmethod
    def rss_peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux

    @staticmethod
    def cpu_seconds() -> float:
        """CPU time of this process and its waited-for children (the C++ compiler): steadier than wall time when
        other work shares the cores."""
        return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

    def start(self) -> None:
        self.cpu0 = self.cpu_seconds()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
            self.base = self.torch.cuda.memory_allocated()
        else:
            self.base = self.rss_peak()

    def peak(self) -> int:
        if self.cuda:
            self.torch.cuda.synchronize()
            return self.torch.cuda.max_memory_allocated()
        return self.rss_peak()


def _is_oom(exc: BaseException) -> bool:
    import torch
    text = str(exc)
    return (isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or type(exc).__name__ == "OutOfMemory"
            or "can't allocate memory" in text or "out of memory" in text.lower())


def _tolerance(train: bool) -> float:
    """torch's huggingface.py default (`get_tolerance_and_cosine_flag`): 1e-2 training, 1e-3 inference."""
    return 1e-2 if train else 1e-3


def child_anchor(a) -> dict:
    import copy

    import torch
    import torch._dynamo
    from torch._dynamo.testing import collect_results, reduce_to_scalar_loss, reset_rng_state
    from torch._dynamo.utils import clone_inputs, same
    from torch.utils._pytree import tree_map
    from fusecheck.devices import resolve_dtype

    case, n_params = _build(a)
    model = case.model.eval()
    kwargs = dict(case.kwargs or {})
    inputs = list(case.inputs)
    if a.train:  # input gradients are collected too (collect_results); clone_inputs keeps requires_grad
        inputs = [x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in inputs]
    mem = _Memory(a.device)
    mem.start()
    seconds: dict[str, float] = {}
    peaks: dict[str, int] = {}
    errors: list[str] = []
    t0 = time.perf_counter()

    def forward_pass(mod, inp, collect_outputs=True):
        return mod(*inp, **kwargs)

    def forward_and_backward_pass(mod, inp, collect_outputs=True):
        cloned = clone_inputs(inp)
        mod.zero_grad(True)
        pred = mod(*cloned, **kwargs)
        loss = reduce_to_scalar_loss(pred)
        loss.backward()
        return collect_results(mod, pred, loss, cloned) if collect_outputs else None

    iter_fn = forward_and_backward_pass if a.train else forward_pass

    def run_n(mod, inp, fn):
        for _ in range(a.iterations_per_run - 1):
            fn(mod, inp, collect_outputs=False)
        return fn(mod, inp, collect_outputs=True)

    def cast(mod, inp, dtype):  # torch's cast_to: the module in place, floating inputs copied
        return mod.to(dtype), [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                               for x in inp]

    grad = torch.enable_grad if a.train else torch.no_grad
    phase = "fp64"

    def timed(name, fn):
        nonlocal phase
        phase = name
        t = time.perf_counter()
        try:
            return fn()
        finally:
            seconds[name] = round(time.perf_counter() - t, 3)
            peaks[name] = mem.peak()

    status, detail = "PASS", ""
    try:
        with grad():
            def fp64():
                m64, i64 = cast(copy.deepcopy(model), clone_inputs(inputs), torch.float64)
                out = run_n(m64, i64, iter_fn)
                return tree_map(lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point()
                                else x, out)
            fp64_outputs = timed("fp64", fp64)
            run_model = model
            if a.dtype:
                run_model, cast_inputs = cast(model, inputs, resolve_dtype(a.dtype))
            else:
                cast_inputs = inputs

            def eager():
                reset_rng_state()
                return run_n(copy.deepcopy(run_model), clone_inputs(cast_inputs), iter_fn)
            correct = timed("eager", eager)
            same_eager = timed("judge_eager", functools.partial(
                same, correct, timed("eager_rerun", eager), fp64_ref=None, cos_similarity=False, tol=0,
                log_error=lambda *m: errors.append(m[0] % m[1:])))
            if not same_eager:
                status, detail = "FAIL", "eager_two_runs_differ"
            else:
                def compiled():
                    reset_rng_state()
                    torch._dynamo.reset()
                    fn = torch.compile(iter_fn, backend=a.backend)
                    return run_n(copy.deepcopy(run_model), cast_inputs, fn)
                new = timed("compiled", compiled)
                ok = timed("judge", lambda: same(correct, new, fp64_outputs, tol=a.tol,
                                                 log_error=lambda *m: errors.append(m[0] % m[1:])))
                status, detail = ("PASS", "pass") if ok else ("FAIL", "fail_accuracy")
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        seconds.setdefault(phase, round(time.perf_counter() - t0, 3))
        if _is_oom(exc):
            status, detail = "OOM", f"{phase}: {type(exc).__name__}: {str(exc)[:300]}"
        else:
            status, detail = "ERROR", f"{phase}: {type(exc).__name__}: {str(exc)[:300]}"
    wall = time.perf_counter() - t0
    return {"status": status, "detail": detail, "check_seconds": round(wall, 3), "phase_seconds": seconds,
            "phase_peak_bytes": peaks, "peak_bytes": mem.peak(), "baseline_bytes": mem.base, "params": n_params,
            "cpu_seconds": round(mem.cpu_seconds() - mem.cpu0, 2),
            "tol": a.tol, "iterations_per_run": a.iterations_per_run, "same_log": errors[:5],
            "torch": torch.__version__}


def child_fusecheck(a) -> dict:
    import torch
    from fusecheck.check import run_check
    from fusecheck.policy import Policy

    case, n_params = _build(a)
    mem = _Memory(a.device)
    mem.start()
    t0 = time.perf_counter()
    report, status, detail = None, "ERROR", ""
    try:
        report = run_check(case, backend=a.backend, dtype=a.dtype, device=a.device, train=a.train,
                           policy=Policy.load(None, search_from=ROOT), seed=a.seed, golden=a.golden)
        status = report.status
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        status = "OOM" if _is_oom(exc) else "ERROR"
        detail = f"{type(exc).__name__}: {str(exc)[:300]}"
    wall = time.perf_counter() - t0
    peak = mem.peak()
    data = report.to_dict() if report is not None else {}
    phase_mem = data.get("memory") or {}
    key = "device_peak_bytes" if mem.cuda else "host_peak_rss_bytes"
    phase_peaks = {k: v.get(key) or v.get("host_peak_rss_bytes_since_start") for k, v in phase_mem.items()}
    peak = max([peak] + [v for v in phase_peaks.values() if v])  # the per-phase resets hide earlier peaks
    phases = {k: round(v, 3) for k, v in (data.get("seconds") or {}).items()}
    return {"status": status, "detail": detail, "check_seconds": round(wall, 3), "phase_seconds": phases,
            "outside_phases_seconds": round(wall - sum(phases.values()), 3) if phases else None,
            "phase_peak_bytes": phase_peaks, "peak_bytes": peak, "baseline_bytes": mem.base, "params": n_params,
            "cpu_seconds": round(mem.cpu_seconds() - mem.cpu0, 2),
            "golden_mode": data.get("golden_mode"), "model_bytes": data.get("model_bytes"),
            "rows": len(report.rows) if report else 0,
            "failed_rows": [r.name for r in report.rows if not r.passed][:5] if report else [],
            "torch": torch.__version__}


def child_main(a) -> int:
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    result = (child_anchor if a.child == "anchor" else child_fusecheck)(a)
    Path(a.result).write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------------------------------------- the parent

def _commit() -> str | None:
    """The commit the children run (with `+` when fusecheck/ differs from it), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fusecheck"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else None


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(tool: str, target: str, dtype: str | None, a, golden: str | None) -> dict:
    """One child process: its result, or TIMEOUT / OOM / ERROR with the reason."""
    row = {"tool": tool, "target": target, "device": a.device, "dtype": dtype or "own", "train": a.train,
           "seed": a.seed, "backend": a.backend, "golden": golden, "commit": a.commit, "note": a.note, "torch": None,
           "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    cache = tempfile.mkdtemp(prefix="vs_torch_cache_")
    result = Path(cache) / "result.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", tool, "--target", target, "--device", a.device,
            "--seed", str(a.seed), "--backend", a.backend, "--result", str(result),
            "--iterations-per-run", str(a.iterations_per_run), "--threads", str(a.threads or 0)]
    argv += ["--dtype", dtype] if dtype else []
    argv += ["--train"] if a.train else []
    argv += ["--golden", golden] if golden else []
    argv += ["--tol", str(a.tol)] if a.tol is not None else []
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "TORCHINDUCTOR_CACHE_DIR": str(Path(cache) / "inductor"), "TRITON_CACHE_DIR": str(Path(cache) / "triton")}
    limit = a.max_rss_gib * GIB if a.max_rss_gib else 0.85 * _mem_available()
    over = threading.Event()
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def watch():  # a shared host: a child past the limit is ended here, not by the kernel's OOM killer elsewhere
        while proc.poll() is None:
            if limit and _rss(proc.pid) > limit:
                over.set()
                os.killpg(proc.pid, signal.SIGKILL)
                return
            time.sleep(0.2)
    threading.Thread(target=watch, daemon=True).start()
    try:
        out, _ = proc.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        row.update(status="TIMEOUT", detail=f"over --timeout {a.timeout:g} s")
    row["process_seconds"] = round(time.perf_counter() - t, 2)
    if "status" not in row:
        if result.exists():
            row.update(json.loads(result.read_text()))
        elif over.is_set():
            row.update(status="OOM", detail=f"resident set over {limit / GIB:.1f} GiB (--max-rss-gib): killed")
        elif proc.returncode == -signal.SIGKILL:
            row.update(status="OOM", detail="killed (SIGKILL: the kernel's OOM killer?)")
        else:
            row.update(status="ERROR", detail=f"exit {proc.returncode}: {out[-600:]}")
    shutil.rmtree(cache, ignore_errors=True)
    if row["status"] not in ("PASS", "FAIL") or a.verbose:
        sys.stderr.write(out[-3000:])
    return row


def _gib(n) -> str:
    return "-" if not n else f"{n / GIB:.2f}"


def _ratio(x, y) -> str:
    return "-" if not x or not y else f"{x / y:.2f}x"


def _short(target: str) -> str:
    file, _, name = target.rpartition(":")
    return f"{Path(file).stem}:{name}"


def _params(n) -> str:
    return "-" if not n else (f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}")


def _verdict(r) -> str:
    """PASS, FAIL, OOM, TIMEOUT or ERROR, with the anchor's reason or the phase it stopped in."""
    if r is None:
        return "-"
    why = (r.get("detail") or "").split(":")[0]
    return r["status"] + (f" ({why})" if r["status"] != "PASS" and why and why != "fail_accuracy" else "")


def table(rows: list[dict]) -> str:
    """One line per fusecheck measurement, beside the anchor of the same target, dtype, mode, device and seed
    measured last before it (the same run's; rows of several runs appended to one file keep their own
    anchors). Wall: the check alone, after the model build. Peaks: over the child's baseline (after imports and
    the model build), then absolute. Ratios: fusecheck over the anchor (wall, CPU time, peak over baseline)."""
    from tabulate import tabulate

    def key(r):
        return (r["target"], r["device"], r["dtype"], r["train"], r["seed"], r["backend"])
    latest = {key(r): r for r in rows if r["tool"] == "anchor"}
    before: dict = {}
    lines = []
    for r in rows:
        if r["tool"] == "anchor":
            before[key(r)] = r
        if r["tool"] != "fusecheck":
            continue
        an = before.get(key(r), latest.get(key(r)))
        params = r.get("params") or (an or {}).get("params")

        def peak(x):
            if not x or not x.get("peak_bytes"):
                return "-"
            return f"{_gib(x['peak_bytes'] - x['baseline_bytes'])} ({_gib(x['peak_bytes'])})"

        def wall(x):
            return "-" if not x or not x.get("check_seconds") else f"{x['check_seconds']:.1f}"

        def over(x):
            return x["peak_bytes"] - x["baseline_bytes"] if x and x.get("peak_bytes") else None
        mode = f"{r['dtype']} {'train' if r['train'] else 'fwd'}, golden {r['golden']}"
        if r.get("golden_mode"):
            mode += f" ({r['golden_mode'].split(' ')[0]})"
        if r.get("commit"):
            mode += f" @{r['commit']}"
        lines.append([_short(r["target"]), _params(params), mode, wall(an), peak(an), wall(r), peak(r),
                      _ratio(r.get("check_seconds"), (an or {}).get("check_seconds")),
                      _ratio(r.get("cpu_seconds"), (an or {}).get("cpu_seconds")), _ratio(over(r), over(an)),
                      _verdict(an), _verdict(r)])
    head = ["model", "params", "mode", "anchor wall s", "anchor peak GiB", "fusecheck wall s", "fusecheck peak GiB",
            "wall fc/anchor", "CPU fc/anchor", "peak fc/anchor", "anchor verdict", "fusecheck verdict"]
    return tabulate(lines, head, tablefmt="github", disable_numparse=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help="comma list of FILE.py:NAME (default: the built-in transformer block and the 0.52 B wide stack)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", help="comma list of fp32, bf16 (each measured)")
    p.add_argument("--train", action="store_true", help="also the backward pass and every gradient")
    p.add_argument("--golden", default="auto", help="fusecheck's --golden: comma list of auto, whole, streamed")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tol", type=float, default=None, help="the anchor's tol (default: torch's huggingface.py "
                   "default, 1e-3 inference, 1e-2 training)")
    p.add_argument("--iterations-per-run", type=int, default=2, help="the anchor's iterations per run (torch's 2)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    p.add_argument("--max-rss-gib", type=float, default=None,
                   help="kill a child over this resident set and call it OOM (default: 85%% of MemAvailable)")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each child (default: torch's)")
    p.add_argument("--only", choices=["anchor", "fusecheck"], default=None, help="run one side only")
    p.add_argument("--out", default=None, metavar="FILE.md",
                   help="write the table (of every row in --jsonl, when given)")
    p.add_argument("--jsonl", default=None, help="append one JSON line per measurement")
    p.add_argument("--render", default=None, metavar="JSONL", help="run nothing: the table of these rows")
    p.add_argument("--note", default=None, help="a note kept in every JSON row (e.g. the tree measured)")
    p.add_argument("--commit", default=None, help="the fusecheck commit measured (default: git's HEAD here)")
    p.add_argument("-v", "--verbose", action="store_true", help="each child's output on stderr")
    p.add_argument("--child", choices=["anchor", "fusecheck"], help=argparse.SUPPRESS)
    p.add_argument("--target", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        a.dtype = a.dtype if a.dtype not in (None, "own") else None
        a.tol = a.tol if a.tol is not None else _tolerance(a.train)
        return child_main(a)
    a.commit = a.commit or _commit()
    if a.render:
        rows = [json.loads(x) for x in Path(a.render).read_text().splitlines() if x.strip()]
    else:
        rows = []
        for target in [t.strip() for t in a.targets.split(",") if t.strip()]:
            for dtype in [d.strip() for d in a.dtype.split(",") if d.strip()]:
                todo = [("anchor", None)] if a.only != "fusecheck" else []
                if a.only != "anchor":
                    todo += [("fusecheck", g.strip()) for g in a.golden.split(",") if g.strip()]
                for tool, golden in todo:
                    print(f"== {tool} {_short(target)} {dtype} {'train' if a.train else 'fwd'}"
                          f"{f' golden {golden}' if golden else ''}", flush=True)
                    r = measure(tool, target, dtype, a, golden)
                    print(json.dumps({k: v for k, v in r.items() if k not in ("same_log",)}), flush=True)
                    rows.append(r)
                    if a.jsonl:
                        Path(a.jsonl).parent.mkdir(parents=True, exist_ok=True)
                        with open(a.jsonl, "a") as f:
                            f.write(json.dumps(r) + "\n")
        if a.jsonl:
            rows = [json.loads(x) for x in Path(a.jsonl).read_text().splitlines() if x.strip()]
    text = table(rows)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
