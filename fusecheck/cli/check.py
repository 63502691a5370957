"""`fusecheck check`: the core check of one target, as table, JSON, JUnit and HTML, gated by exit code.

Nothing heavy is imported at the top: `fusecheck check -h` must not load torch.
"""
from __future__ import annotations

import argparse
import time

from fusecheck import dtypes
from fusecheck.report.on_error import error_reports_for, reported_on_failure, target_id

DTYPE_CHOICES = dtypes.RUN_DTYPES  # the long spellings are accepted and mapped to these (fusecheck/dtypes.py)


def dtype_name(text: str) -> str:
    return dtypes.short_name(text) or text


def add_dtype_argument(p: argparse.ArgumentParser, choices: tuple[str, ...] = DTYPE_CHOICES,
                       default: str | None = None, help: str = "cast the model and its floating inputs to this dtype"
                       ) -> None:
    p.add_argument("--dtype", type=dtype_name, choices=choices, default=default, help=help)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments every model-level subcommand (check, matrix, bisect) shares."""
    p.add_argument("target", nargs="?", default=None,
                   help="FILE.py:NAME, where NAME() returns a fusecheck Case or (model, inputs) "
                        "(default: a built-in transformer block)")
    p.add_argument("--backend", default="inductor",
                   help="inductor, aot_eager, aot_eager_decomp_partition, eager, or your own dynamo backend as "
                        "FILE.py:NAME")
    add_dtype_argument(p)
    p.add_argument("--device", default="cpu", help="cpu, cuda, npu (with torch_npu) or mps")
    from fusecheck.cli.main import seed
    p.add_argument("--seed", type=seed, default=0, help="seed of the weights, inputs and cotangents (0..2^63-1)")
    p.add_argument("--train", action="store_true",
                   help="also compare the gradients of parameters and inputs (the model stays in eval mode)")
    p.add_argument("--policy", default=None,
                   help="tolerance policy file, TOML or JSON (default: [tool.fusecheck] of pyproject.toml)")
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="write the full report as JSON")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also print the policy, every note and every column of the table")


def add_html_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", default=None, metavar="FILE",
                   help="write a self-contained HTML report (charts, no network needed)")


class _Renamed(argparse.Action):
    """--disable applied the toggle it named (`--disable emulate_precision_casts` turned emulation on)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed --toggle: a toggle applies the change its name says "
                     "(`fusecheck toggles` lists them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--toggle", "--toggles", dest="toggles", default="", metavar="NAME[,NAME]",
                   help="apply these fusion toggles, comma-separated; each does what its name says "
                        "(see `fusecheck toggles`)")
    p.add_argument("--disable", action=_Renamed, help=argparse.SUPPRESS)
    p.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML (one testcase per output)")
    add_html_argument(p)
    p.add_argument("--baseline", default=None, metavar="FILE",
                   help="a report JSON of known failures: only new failures fail the gate")
    add_scale_arguments(p)
    from fusecheck.cli.repeats import add_repeat_arguments
    add_repeat_arguments(p, 1)
    for action in p._actions:  # the shared help speaks of op's dtypes and shapes; a check is one target
        if action.dest == "repeat":
            action.help = ("run the whole check N times, each judged, with fresh weights, inputs and cotangents "
                           "(seed + i); the report gives the failure rate, its Wilson 95%% bound and its unit")
    from fusecheck.sharded.launch import add_sharded_arguments
    add_sharded_arguments(p)


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    """How a large model is checked: the streamed golden, its blocks, regional compilation, where fp64 runs."""
    p.add_argument("--golden", choices=["auto", "streamed", "whole"], default="auto",
                   help="auto (default): the whole fp64 copy while it is at most 1 GiB and fits, else "
                        "(for a model with blocks) stream it block by block; streamed/whole force one")
    p.add_argument("--blocks", default=None, metavar="GLOB",
                   help="the model's blocks, as a glob of module names (e.g. 'model.layers.*'); "
                        "default: the children of its largest layer stack: an nn.ModuleList, or an "
                        "nn.Sequential / nn.ModuleDict of one class")
    p.add_argument("--regional", action="store_true",
                   help="compile each block on its own (regional compilation): per-block verdicts then judge "
                        "compiled blocks too")
    p.add_argument("--golden-device", default=None, metavar="DEVICE",
                   help="run the fp64 golden there (e.g. cpu) when one fp64 block does not fit the device")
    p.add_argument("--no-block-verdicts", dest="block_verdicts", action="store_false",
                   help="skip replaying each block on eager's input to it")
    p.add_argument("--calls", type=int, default=4, metavar="N",
                   help="compiled calls per check (at least 4: the first, a repeat, one on rolled inputs, the first "
                        "inputs again); calls 5..N repeat the first inputs, and a result that differs from the "
                        "first call's is judged against the golden too (an artifact that goes wrong after warm-up)")
    p.add_argument("--tf32", action="store_true",
                   help="keep this process's TF32 settings on CUDA (default: fp32 runs without TF32, so that "
                        "eager and compiled are compared at full fp32)")


def _junit_repeats(path: str, repeats: dict | None) -> None:
    """--repeat/--rate-bound: the rate, its Wilson bound and its unit as properties of the testsuite, and the
    rate's lines as its system-out (nothing changes without repeats)."""
    if not repeats:
        return
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    suite = tree.getroot().find("testsuite")
    if suite is None:
        return
    overall = repeats["overall"]
    props = ET.Element("properties")
    for name, value in [("repeats.runs", repeats["runs"]), ("repeats.failures", repeats["failures"]),
                        ("repeats.rate", overall["rate"]), ("repeats.ci95_low", overall["ci95_low"]),
                        ("repeats.ci95_high", overall["ci95_high"]), ("repeats.bound", repeats["bound"]),
                        ("repeats.unit", repeats["unit"]), ("repeats.calls_per_run", repeats["calls_per_run"]),
                        ("repeats.requested_rate", repeats["requested_rate"])]:
        ET.SubElement(props, "property", name=name, value="" if value is None else str(value))
    suite.insert(0, props)
    ET.SubElement(suite, "system-out").text = "\n".join([repeats["summary"], f"unit: {repeats['unit']}"])
    ET.indent(tree)
    tree.write(path, encoding="unicode", xml_declaration=True)


def timeout_reports(args: argparse.Namespace):
    """What writes --json/--junit/--html when --time-limit (exit 3) or an interrupt's deadline (130) ends the
    run: armed by the command line before its watchdog starts, so a limit reached while torch or the target
    still load leaves the reports too."""
    return error_reports_for(args, time.monotonic())


def run(args: argparse.Namespace) -> int:
    from fusecheck.cli.watchdog import phase
    started = time.monotonic()
    from fusecheck.sharded.launch import sharded_run, under_torchrun
    if (getattr(args, "nproc", None) or under_torchrun()) and (args.repeat is not None or args.rate_bound is not None):
        import sys
        print("fusecheck check: error: --repeat/--rate-bound are for one process; drop --nproc, or repeat the "
              "sharded check from a shell loop with --seed", file=sys.stderr)
        return 2
    if (code := sharded_run(args)) is not None:
        return code
    phase("loading torch and the target")
    error_reports = error_reports_for(args, started)   # on a --time-limit: timeout_reports, armed before run()
    with reported_on_failure(error_reports):
        from fusecheck.case import load_target, refuse_meta
        from fusecheck.cli.report_paths import write_reports
        from fusecheck.policy import Policy
        from fusecheck.cli.progress import quiet_compiler_logs
        from fusecheck.report.baseline import diff_against, load_baseline
        from fusecheck.report.json_report import write_json
        from fusecheck.report.junit import write_junit
        from fusecheck.report.table import format_report
        from fusecheck.check import run_check
        from fusecheck.check.options import CheckOptions
        from fusecheck.op.repeated import run_repeats

        policy = Policy.load(args.policy)
        baseline = load_baseline(args.baseline) if args.baseline else None  # read before --json overwrites it
        toggles = [t.strip() for t in args.toggles.split(",") if t.strip()]

        def check_once(seed: int):
            phase(f"loading the target {args.target or '(built-in transformer block)'}")
            case = load_target(args.target, seed=seed)
            refuse_meta(case)
            with quiet_compiler_logs(not args.verbose):
                return run_check(case, CheckOptions.from_args(args, policy=policy, toggles=toggles, seed=seed))
        report = run_repeats(args, check_once)
    diff = diff_against(report, baseline) if baseline is not None else None
    gate = report.exit_code if diff is None or report.exit_code != 1 else (0 if diff.gate_passes else 1)
    data = report.to_dict()
    data["gate"] = {"exit_code": gate, "baseline": args.baseline, **(diff.to_dict() if diff else {})}
    from fusecheck.report.html import write_html
    # the reports first: the verdict is printed only once they exist (a full disk is exit 3, one line)
    write_reports([
        ("--json", args.json_path, lambda: write_json(data, args.json_path)),
        ("--junit", args.junit, lambda: (write_junit(report, args.junit,
                                                     known=diff.known_names if diff else frozenset(),
                                                     suite=target_id(args.target), seconds=time.monotonic() - started),
                                         _junit_repeats(args.junit, data.get("repeats")))),
        ("--html", args.html, lambda: write_html("check", data, args.html))],
        verdict=f"{'PASS' if gate == 0 else report.status if gate == report.exit_code else 'FAIL'} (exit {gate})")
    print(format_report(report, verbose=args.verbose))
    if report.exit_code == 1 and args.backend != "inductor":
        print(f"to find the subgraph that backend {args.backend!r} makes worse: fusecheck bisect "
              f"{args.target or ''} --backend {args.backend} --repro repro.py".replace("  ", " "))
    if diff is not None:
        print("\n".join(diff.lines()))
        print(f"gate with the baseline: {'PASS' if gate == 0 else 'FAIL'} (exit {gate})")
    return gate
