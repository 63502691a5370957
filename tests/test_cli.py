"""The merge gate: exit codes, JSON, JUnit, baselines and the pytest plugin."""
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from fusecheck.cli import main

PLANTED = "tests/planted_backends.py:"


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
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1"
    assert suite.find("testcase/failure").get("message") == "worse_than_eager"


def test_bad_input_exit_2(capsys):
    assert main(["check", "tests/cases.py:returns_nothing", "--backend", "eager"]) == 2
    assert "returned no tensors" in capsys.readouterr().err
    assert main(["check", "models/mlp.py:build", "--backend", "nope"]) == 2
    assert main(["check", "tests/cases.py:empty_output", "--backend", "eager"]) == 2
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
    r = subprocess.run([sys.executable, "-m", "fusecheck.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "exit codes: 0 pass, 1 fail" in r.stdout


def test_pytest_plugin_fixture(pytester):
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).resolve().parents[1])!r})
        from models.mlp import build

        def test_good(fusecheck):
            fusecheck.assert_not_worse(build(), backend="aot_eager")

        def test_bad(fusecheck):
            fusecheck.assert_not_worse(build(), backend="tests/planted_backends.py:bf16_matmul")
    """)
    import shutil
    shutil.copytree(__import__('pathlib').Path(__file__).parent, pytester.path / "tests", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--fusecheck-json", str(pytester.path / "reports"))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*compiled is worse than eager*"])
    assert len(list((pytester.path / "reports").glob("*.json"))) == 2


def test_a_hung_compiled_run_ends_with_exit_3_naming_the_phase():
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fusecheck.cli", "check", "models/mlp.py:build", "--backend",
                           "tests/planted_backends.py:hang", "--time-limit", "4"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert "timed out after 4 s while compiling and running 'mlp' with backend" in proc.stderr
    assert time.monotonic() - start < 60
