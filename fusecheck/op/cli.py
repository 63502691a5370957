"""`fusecheck op FILE.py:Spec`: gate a hand-written fused kernel against the unfused chain it replaces.

Nothing heavy is imported at the top: `fusecheck op -h` must not load torch.
"""
from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace

from fusecheck import dtypes
from fusecheck.cli.repeats import add_repeat_arguments, repeats

DEFAULT_REPEAT = 10  # as `dist`: enough to tell a frequent race from a constant bug; --rate-bound for a bound


def dtype_list(text: str) -> list[str]:
    """--dtype fp32,bf16,fp16 -> ["fp32", "bf16", "fp16"] (long spellings accepted, duplicates dropped)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if dtypes.short_name(t) not in dtypes.RUN_DTYPES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: dtypes are a comma-separated list of {dtypes.known()}")
    return list(dict.fromkeys(dtypes.short_name(t) for t in names))


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.cli.check import add_html_argument
    from fusecheck.cli.main import seed
    p.add_argument("target", metavar="FILE.py:Spec", help="a fusecheck.op.OpSpec subclass (docs/op.md)")
    p.add_argument("--dtype", type=dtype_list, default=None, metavar="LIST",
                   help="comma-separated dtypes, all checked in this one call (default: the spec's dtypes, "
                        "fp32,bf16,fp16)")
    p.add_argument("--shape", action="append", default=[], metavar="k=v,...",
                   help="a shape dict for make_inputs, e.g. m=5,k=24,n=50 (repeatable; default: the spec's shapes)")
    p.add_argument("--spec-arg", action="append", default=[], metavar="k=v",
                   help="constructor argument of the spec, typed by its annotations (int/float/bool/str) or read "
                        "as JSON; one per flag")
    add_repeat_arguments(p, DEFAULT_REPEAT)
    p.add_argument("--train", action="store_true", help="also run backward through both and judge every gradient")
    p.add_argument("--no-probes", dest="probes", action="store_false",
                   help="skip the NaN/Inf and huge/tiny/subnormal probes")
    p.add_argument("--device", default="cpu", help="cpu, cuda, npu (with torch_npu) or mps")
    p.add_argument("--seed", type=seed, default=0, help="seed of the inputs and cotangents (0..2^63-1)")
    p.add_argument("--policy", default=None, help="tolerance policy file (default: [tool.fusecheck] of pyproject.toml)")
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="write the full report as JSON")
    p.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML (one testcase per row)")
    add_html_argument(p)
    p.add_argument("-v", "--verbose", action="store_true", help="every row (probes too) and every column")


def parse_shapes(items: list[str]) -> list[dict]:
    from fusecheck.distributed.cli import _shape
    from fusecheck.op.spec import SpecError
    try:
        return [_shape(s) for s in items]
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def write_page(data: dict, path: str) -> None:
    """check's HTML page (the rows are check's rows), titled as the op report it is."""
    from pathlib import Path

    from fusecheck.report.html import RENDERERS
    Path(path).write_text(RENDERERS["check"](data).replace("fusecheck check: ", "fusecheck op: ", 2), encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    from fusecheck.report.on_error import target_id
    from fusecheck.op.report import format_op_report
    from fusecheck.op.run import check_op
    from fusecheck.op.spec import KernelError, SpecError, load_spec, spec_folder_on_path
    from fusecheck.cli.report_paths import write_reports
    from fusecheck.policy import Policy
    from fusecheck.report.json_report import write_json
    from fusecheck.report.junit import write_junit
    from fusecheck.cli.watchdog import phase

    started = time.monotonic()
    n, how = repeats(args, DEFAULT_REPEAT)
    try:
        policy = Policy.load(args.policy)
        phase(f"loading {args.target}")
        with spec_folder_on_path(args.target):
            spec = load_spec(args.target, args.spec_arg)
            phase(f"checking {args.target}")
            report = check_op(spec, ref=args.target, dtypes=args.dtype, shapes=parse_shapes(args.shape) or None,
                              repeat=n, train=args.train, seed=args.seed, policy=policy, device=args.device,
                              probes=args.probes, requested_rate=args.rate_bound)
    except SpecError as exc:
        print(f"fusecheck op: error: {exc}", file=sys.stderr)
        return 2
    except KernelError as exc:
        print(f"fusecheck op: error: the kernel under test raised: {exc}", file=sys.stderr)
        return 3
    if how:
        report.notes.append(how)
    data = report.to_dict()
    write_reports([
        ("--json", args.json_path, lambda: write_json(data, args.json_path)),
        ("--junit", args.junit, lambda: write_junit(SimpleNamespace(rows=report.all_rows, case=report.case,
                                                                    dtype=report.dtype), args.junit,
                                                    suite=target_id(args.target), seconds=time.monotonic() - started)),
        ("--html", args.html, lambda: write_page(data, args.html))],
        verdict=f"{report.status} (exit {report.exit_code})")
    print(format_op_report(report, verbose=args.verbose))
    return report.exit_code
