"""`fusecheck train`: N optimizer steps of eager, compiled and an fp64 shadow, gated by exit code.

Nothing heavy is imported at the top: `fusecheck train -h` must not load torch.
"""
from __future__ import annotations

import argparse
import time

from fusecheck.train.optimizers import OPTIMIZERS


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: a learning rate is a positive finite number")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fusecheck.cli.check import add_dtype_argument, add_html_argument
    from fusecheck.cli.main import positive_int, seed
    p.add_argument("target", nargs="?", default=None,
                   help="FILE.py:NAME, where NAME() returns a fusecheck Case or (model, inputs); the Case or its "
                        "module may define batches(step) and loss(output, batch) (default: a built-in "
                        "transformer block)")
    p.add_argument("--steps", type=positive_int, default=20, help="optimizer steps")
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="adamw",
                   help="; ".join(f"{k}: {v.doc}, lr {v.lr:g}" for k, v in OPTIMIZERS.items()))
    p.add_argument("--lr", type=_positive_float, default=None, help="learning rate (default: the optimizer's)")
    p.add_argument("--backend", default="inductor",
                   help="inductor, aot_eager, aot_eager_decomp_partition, eager, or your own dynamo backend as "
                        "FILE.py:NAME")
    add_dtype_argument(p, help="cast the model and its floating inputs to this dtype (bf16/fp16: fp32 master "
                               "weights and optimizer state, as mixed precision keeps them)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, npu (with torch_npu) or mps")
    p.add_argument("--seed", type=seed, default=0, help="seed of the weights, inputs, cotangents and band runs")
    p.add_argument("--band-runs", type=positive_int, default=8,
                   help="randomised-rounding eager trajectories that measure eager's run-to-run band")
    p.add_argument("--compile-optimizer", action="store_true",
                   help="compile the compiled trajectory's optimizer step too, with the same backend")
    p.add_argument("--golden-device", default=None, metavar="DEVICE",
                   help="keep the fp64 shadow (parameters and optimizer state) there, e.g. cpu")
    p.add_argument("--blocks", default=None, metavar="GLOB",
                   help="the model's blocks for the per-block drift (default: the children of its largest "
                        "layer stack: an nn.ModuleList, or an nn.Sequential / nn.ModuleDict of one class)")
    p.add_argument("--policy", default=None,
                   help="tolerance policy file, TOML or JSON (default: [tool.fusecheck] of pyproject.toml)")
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE",
                   help="write the report with every step's series as JSON")
    p.add_argument("--junit", default=None, metavar="FILE",
                   help="write JUnit XML (one testcase per loss and parameter)")
    add_html_argument(p)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every step in the table, the per-block and per-kind drift, every note")


def _write_all(args: argparse.Namespace, data: dict, junit, verdict: str = "") -> None:
    from fusecheck.cli.report_paths import write_reports
    from fusecheck.report.json_report import write_json
    from fusecheck.train.html import write_train_html
    write_reports([("--json", args.json_path, lambda: write_json(data, args.json_path)),
                   ("--junit", args.junit, junit),
                   ("--html", args.html, lambda: write_train_html(data, args.html))], verdict=verdict)


def run(args: argparse.Namespace) -> int:
    import sys

    from fusecheck.case import load_target, refuse_meta
    from fusecheck.report.on_error import reported_on_failure, target_id
    from fusecheck.cli.report_paths import ReportWriteError
    from fusecheck.policy import Policy
    from fusecheck.cli.progress import quiet_compiler_logs
    from fusecheck.report.junit import write_junit_error
    from fusecheck.train.report import format_train, step_dict, write_junit_train
    from fusecheck.train.run import run_train
    from fusecheck.cli.watchdog import on_timeout, phase

    started = time.monotonic()
    suite = target_id(args.target)

    def error_reports(message: str, code: int) -> None:
        data = {"tool": "fusecheck train", "case": args.target or "default", "status": "ERROR",
                "exit_code": code, "error": message}
        try:
            _write_all(args, data, lambda: write_junit_error(suite, message, args.junit,
                                                             seconds=time.monotonic() - started))
        except ReportWriteError as exc:
            print(f"fusecheck: error: {exc}", file=sys.stderr)

    def on_step(result) -> None:
        d = step_dict(result)
        phase(f"step {result.step + 1}/{args.steps}: loss eager {d['losses']['eager']:.4g} compiled "
              f"{d['losses']['compiled']:.4g} shadow {d['losses']['shadow']:.4g}; drift ratio to the band "
              f"{d['ratio']['to_band']:.3g}{'; LEFT THE BAND' if result.failed else ''}")

    with reported_on_failure(error_reports), on_timeout(error_reports):
        policy = Policy.load(args.policy)
        phase(f"loading the target {args.target or '(built-in transformer block)'}")
        case = load_target(args.target, seed=args.seed)
        refuse_meta(case)
        with quiet_compiler_logs(not args.verbose):
            report = run_train(case, spec=args.target, steps=args.steps, optimizer=args.optimizer, lr=args.lr,
                               dtype=args.dtype, backend=args.backend, device=args.device, seed=args.seed,
                               policy=policy, band_runs=args.band_runs, golden_device=args.golden_device,
                               compile_optimizer=args.compile_optimizer, blocks=args.blocks, on_step=on_step)
    _write_all(args, report.to_dict(),
               lambda: write_junit_train(report, args.junit, suite, time.monotonic() - started),
               verdict=f"{report.status} (exit {report.exit_code})")
    print(format_train(report, verbose=args.verbose))
    return report.exit_code
