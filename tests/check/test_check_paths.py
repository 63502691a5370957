"""One pipeline (fusecheck/check/): the single-process check, a sharded rank (`--nproc 2`, FSDP2, gloo) and
the bisect objective run the same stages, so the same planted cases get the same verdicts through each; what
the sharded path once lacked (the fp32 fallback for an op with no fp64 kernel, the judged second compiled run)
it now has; `bisect` takes the check's golden, block and precision options."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusecheck.bisect import run_trial
from fusecheck.case import load_target
from fusecheck.check import CheckOptions, run_check
from fusecheck.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WIDE, MOE = "models/wide_blocks.py:build", "tests/planted/no_fp64_moe.py:build"

# (target, backend, check options, the verdict every path must give); a correct compile is the jitter case (its
# calls differ by one ULP, a correct result) and the MoE case
CASES = {
    "one_ulp_jitter_between_calls": (WIDE, "tests/planted/sharded_backends.py:ulp_jitter", {}, "PASS"),
    "second_call_wrong": (WIDE, "tests/planted/sharded_backends.py:second_call_race", {}, "FAIL"),
    "moe_op_without_fp64_kernel": (MOE, "aot_eager", {"dtype": "bf16", "train": True}, "PASS"),
}


def _statuses(rows) -> dict[str, str]:
    return {r["name"] if isinstance(r, dict) else r.name:
            r["verdict"]["status"] if isinstance(r, dict) else r.verdict.status.value for r in rows}


def _sharded(target: str, backend: str, options: dict, out: Path) -> subprocess.CompletedProcess:
    flags = [*(["--dtype", options["dtype"]] if "dtype" in options else []), *(["--train"] if options.get("train") else [])]
    return subprocess.run([sys.executable, "-m", "fusecheck", "check", target, "--backend", backend, *flags,
                           "--json", str(out), "-q", "--nproc", "2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_the_same_verdicts_in_one_process_on_two_ranks_and_in_the_bisect_objective(name, tmp_path):
    target, backend, options, expected = CASES[name]
    opts = CheckOptions(backend=backend, **options)
    single = run_check(load_target(target), opts)
    trial = run_trial(load_target(target), opts, {})
    proc = _sharded(target, backend, options, tmp_path / "r.json")
    assert proc.returncode == {"PASS": 0, "FAIL": 1}[expected], proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())

    assert single.status == expected, single.notes
    assert trial.report is not None and trial.report.status == expected
    assert data["status"] == expected and data["exit_code"] == single.exit_code
    rows = _statuses(single.rows)
    assert _statuses(trial.report.rows) == rows  # the objective is the check itself
    for rank in (0, 1):  # each rank judges its outputs (and gradient shards) as the one process judges all of it
        mine = {n.split("/", 1)[1]: s for n, s in _statuses(data["rows"]).items() if n.startswith(f"rank{rank}/")}
        assert mine == rows, (rank, mine, rows)
    if target == MOE:  # the golden runs the expert op in fp32 on every rank (a sharded rank once crashed there: exit 3)
        for rank in (0, 1):
            assert any(n.startswith(f"rank {rank}: golden: grouped_mm has no float64 kernel") for n in data["notes"]), \
                data["notes"]


def test_bisect_takes_the_checks_golden_block_and_precision_options(tmp_path, capsys):
    """Each bisect trial is the check run with the same options (it once knew dtype, device, seed and train only)."""
    case = load_target(WIDE)
    assert run_trial(case, CheckOptions(backend="aot_eager", golden="whole"), {}).report.golden_mode == "whole"
    regional = run_trial(load_target(WIDE), CheckOptions(backend="aot_eager", regional=True, blocks="blocks.*"), {})
    assert regional.report.regional and regional.report.golden_mode.startswith("streamed")
    assert [b.name for b in regional.report.blocks] == [f"blocks.{i}" for i in range(4)]
    code = main(["bisect", WIDE, "--golden", "streamed", "--blocks", "blocks.*", "--regional", "--golden-device", "cpu",
                 "--tf32", "--max-compiles", "1", "--no-attribution", "-q"])
    assert code == 0, capsys.readouterr().err  # the target passes: nothing to bisect
    assert main(["bisect", WIDE, "--golden", "nope"]) == 2
