"""Issue 25: every bad input is one line and the right exit code; a report that cannot be written at the end is
exit 3 in one line and no verdict is printed before it; every `-h` answers without torch; a planted rank abort
stays inside the test's captured output."""
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusecheck.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MLP = "models/mlp.py:build"


def _one_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusecheck: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, err)


# -- 1. bad input ------------------------------------------------------------------------------------------------
META = """
import torch
from fusecheck.case import Case

def inputs():
    return Case(torch.nn.Linear(4, 4), (torch.randn(2, 4, device="meta"),), "meta_in")

def model():
    return Case(torch.nn.Linear(4, 4, device="meta"), (torch.randn(2, 4),), "meta_model")
"""


@pytest.mark.parametrize("which, words", [("inputs", ["input 0", "meta device", "real device"]),
                                          ("model", ["parameter weight", "meta device", "--nproc"])])
def test_a_meta_model_or_meta_inputs_is_exit_2_in_one_line(which, words, tmp_path, capsys):
    (tmp_path / "meta_case.py").write_text(META)
    assert main(["check", f"{tmp_path / 'meta_case.py'}:{which}", "--backend", "aot_eager", "-q"]) == 2
    _one_line(capsys.readouterr().err, *words)


@pytest.mark.parametrize("command", [["check", MLP], ["matrix", MLP], ["bisect", MLP],
                                     ["dist", "kernels/ag_gemm.py:AllGatherGemm"]])
@pytest.mark.parametrize("seed", ["100000000000000000000000", "-1", str(2 ** 63)])
def test_a_seed_outside_0_to_2_63_is_exit_2_in_one_line(command, seed, capsys):
    assert main([*command, "--seed", seed, "-q"]) == 2
    _one_line(capsys.readouterr().err, "--seed", "2^63-1")


def test_the_largest_seed_is_accepted():
    from fusecheck.cli.main import SEED_MAX, build_parser
    parser, _ = build_parser("check")
    assert parser.parse_args(["check", "--seed", str(SEED_MAX)]).seed == 2 ** 63 - 1


def test_a_policy_file_that_is_not_utf8_is_exit_2_in_one_line(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_bytes(b"\xff\xfe[ratios]\nrmse = 2\n")
    assert main(["check", MLP, "--backend", "aot_eager", "-q", "--policy", str(policy)]) == 2
    _one_line(capsys.readouterr().err, str(policy), "UTF-8")


@pytest.mark.parametrize("text, key", [('[tolerance.fp32]\nflavour = "vanilla"\n', "flavour"),
                                       ('[tolerance.bf16]\nrtoll = 1e-2\nreason = "typo"\n', "rtoll"),
                                       ('[ratios]\nrmsee = 3\nreason = "typo"\n', "rmsee")])
def test_an_unknown_key_inside_a_policy_table_is_refused_naming_it(text, key, tmp_path, capsys):
    from fusecheck.policy import Policy, PolicyError
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    with pytest.raises(PolicyError, match=key) as info:
        Policy.load(policy)
    assert "known: " in str(info.value)
    assert main(["check", MLP, "--backend", "aot_eager", "-q", "--policy", str(policy)]) == 2
    _one_line(capsys.readouterr().err, key, "known: ")


def _html(*args):
    return subprocess.run([sys.executable, "-m", "fusecheck.report.html", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_the_html_module_without_arguments_prints_its_usage_exit_2():
    r = _html()
    assert r.returncode == 2 and r.stderr.startswith("usage: python -m fusecheck.report.html")
    assert "Traceback" not in r.stderr


def test_the_html_module_refuses_garbage_and_a_report_of_another_kind(tmp_path, capsys):
    from fusecheck.report.html import main as html_main
    garbage = tmp_path / "g.json"
    garbage.write_text("{not json")
    assert html_main(["check", str(garbage), str(tmp_path / "g.html")]) == 2
    _one_line(capsys.readouterr().err, "not a JSON report")
    garbage.write_text('{"hello": 1}')
    assert html_main([str(garbage), str(tmp_path / "g.html")]) == 2
    _one_line(capsys.readouterr().err, "not a report")
    dist = tmp_path / "d.json"
    dist.write_text(json.dumps({"spec": "k.py:S", "status": "PASS", "world_size": 2, "layers": {}}))
    assert html_main(["check", str(dist), str(tmp_path / "d.html")]) == 2  # was exit 0, an empty "check: PASS"
    _one_line(capsys.readouterr().err, "is a dist report, not check")
    assert not (tmp_path / "d.html").exists()
    assert html_main([str(dist), str(tmp_path / "d.html")]) == 0  # the kind is read from the report
    assert "fusecheck dist: k.py:S" in (tmp_path / "d.html").read_text()


# -- 2. a report that cannot be written at the end ---------------------------------------------------------------
def _full_disk(monkeypatch, option: str) -> str:
    """/dev/full where the checker may write there (it probes the folder first); else the writer fails as a
    full disk does."""
    from fusecheck.cli.report_paths import OutputPathError, prepare_output
    try:
        prepare_output("/dev/full", option)
        return "/dev/full"
    except OutputPathError:
        pass

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    import fusecheck.report.html
    import fusecheck.report.json_report
    import fusecheck.report.junit
    monkeypatch.setattr(fusecheck.report.json_report, "write_json", full)
    monkeypatch.setattr(fusecheck.report.junit, "write_junit", full)
    monkeypatch.setattr(fusecheck.report.html, "write_html", full)
    monkeypatch.setattr("fusecheck.distributed.report.write_json", full)
    monkeypatch.setattr("fusecheck.bisect.cli.write_json", full)
    return "full.out"


def _assert_write_failure(code: int, capsys, option: str, path: str) -> None:
    out, err = capsys.readouterr()
    assert code == 3, err
    _one_line(err, f"{option} {path}", "cannot write the report", os.strerror(errno.ENOSPC))
    assert "verdict:" not in out and "PASS" not in out  # nothing claims a verdict the reports do not hold


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_check_whose_report_cannot_be_written_is_exit_3_in_one_line(option, monkeypatch, capsys):
    path = _full_disk(monkeypatch, option)
    code = main(["check", str(ROOT / MLP), "--backend", "aot_eager", "-q", option, path])
    _assert_write_failure(code, capsys, option, path)


def test_a_run_without_verdict_whose_error_report_cannot_be_written_keeps_its_own_error(monkeypatch, tmp_path,
                                                                                          capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("def backend(gm, inputs):\n    raise RuntimeError('codegen exploded')\n")
    path = _full_disk(monkeypatch, "--json")
    assert main(["check", MLP, "--backend", f"{broken}:backend", "-q", "--json", path]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "codegen exploded" in err and f"--json {path}: cannot write" in err


def _stub_matrix(monkeypatch):
    import torch

    import fusecheck.matrix
    from fusecheck.case import Case
    from fusecheck.check import run_check
    report = run_check(Case(torch.nn.Linear(4, 4), (torch.randn(2, 4),), "lin"), backend="aot_eager")
    stub = fusecheck.matrix.MatrixReport("lin", [fusecheck.matrix.MatrixRow("baseline", (), report=report)])
    monkeypatch.setattr(fusecheck.matrix, "run_matrix", lambda *a, **k: stub)


def _stub_bisect(monkeypatch):
    import fusecheck.bisect.cli
    from fusecheck.bisect.result import BisectResult
    result = BisectResult("pass", "the target already passes", None, [], 1, 40, {})
    monkeypatch.setattr(fusecheck.bisect.cli, "bisect", lambda *a, **k: result)


@pytest.mark.parametrize("command", ["matrix", "bisect", "dist"])
@pytest.mark.parametrize("option", ["--json", "--html"])
def test_every_command_whose_report_cannot_be_written_is_exit_3_in_one_line(command, option, monkeypatch, capsys):
    path = _full_disk(monkeypatch, option)
    if command == "matrix":
        _stub_matrix(monkeypatch)
        argv = ["matrix", MLP]
    elif command == "bisect":
        _stub_bisect(monkeypatch)
        argv = ["bisect", MLP]
    else:
        argv = ["dist", "kernels/ag_gemm.py:AllGatherGemm", "--repeat", "1", "--layers", "comm"]
    _assert_write_failure(main([*argv, "-q", option, path]), capsys, option, path)


def test_the_dist_module_entry_too(monkeypatch, capsys):
    from fusecheck.distributed.entry import main as dist_main
    path = _full_disk(monkeypatch, "--json")
    code = dist_main(["kernels/ag_gemm.py:AllGatherGemm", "--repeat", "1", "--layers", "comm", "--json", path])
    out, err = capsys.readouterr()
    assert code == 3 and "PASS" not in out and len(err.strip().splitlines()) == 1 and "cannot write" in err


# -- 4. every -h without torch ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["check", "-h"], ["matrix", "-h"], ["toggles", "-h"], ["bisect", "-h"],
                                  ["dist", "-h"], ["-m", "fusecheck.distributed", "-h"]])
def test_every_subcommands_help_answers_without_importing_torch(args):
    argv = args if args[0] == "-m" else ["-m", "fusecheck", *args]
    r = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr[-1000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported, sorted(m for m in imported if m.startswith("fusecheck"))


def test_the_light_argument_modules_agree_with_the_heavy_ones():
    from fusecheck.bisect.gates import GATES
    from fusecheck.cli.bisect import GATE_KINDS
    from fusecheck.cli.dist import LAYERS
    from fusecheck.distributed.task import LAYERS as TASK_LAYERS
    assert GATE_KINDS == tuple(GATES) and LAYERS == TASK_LAYERS


# -- 5. a planted rank abort stays in the captured output -------------------------------------------------------
def test_a_planted_rank_abort_prints_no_fatal_error_dump_into_a_passing_run(pytester):
    """gloo aborts the rank left waiting in a skipped collective (tests/distributed/test_dist_layer_blame.py); pytest enables
    faulthandler on a copy of the terminal, and the forked rank used to dump `Fatal Python error: Aborted`
    there, past the capture of a passing test."""
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from fusecheck.distributed.runner import check
        from fusecheck.distributed.task import CheckTask

        def test_abort():
            rep = check(CheckTask({str(ROOT / "tests/planted/dist_bugs.py")!r} + ":SkipsCollectiveOnRank",
                                  spec_kwargs={{"rank": 0}}, layers=("comm", "whole")), 2, timeout_s=2)
            assert rep.status in ("CRASH", "HANG")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    text = result.stdout.str() + result.stderr.str()
    assert "Fatal Python error" not in text, text[-3000:]


# -- target files that import their project ------------------------------------------------------------------------
def test_a_target_file_imports_its_projects_packages_also_when_it_builds(tmp_path, monkeypatch, capsys):
    """`fusecheck check models/x.py:NAME` from a project's root: the file's lazy `from project_pkg import ...`
    resolves as under `python -m` (the working directory is importable while the target loads and builds),
    and sys.path is as before afterwards."""
    (tmp_path / "fc_lazy_pkg").mkdir()
    (tmp_path / "fc_lazy_pkg" / "__init__.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n")
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "t.py").write_text("def case():\n    from fc_lazy_pkg import build\n    return build()\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    assert main(["check", "targets/t.py:case", "--backend", "eager", "-q"]) == 0, capsys.readouterr().err
    assert sys.path == before
    sys.modules.pop("fc_lazy_pkg", None)
