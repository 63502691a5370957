"""The command line as a user meets it (issue 11): output paths checked before any work, usage, --version,
fast help, validated options, progress, Ctrl-C, the compact table, JUnit names, the pytest fixture."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fusecheck.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MLP = "models/mlp.py:build"
PLANTED = "tests/planted/backends.py:"


def _no_work(monkeypatch):
    """Any compile or run would call run_check: make it fail loudly so 'exit 2 before any work' is proved."""
    import fusecheck.check

    def boom(*a, **k):
        raise AssertionError("the run started although an output path is unusable")
    monkeypatch.setattr(fusecheck.check, "run_check", boom)


# -- 1. output paths --------------------------------------------------------------------------------------
def test_a_json_path_in_a_new_folder_is_created(tmp_path):
    out = tmp_path / "new" / "dir" / "r.json"
    junit = tmp_path / "other" / "r.xml"
    assert main(["check", MLP, "--backend", "aot_eager", "-q", "--json", str(out), "--junit", str(junit)]) == 0
    assert json.loads(out.read_text())["status"] == "PASS" and junit.exists()


@pytest.mark.parametrize("command", [["check", MLP], ["matrix", MLP], ["toggles"]])
def test_an_unusable_output_path_is_exit_2_before_any_work(command, tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    assert main([*command, "--json", "/proc/x/r.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fusecheck: error: --json /proc/x/r.json")
    assert main([*command, "--json", str(tmp_path)]) == 2  # a directory
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["check", "{copy}:build", "--json", "{copy}"], "is the target"),                    # would overwrite the model
    (["check", MLP, "--policy", "{policy}", "--html", "{policy}"], "is --policy"),
    (["check", MLP, "--backend", PLANTED + "bf16_matmul", "--junit", "tests/planted/backends.py"], "is --backend"),
    (["check", MLP, "--json", ""], "an empty path"),                                     # wrote nothing, silently
    (["bisect", MLP, "--repro", "{tmp}"], "is a directory"),                              # found after the bisect
])
def test_an_output_that_would_overwrite_an_input_or_go_nowhere_is_exit_2_before_any_work(
        argv, message, tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    import fusecheck.bisect
    monkeypatch.setattr(fusecheck.bisect, "run_bisect", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")),
                        raising=False)
    copy, policy = tmp_path / "model.py", tmp_path / "policy.toml"
    copy.write_text((ROOT / "models/mlp.py").read_text())
    policy.write_text("[ratios]\n")
    before = {p: p.read_bytes() for p in (copy, policy, ROOT / "tests/planted/backends.py")}
    argv = [a.format(copy=copy, policy=policy, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert all(p.read_bytes() == b for p, b in before.items())


def test_two_outputs_may_not_share_a_file(tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    same = str(tmp_path / "r.out")
    assert main(["check", MLP, "--json", same, "--junit", same]) == 2
    assert "both name" in capsys.readouterr().err


# -- 3. conventions ---------------------------------------------------------------------------------------
def _run(*args, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, **kw)


def test_bare_fusecheck_prints_usage_without_importing_torch():
    start = time.monotonic()
    r = _run("-X", "importtime", "-m", "fusecheck")
    took = time.monotonic() - start
    assert r.returncode == 2 and "usage: fusecheck" in r.stderr and "check" in r.stderr
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "fusecheck.cli.check" not in imported
    assert took < 10, took  # about 0.1 s measured; generous for a loaded CI machine


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["check", "-h"], ["matrix", "-h"]])
def test_version_and_help_do_not_import_torch(args):
    r = _run("-X", "importtime", "-m", "fusecheck", *args)
    assert r.returncode == 0, r.stderr[-500:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported
    if args == ["--version"]:
        from fusecheck import __version__
        assert r.stdout.strip() == f"fusecheck {__version__}"
    if args == ["check", "-h"]:
        assert "(default: inductor)" in r.stdout and "registry" not in r.stdout


@pytest.mark.parametrize("bad", ["-5", "nan", "soon"])
def test_time_limit_must_be_seconds_not_negative(bad, monkeypatch, capsys):
    _no_work(monkeypatch)
    assert main(["check", MLP, "--time-limit", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fusecheck: error: argument --time-limit") and err.count("\n") == 1


def test_disable_no_longer_applies_a_toggle(monkeypatch, capsys):
    """`--disable emulate_precision_casts` used to turn emulation on: the option now refuses, naming --toggle."""
    _no_work(monkeypatch)
    assert main(["check", MLP, "--disable", "emulate_precision_casts"]) == 2
    assert "renamed --toggle" in capsys.readouterr().err


def test_one_dtype_vocabulary_accepting_long_spellings():
    from fusecheck.cli.main import build_parser

    parser, _ = build_parser("check")
    assert parser.parse_args(["check", "--dtype", "bfloat16"]).dtype == "bf16"
    assert parser.parse_args(["check", "--dtype", "fp16"]).dtype == "fp16"
    assert main(["check", "--dtype", "fp8"]) == 2


def test_a_usage_error_is_one_line_with_one_prefix(capsys):
    assert main(["check", "--nope"]) == 2
    assert main(["nope"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("fusecheck: error: ") for line in err)


# -- 2 and 8. progress on a terminal, Ctrl-C ----------------------------------------------------------------
def test_progress_on_a_terminal_then_ctrl_c_exits_130_with_a_report(tmp_path):
    import pty
    import select

    out = tmp_path / "r.json"
    master, slave = pty.openpty()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fusecheck", "check", MLP, "--backend", PLANTED + "hang",
                             "--json", str(out)], cwd=ROOT, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen, first = b"", None
    try:
        while b"compiling and running" not in seen and time.monotonic() - start < 90:
            if select.select([master], [], [], 1.0)[0]:
                seen += os.read(master, 4096)
                first = first or (b"fusecheck check" in seen and time.monotonic() - start)
        assert b"compiling and running 'mlp'" in seen, seen[-400:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        while select.select([master], [], [], 0.5)[0]:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = seen.decode(errors="replace")
    assert "Traceback" not in text and "interrupted" in text
    assert first and first < 10, first  # drawn before torch is imported (about 0.2 s measured)
    assert json.loads(out.read_text())["exit_code"] == 130


def test_progress_line_follows_phases_and_stays_off_stdout():
    import io

    from fusecheck.cli.progress import Progress
    from fusecheck.cli.watchdog import phase

    err = io.StringIO()
    with Progress("check", stream=err, enabled=True, interval=60) as p:
        phase("running 'mlp' in eager mode")
        p.step(2, 5, "fusion.pointwise")
        print("a report line")  # erases the status line first: the report is never mixed with it
    text = err.getvalue()
    assert "running 'mlp' in eager mode" in text and "[2/5 fusion.pointwise]" in text
    assert text.endswith("\r\x1b[K")  # the terminal is left clean
    quiet = io.StringIO()
    with Progress("check", stream=quiet, quiet=True):  # a StringIO is no terminal either
        phase("x")
    assert quiet.getvalue() == ""


# -- 5. the compact report ----------------------------------------------------------------------------------
def _report(model, inputs, name, backend="aot_eager"):
    from fusecheck.case import Case
    from fusecheck.check import run_check
    return run_check(Case(model, inputs, name), backend=backend)


def test_the_default_table_fits_120_columns_and_explains_each_verdict():
    import torch

    from fusecheck.report.table import format_report

    class Wide(torch.nn.Module):
        def forward(self, x):
            return {"a_very_long_output_name_that_goes_on_and_on_about_attention_heads_and_more": x * 3}

    report = _report(Wide(), (torch.randn(8, 8),), "wide")
    text = format_report(report)
    assert max(len(line) for line in text.splitlines()) <= 120, text
    code = report.rows[0].verdict.code
    assert re.search(rf"^  {code}: \S", text, re.M)
    assert "policy (" not in text and "policy (" in format_report(report, verbose=True)


def test_a_0_over_0_ratio_is_not_shown_as_0():
    import torch

    from fusecheck.report.table import format_report

    text = format_report(_report(torch.nn.ReLU(), (torch.randn(4, 4),), "relu"))
    row = next(line for line in text.splitlines() if line.startswith("output") and "PASS" in line)
    assert " 0/0 " in row, text


def test_nan_in_every_run_passes_with_a_note():
    import torch

    from fusecheck.report.table import format_report

    class Log(torch.nn.Module):
        def forward(self, x):
            return torch.log(x)

    report = _report(Log(), (torch.randn(16, 16),), "log")
    assert report.passed
    assert "NaN/Inf in compiled" in format_report(report)


def test_every_verdict_code_has_a_phrase():
    from fusecheck.report.table import CODE_PHRASES

    source = "".join(p.read_text() for p in [*(ROOT / "fusecheck" / "compare").glob("*.py"), *(ROOT / "fusecheck" / "check").glob("*.py")])
    codes = set(re.findall(r'Verdict\(Status\.\w+, "(\w+)"', source)) | set(re.findall(r'input_error\([^,]+, "(\w+)"', source))
    assert codes and not codes - set(CODE_PHRASES), codes - set(CODE_PHRASES)


# -- 6. JUnit ------------------------------------------------------------------------------------------------
def _suite(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("time") is not None
    (suite,) = root.findall("testsuite")
    return suite


def test_junit_names_are_stable_across_pass_fail_and_error(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def backend(gm, inputs):\n    raise RuntimeError('codegen exploded')\n")
    names = {}
    for outcome, backend, code in (("pass", "aot_eager", 0), ("fail", PLANTED + "bf16_matmul", 1),
                                   ("error", f"{broken}:backend", 3)):
        path = tmp_path / f"{outcome}.xml"
        assert main(["check", MLP, "--backend", backend, "-q", "--junit", str(path)]) == code
        suite = _suite(path)
        names[outcome] = suite.get("name")
        for case in suite.iter("testcase"):
            assert case.get("time") is not None
            assert not re.search(r"[\s()]", case.get("classname") + case.get("name"))
    assert set(names.values()) == {"fusecheck.mlp.build"}, names


def test_junit_names_that_would_read_the_same_are_kept_apart():
    from fusecheck.report.junit import unique_names
    texts = ["output['attn out']", "output['attn_out']", "output['输出']", "output['隐藏']", "output['h']"]
    names = unique_names(texts)
    assert len(set(names.values())) == len(texts)
    assert names["output['h']"] == "output[_h_]"          # a name that collides with none keeps its plain form
    assert all(not re.search(r"[\s()]", n) for n in names.values())


# -- 7. the pytest fixture --------------------------------------------------------------------------------------
def test_pytest_fixture_takes_a_callable_and_stays_quiet(pytester):
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import torch
        from models.mlp import build

        def test_callable(fusecheck):
            fusecheck.assert_not_worse(build(), backend=torch._dynamo.lookup_backend("aot_eager"))

        def test_bad_backend(fusecheck):
            fusecheck.assert_not_worse(build(), backend="nope")

        def test_fails(fusecheck):
            import importlib.util
            spec = importlib.util.spec_from_file_location("pb", {str(ROOT / "tests/planted/backends.py")!r})
            pb = importlib.util.module_from_spec(spec); spec.loader.exec_module(pb)
            fusecheck.assert_not_worse(build(), backend=pb.bf16_matmul)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "fusecheck: error: unknown backend 'nope'" in out and "backends.py:" not in out
    assert "DEBUG" not in out and "compiled is worse than eager" in out


# -- the HTML report ------------------------------------------------------------------------------------------
def test_check_html_from_the_cli(tmp_path):
    from tests.html_check import parse_page

    page = tmp_path / "deep" / "r.html"
    assert main(["check", MLP, "--backend", PLANTED + "bf16_matmul", "-q", "--html", str(page)]) == 1
    info = parse_page(page.read_text())
    assert info.svgs >= 1 and "FAIL" in info.text and "worse_than_eager" in info.text
