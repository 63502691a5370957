"""The merge gate: exit codes, JSON, JUnit, baselines and the pytest plugin."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from fusecheck.cli.main import main

PLANTED = "tests/planted/backends.py:"


def test_pass_writes_json_with_policy_and_graphs(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["check", "models/mlp.py:build", "--backend", "aot_eager", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["policy"]["tolerances"]["float32"]["rtol"] == 1e-5
    assert data["graphs"][0]["n_nodes"] == 4 and "linear" in data["graphs"][0]["code"]
    assert "verdict: PASS (exit 0)" in capsys.readouterr().out


def test_fail_exit_1_and_junit(tmp_path):
    junit = tmp_path / "r.xml"
    assert main(["check", "models/mlp.py:build", "--backend", PLANTED + "bf16_matmul", "--junit", str(junit)]) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    assert suite.find("testcase/failure").get("message") == "worse_than_eager"


def test_bad_input_exit_2(capsys):
    assert main(["check", "tests/planted/cases.py:returns_nothing", "--backend", "eager"]) == 2
    assert "returned no tensors" in capsys.readouterr().err
    assert main(["check", "models/mlp.py:build", "--backend", "nope"]) == 2
    assert main(["check", "tests/planted/cases.py:empty_output", "--backend", "eager"]) == 2
    assert main(["check", "--dtype", "fp8"]) == 2
    assert main(["check", "models/mlp.py:build", "--device", "npu"]) == 2


def test_compile_error_exit_3(tmp_path, capsys):
    broken = tmp_path / "broken_backend.py"
    broken.write_text("def backend(gm, inputs):\n    raise RuntimeError('codegen exploded')\n")
    assert main(["check", "models/mlp.py:build", "--backend", f"{broken}:backend"]) == 3
    assert "codegen exploded" in capsys.readouterr().err


def test_policy_relaxation_is_printed(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_text('[ratios]\nrmse = 4.0\nreason = "waiting on upstream fix"\n')
    assert main(["check", "models/mlp.py:build", "--backend", "aot_eager", "--policy", str(policy)]) == 0
    assert "RELAXED ratios.rmse: 2.0 -> 4.0 (waiting on upstream fix)" in capsys.readouterr().out
    policy.write_text('[ratios]\nrmse = 4.0\n')
    assert main(["check", "models/mlp.py:build", "--backend", "aot_eager", "--policy", str(policy)]) == 2


def test_baseline_accepts_known_failures_only(tmp_path, capsys):
    base = tmp_path / "base.json"
    args = ["check", "models/mlp.py:build", "--backend", PLANTED + "bf16_matmul"]
    assert main(args + ["--json", str(base)]) == 1
    assert main(args + ["--baseline", str(base)]) == 0
    assert "known failure" in capsys.readouterr().out
    other = ["check", "models/conv_bn_relu.py:build", "--backend", PLANTED + "bf16_matmul", "--baseline", str(base)]
    assert main(other) == 1
    assert "new failure conv_bn_relu" in capsys.readouterr().out
    # the same row failing in a different way is a new failure, not a known one
    changed = ["check", "models/mlp.py:build", "--backend", PLANTED + "inject_nan", "--baseline", str(base)]
    assert main(changed) == 1
    assert "nan_inf_mismatch" in capsys.readouterr().out


def test_console_script_help():
    r = subprocess.run([sys.executable, "-m", "fusecheck.cli.main", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "exit codes: 0 pass, 1 fail" in r.stdout


def test_pytest_plugin_fixture(pytester):
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).resolve().parents[2])!r})
        from models.mlp import build

        def test_good(fusecheck):
            fusecheck.assert_not_worse(build(), backend="aot_eager")

        def test_bad(fusecheck):
            fusecheck.assert_not_worse(build(), backend="tests/planted/backends.py:bf16_matmul")

        import pytest

        @pytest.mark.parametrize("k", ["a/b", "a_b"])   # ids that read the same once sanitised
        def test_ids(fusecheck, k):
            fusecheck.check(build(), backend="aot_eager")
    """)
    import shutil
    shutil.copytree(__import__('pathlib').Path(__file__).parents[1], pytester.path / "tests", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    # in a subprocess: an in-process run drops the modules it imported (torch._inductor ones included) from
    # sys.modules, and re-importing them later in this session registers torch libraries twice
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fusecheck-json", str(pytester.path / "reports"))
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*compiled is worse than eager*"])
    assert len(list((pytester.path / "reports").glob("*.json"))) == 4   # one per check: none overwritten
    # the project's [tool.fusecheck] policy applies in the fixture as in the CLI
    pytester.makefile(".toml", pyproject='[tool.fusecheck.ratios]\nrmse = 1e9\nsmall_tensor_rmse = 1e9\nmean_rel = 1e9\nmax_rel = 1e9\n'
                      'digits_lost = 1e9\n'
                      'reason = "test: the project accepts this backend"\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_bad")
    result.assert_outcomes(passed=1)


def test_a_hung_compiled_run_ends_with_exit_3_naming_the_phase(tmp_path):
    """Phase-based, not clock-based: the planted hang writes a marker once compiling hangs. A limit that ran out
    before it (torch still loading on a loaded machine) says nothing about the compile phase: that run is
    repeated with a longer limit, so the test cannot be red for a slow machine, only for a wrong phase."""
    import os

    out, marker = tmp_path / "hang.json", tmp_path / "hanging"
    env = {**os.environ, "FUSECHECK_TEST_HANG_MARKER": str(marker)}
    for limit in (15, 60, 240):
        proc = subprocess.run([sys.executable, "-m", "fusecheck.cli.main", "check", "models/mlp.py:build", "--backend",
                               "tests/planted/backends.py:hang", "--time-limit", str(limit), "--json", str(out)],
                              capture_output=True, text=True, timeout=limit + 120, env=env)
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert f"timed out after {limit} s while " in proc.stderr, proc.stderr[-2000:]
        if marker.exists():  # the limit fired while the compiled run hung
            break
    assert marker.exists(), "the planted hang was never reached within 240 s"
    assert f"timed out after {limit} s while compiling and running 'mlp' with backend" in proc.stderr
    data = json.loads(out.read_text())  # CI still finds a report
    assert data["status"] == "ERROR" and data["exit_code"] == 3 and "timed out" in data["error"]


def test_ctrl_c_ends_the_command_with_130_and_its_report_even_where_the_interrupt_is_swallowed(tmp_path):
    """The compiled run catches KeyboardInterrupt and goes on hanging: the first Ctrl-C armed a deadline, which
    ends the process with 130, says so in one line and leaves the --json report (phase-based: SIGINT is sent
    once the planted hang has started)."""
    import os
    import signal
    import time

    out, marker = tmp_path / "r.json", tmp_path / "hanging"
    env = {**os.environ, "FUSECHECK_TEST_HANG_MARKER": str(marker), "FUSECHECK_INTERRUPT_GRACE_S": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "fusecheck.cli.main", "check", "models/mlp.py:build", "--backend",
                             "tests/planted/backends.py:hang_swallowing_interrupts", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for _ in range(2400):
            if marker.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), "the planted hang was never reached"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "still running 2 s after Ctrl-C" in err and "Traceback" not in err, err[-2000:]
    data = json.loads(out.read_text())
    assert data["status"] == "ERROR" and data["exit_code"] == 130 and "interrupted" in data["error"]


def _gate(tmp_path, backend, *extra):
    return main(["check", "models/mlp.py:build", "--backend", backend, *extra])


def test_baseline_and_json_may_be_the_same_file(tmp_path):
    """--json must not overwrite the baseline before it is read (every failure would become known)."""
    same = tmp_path / "same.json"
    assert _gate(tmp_path, "aot_eager", "--json", str(same)) == 0
    assert _gate(tmp_path, PLANTED + "bf16_matmul", "--json", str(same), "--baseline", str(same)) == 1


def test_baseline_reports_fixed_rows_and_agrees_with_json_and_junit(tmp_path, capsys):
    base, out, junit = tmp_path / "base.json", tmp_path / "out.json", tmp_path / "r.xml"
    assert _gate(tmp_path, PLANTED + "bf16_matmul", "--json", str(base)) == 1
    capsys.readouterr()
    assert _gate(tmp_path, PLANTED + "bf16_matmul", "--dtype", "fp32", "--baseline", str(base), "--json", str(out),
                 "--junit", str(junit)) == 0  # --dtype fp32 on a float32 model is the same row
    assert "gate with the baseline: PASS (exit 0)" in capsys.readouterr().out
    assert json.loads(out.read_text())["gate"]["exit_code"] == 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "0" and suite.get("skipped") == "1" and suite.find("testcase/skipped") is not None
    loose = tmp_path / "loose.toml"
    loose.write_text('[ratios]\nrmse = 1e9\nsmall_tensor_rmse = 1e9\nmean_rel = 1e9\nmax_rel = 1e9\ndigits_lost = 1e9\n'
                     'reason = "test: accepted upstream"\n')
    assert _gate(tmp_path, PLANTED + "bf16_matmul", "--policy", str(loose), "--baseline", str(base)) == 0
    assert "baseline: fixed" in capsys.readouterr().out


def test_a_missing_or_foreign_baseline_is_bad_usage(tmp_path, capsys):
    assert _gate(tmp_path, "aot_eager", "--baseline", str(tmp_path / "nope.json")) == 2
    foreign = tmp_path / "foreign.json"
    foreign.write_text("{}")
    assert _gate(tmp_path, "aot_eager", "--baseline", str(foreign)) == 2
    assert "not a `fusecheck check --json` report" in capsys.readouterr().err


def test_no_verdict_still_writes_json_and_junit(tmp_path):
    broken = tmp_path / "broken_backend.py"
    broken.write_text("def backend(gm, inputs):\n    raise RuntimeError('codegen exploded')\n")
    out, junit = tmp_path / "e.json", tmp_path / "e.xml"
    assert _gate(tmp_path, f"{broken}:backend", "--json", str(out), "--junit", str(junit)) == 3
    data = json.loads(out.read_text())
    assert data["status"] == "ERROR" and data["exit_code"] == 3 and "codegen exploded" in data["error"]
    assert ET.parse(junit).getroot().find("testsuite/testcase/error") is not None


@pytest.mark.parametrize("body, says", [("return 5", "AssertionError: compiler_fn did not return callable"),
                                        ("raise ValueError('cannot compile this')", "ValueError: cannot compile this"),
                                        ("return lambda *a: 'text'", "the compiled model returned no tensors where "
                                                                     "eager did")])
def test_a_broken_backend_is_one_line_naming_its_own_error(tmp_path, capsys, body, says):
    """dynamo wraps the backend's error over several lines (with our capture's repr): the user gets theirs."""
    broken = tmp_path / "b.py"
    broken.write_text(f"def backend(gm, inputs):\n    {body}\n")
    assert _gate(tmp_path, f"{broken}:backend") == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "GraphCapture" not in err, err


def test_a_time_limit_reached_while_loading_still_writes_the_error_reports(tmp_path):
    """The limit can run out before the target is even imported (a slow machine, a tiny --time-limit): the
    error reports were armed only after the imports, so CI found no file."""
    out, junit = tmp_path / "t.json", tmp_path / "t.xml"
    proc = subprocess.run([sys.executable, "-m", "fusecheck.cli.main", "check", "models/mlp.py:build", "--backend",
                           "aot_eager", "--time-limit", "0.001", "--json", str(out), "--junit", str(junit)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert json.loads(out.read_text())["status"] == "ERROR" and "timed out" in json.loads(out.read_text())["error"]
    assert ET.parse(junit).getroot().find("testsuite/testcase/error") is not None


def test_junit_survives_control_characters(tmp_path):
    from fusecheck.case import Case
    from fusecheck.report.junit import write_junit
    from fusecheck.check import run_check
    import torch

    report = run_check(Case(torch.nn.Linear(4, 4), (torch.randn(2, 4),), "odd\x01name"), backend=PLANTED + "shift_outputs")
    write_junit(report, tmp_path / "x.xml")
    assert ET.parse(tmp_path / "x.xml").getroot().find("testsuite").get("name") == "fusecheck.odd_name"


def test_a_malformed_policy_is_bad_usage(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    for text in ("[tolerance]\nbf16 = 0.1\n", '[tolerance.bf16]\nrtol = "abc"\n', "[ratios\n"):
        policy.write_text(text)
        assert _gate(tmp_path, "aot_eager", "--policy", str(policy)) == 2, text
    assert "malformed policy" in capsys.readouterr().err


TWO_MODELS = """
import torch
from fusecheck.case import Case


def small():
    torch.manual_seed(0)
    return Case(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()), (torch.randn(4, 8),), "net")


def large():
    torch.manual_seed(0)
    return Case(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8)),
                (torch.randn(4, 8),), "net")
"""


def test_a_baseline_of_another_model_under_the_same_case_name_accepts_nothing(tmp_path, capsys):
    models = tmp_path / "two.py"
    models.write_text(TWO_MODELS)
    base = tmp_path / "base.json"
    bad = ["--backend", PLANTED + "bf16_matmul"]
    assert main(["check", f"{models}:small", *bad, "--json", str(base)]) == 1
    capsys.readouterr()
    assert main(["check", f"{models}:small", *bad, "--baseline", str(base)]) == 0     # the same model: known
    assert main(["check", f"{models}:large", *bad, "--baseline", str(base)]) == 1     # another one: new
    out = capsys.readouterr().out
    assert "baseline: recorded for another model under this case name" in out and "new failure net/" in out


def test_an_error_report_never_overwrites_the_baseline(tmp_path):
    base = tmp_path / "base.json"
    assert _gate(tmp_path, PLANTED + "bf16_matmul", "--json", str(base)) == 1
    before = base.read_text()
    broken = tmp_path / "broken_backend.py"
    broken.write_text("def backend(gm, inputs):\n    raise RuntimeError('codegen exploded')\n")
    assert _gate(tmp_path, f"{broken}:backend", "--json", str(base), "--baseline", str(base)) == 3
    assert base.read_text() == before


def test_known_error_rows_are_not_accepted(tmp_path, capsys):
    base = tmp_path / "base.json"
    args = ["check", "tests/planted/cases.py:empty_output", "--backend", "eager"]
    assert main(args + ["--json", str(base)]) == 2
    assert main(args + ["--baseline", str(base)]) == 2
    assert "known failure" not in capsys.readouterr().out


def test_time_limit_inf_means_none(tmp_path, monkeypatch):
    import threading

    from fusecheck.cli.watchdog import Watchdog

    assert _gate(tmp_path, "aot_eager", "--time-limit", "inf") == 0
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name))
    with Watchdog(float("inf"), "check"):  # no watchdog thread: one would die at once on wait(inf)
        pass
    with Watchdog(5.0, "check"):
        pass
    assert started == ["fusecheck-watchdog"]


def test_significance_levels_must_be_between_0_and_1(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_text('[ratios]\nmean_rel_alpha = 0\nreason = "off"\n')
    assert _gate(tmp_path, "aot_eager", "--policy", str(policy)) == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err
