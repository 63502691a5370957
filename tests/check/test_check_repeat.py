"""`fusecheck check --repeat N / --rate-bound P` (issue 20 item 2), a user backend seeing the model's own graph
(item 4), and the fixture's `repeat=` and `assert_not_worse_op` (through pytester).

The planted race is in a user backend (tests/planted/race_backend.py:racy): it runs the graph correctly and on
~5% of calls leaves one output row as zeros, drawn from its call counter and the inputs' bits (deterministic).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from fusecheck.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PLANT = "tests/planted/race_backend.py"
TARGET = f"{PLANT}:model"


def test_check_repeat_catches_a_five_percent_race_through_a_backend(tmp_path, capsys):
    out, junit, html = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.html"
    code = main(["check", TARGET, "--backend", f"{PLANT}:racy", "--repeat", "100", "--json", str(out),
                 "--junit", str(junit), "--html", str(html)])
    text = " ".join(capsys.readouterr().out.split())  # the report wraps long notes
    assert code == 1 and "verdict: FAIL (exit 1)" in text
    assert "runs failed:" in text and "/100 runs failed" in text and "(Wilson 95% " in text
    assert "unit: 1 run = 2 calls of the compiled model (forward), each judged" in text
    assert "the first that failed" in text
    rep = json.loads(out.read_text())["repeats"]
    assert rep["runs"] == 100 and 0 < rep["failures"] < 30 and rep["calls_per_run"] == 2
    assert rep["bound"].startswith("Wilson") and rep["unit"].startswith("1 run = 2 calls")
    overall = rep["overall"]
    assert overall["ci95_low"] < rep["failures"] / 100 < overall["ci95_high"]
    assert rep["statuses"].count("PASS") == 100 - rep["failures"]
    suite = ET.parse(junit).getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["repeats.runs"] == "100" and props["repeats.failures"] == str(rep["failures"])
    assert float(props["repeats.ci95_high"]) == overall["ci95_high"] and "1 run = 2 calls" in props["repeats.unit"]
    assert "runs failed" in suite.find("system-out").text
    page = html.read_text()
    assert "/100 runs failed" in page and "unit: 1 run = 2 calls" in page


def test_rate_bound_runs_73_clean_checks_and_states_the_bound(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["check", TARGET, "--backend", f"{PLANT}:clean", "--rate-bound", "0.05", "--json", str(out)])
    text = " ".join(capsys.readouterr().out.split())  # the report wraps long notes
    assert code == 0 and "verdict: PASS (exit 0)" in text
    assert "0/73 runs failed: rate < 4.9" in text and "this excludes a 5% failure rate per run" in text
    assert "--rate-bound 0.05: 73 runs" in text
    rep = json.loads(out.read_text())["repeats"]
    assert rep["runs"] == 73 and rep["failures"] == 0 and rep["requested_rate"] == 0.05
    assert rep["overall"]["ci95_high"] < 0.05


def test_a_short_clean_repeat_says_it_cannot_exclude_five_percent(capsys):
    assert main(["check", TARGET, "--backend", f"{PLANT}:clean", "--repeat", "3"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the report wraps long notes
    assert "0/3 runs failed" in text and "cannot exclude a 5% failure rate per run: --rate-bound 0.05 runs 73" in text


def test_bad_repeat_arguments_are_exit_2_in_one_line(capsys):
    for bad in (["--repeat", "0"], ["--repeat", "x"], ["--rate-bound", "2"], ["--rate-bound", "0"]):
        assert main(["check", TARGET, "--backend", f"{PLANT}:clean", *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fusecheck: error: argument " + bad[0]), err


def test_without_repeat_the_report_is_the_single_check(tmp_path, capsys):
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert main(["check", TARGET, "--backend", f"{PLANT}:clean", "--json", str(out), "--junit", str(junit)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the report wraps long notes
    assert "runs failed" not in text and "unit:" not in text
    assert "repeats" not in json.loads(out.read_text())
    assert ET.parse(junit).getroot().find("testsuite").find("properties") is None


def test_the_naive_backend_gets_the_models_graph_on_a_model_with_torch_max(capsys):
    """`lambda *a: (fused(*a),)` ignores the graph: it only works if the graph has the model's one output
    (no argmax tap on torch.max) and its inputs (x and the linear's parameters)."""
    assert main(["check", TARGET, "--backend", f"{PLANT}:naive"]) == 0
    assert "verdict: PASS (exit 0)" in capsys.readouterr().out


def test_a_user_backend_callable_receives_the_models_outputs_only():
    from fusecheck.case import load_target
    from fusecheck.check import run_check
    seen = []

    def backend(gm, example_inputs):
        seen.append(len([n for n in gm.graph.nodes if n.op == "output"][0].args[0]))
        assert any(n.target in (torch.max, "max") for n in gm.graph.nodes)  # the decision op is there, untapped
        return gm.forward

    report = run_check(load_target(TARGET), backend=backend)
    assert report.exit_code == 0 and seen and set(seen) == {1}


def test_the_fixture_repeats_checks_and_judges_fused_ops(pytester):
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import pytest

        TARGET = {str(ROOT / TARGET)!r}
        PLANT = {str(ROOT / PLANT)!r}
        SHAPES = [{{"m": 5, "k": 24, "n": 50}}]

        def test_race_is_caught(fusecheck):
            with pytest.raises(pytest.fail.Exception, match="compiled is worse than eager") as info:
                fusecheck.assert_not_worse(TARGET, backend=PLANT + ":racy", repeat=20)
            assert "/20 runs failed" in str(info.value)

        def test_clean_repeat_passes(fusecheck):
            report = fusecheck.assert_not_worse(TARGET, backend=PLANT + ":clean", repeat=3)
            assert report.to_dict()["repeats"]["runs"] == 3

        def test_correct_op_passes(fusecheck):
            from fusecheck.op import load_spec
            spec = load_spec({str(ROOT / "kernels/op_online_softmax.py")!r} + ":OnlineSoftmax")
            report = fusecheck.assert_not_worse_op(spec, dtype="fp32", shapes=SHAPES, probes=False)
            assert report.passed

        def test_tail_bug_fails(fusecheck):
            fusecheck.assert_not_worse_op({str(ROOT / "tests/planted/op_tail_bug.py")!r} + ":TailChunkDropped",
                                          dtype=["fp32"], shapes=SHAPES, probes=False)
    """)
    # in a subprocess, as tests/cli/test_cli.py does: an in-process run re-imports torch libraries
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_tail_bug_fails*", "*the fused op is worse than its unfused chain*"])
