"""`fusecheck train` from the command line: exit codes, the text verdict, --json/--html/--junit, usage errors.

Run in-process through `fusecheck.cli.main.main`, with tiny models, few steps and a band of 2 runs; the planted
backends (tests/planted/train_plants.py) run the captured graphs, so only one test pays an Inductor compile.
"""
import contextlib
import io
import json
import math
import re
import xml.etree.ElementTree as ET

import pytest

from fusecheck.cli.main import main

MLP = "models/mlp.py:build"
TARGETS = "tests/planted/train_targets.py:build"
STALE = "tests/planted/train_plants.py:stale_weights"
FAST = ["--band-runs", "2", "-q"]


def train(*argv):
    return main(["train", *argv, *FAST])


def test_a_correct_backend_passes_with_exit_0(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert train(TARGETS, "--backend", "aot_eager", "--dtype", "bf16", "--steps", "3", "--json", str(out)) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1].startswith("PASS")
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["exit_code"] == 0 and data["first_failed_step"] is None
    assert [s["step"] for s in data["series"]] == [0, 1, 2]
    for s in data["series"]:  # aot_eager runs eager's own ops: bitwise equal, so drift ratio to eager is 1
        assert s["losses"]["compiled"] == s["losses"]["eager"]
        assert s["ratio"]["to_eager"] == pytest.approx(1.0) and s["ratio"]["to_band"] <= 1.0


def test_stock_inductor_passes_from_the_command_line(capsys):
    assert train(MLP, "--backend", "inductor", "--dtype", "bf16", "--steps", "2") == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1].startswith("PASS: compiled stayed within eager's band at every step")


def stale(tmp_path, *extra):
    return train(MLP, "--backend", STALE, "--dtype", "bf16", "--optimizer", "sgd", "--steps", "3",
                 "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"),
                 "--junit", str(tmp_path / "r.xml"), *extra)


@pytest.fixture(scope="module")
def stale_run(tmp_path_factory):
    """One run of the stale-weight artifact of issue 23 with every report; the tests below read it."""
    tmp = tmp_path_factory.mktemp("stale")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = stale(tmp)
    return code, out.getvalue(), tmp


def test_the_stale_weight_artifact_fails_with_exit_1_at_step_1(stale_run):
    code, text, tmp = stale_run
    assert code == 1
    assert "compiled left eager's band at step 1" in text
    assert text.splitlines()[-1] == "FAIL: compiled left eager's band at step 1 (exit 1)"
    data = json.loads((tmp / "r.json").read_text())
    assert data["first_failed_step"] == 1  # the issue asks for step 1 or 2; it is the first step it can show
    assert "loss" in data["left_band"]


def test_json_has_a_per_step_series_of_losses_and_drift_ratio(stale_run):
    _, _, tmp = stale_run
    series = json.loads((tmp / "r.json").read_text())["series"]
    assert [s["step"] for s in series] == [0, 1, 2]
    losses = [s["losses"] for s in series]
    assert all(set(l) >= {"eager", "compiled", "shadow"} and all(map(math.isfinite, l.values())) for l in losses)
    # step 0: the artifact is eager's own computation, bitwise
    assert losses[0]["compiled"] == losses[0]["eager"]
    assert series[0]["status"] == "PASS" and series[0]["ratio"]["to_eager"] == pytest.approx(1.0)
    # then eager (and the fp64 shadow) train while the stale forward keeps step 0's loss
    assert losses[2]["eager"] < losses[1]["eager"] < losses[0]["eager"] - 0.01
    assert losses[2]["shadow"] < losses[0]["shadow"] - 0.01
    assert abs(losses[2]["eager"] - losses[2]["shadow"]) < 0.01
    assert all(l["compiled"] == pytest.approx(losses[0]["compiled"], rel=1e-2) for l in losses)
    # the drift ratio is compiled's distance to the shadow over the band's, and it grows once it left the band
    for s in series:
        assert s["ratio"]["to_band"] == pytest.approx(s["distance"]["compiled"] / s["distance"]["band"])
    ratios = [s["ratio"]["to_band"] for s in series]
    assert ratios[0] < 1 < ratios[1] < ratios[2]
    assert [s["status"] for s in series] == ["PASS", "FAIL", "FAIL"]


def _loss_chart(page: str) -> str:
    charts = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    return next(c for c in charts if "loss per step" in c)


def test_html_page_plots_the_three_loss_curves(stale_run):
    _, _, tmp = stale_run
    page = (tmp / "r.html").read_text()
    data = json.loads((tmp / "r.json").read_text())
    assert "<h2>Loss</h2>" in page and "step <b>1</b>" in page
    chart = _loss_chart(page)
    curves = {name: points for points, name in
              re.findall(r'<polyline[^>]*points="([^"]*)"><title>(\w+)</title>', chart)}
    assert set(curves) == {"eager", "compiled", "shadow"}
    for name, points in curves.items():  # one point per step, drawn from the series
        assert len(points.split()) == len(data["series"]) == 3, name
    # compiled's curve is flat (stale), eager's goes down (larger y in SVG coordinates)
    ys = {n: [float(p.split(",")[1]) for p in pts.split()] for n, pts in curves.items()}
    assert max(ys["compiled"]) - min(ys["compiled"]) < 1.0
    assert ys["eager"][2] > ys["eager"][0] + 10


def test_junit_xml_names_the_failures(stale_run):
    _, _, tmp = stale_run
    root = ET.parse(tmp / "r.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    from fusecheck.case import load_target
    names = {f"param.{n}" for n, _ in load_target(MLP).model.named_parameters()}
    assert set(cases) == {"loss"} | names  # one testcase per loss and parameter
    failure = cases["loss"].find("failure")
    assert failure is not None and "step 1" in failure.get("message")
    assert int(root.get("failures")) >= 1


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps"),
    (["--optimizer", "bogus"], "--optimizer"),
    (["--lr", "-1"], "--lr"),
    (["--lr=-0.5"], "--lr"),
    (["--lr", "nan"], "--lr"),
])
def test_bad_options_are_exit_2_in_one_line(capsys, argv, message):
    assert main(["train", MLP, "--backend", "eager", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fusecheck: error:") and message in err
    assert "Traceback" not in captured.err + captured.out


def test_a_target_file_that_does_not_exist_is_exit_2_in_one_line(capsys, tmp_path):
    assert main(["train", str(tmp_path / "nope.py") + ":build", "--backend", "eager", "--steps", "1", "-q"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "nope.py" in err and "not found" in err
    assert "Traceback" not in captured.err + captured.out


def test_a_usage_error_still_leaves_the_reports_ci_reads(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["train", "tests/planted/train_targets.py:no_parameters", "--backend", "eager", "--steps", "1",
                 "-q", "--json", str(out), "--junit", str(tmp_path / "r.xml")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    data = json.loads(out.read_text())
    assert data["status"] == "ERROR" and data["exit_code"] == 2 and "trainable parameters" in data["error"]
    assert ET.parse(tmp_path / "r.xml").getroot().find(".//error") is not None
