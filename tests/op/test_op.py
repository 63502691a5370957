"""`fusecheck op`: the reference fused kernel passes, planted bugs fail where they are, races get a rate."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import torch

from fusecheck.op import OpSpec, check_op, load_spec, seeded_randn
from fusecheck.op.report import format_op_report

KERNEL = "kernels/op_online_softmax.py:OnlineSoftmax"
PLANTED = "tests/planted/"
TWO_SHAPES = ["--shape", "m=4,k=16,n=32", "--shape", "m=5,k=24,n=50"]  # one divides the chunk of 16, one not


def op(*argv: str) -> int:
    """`fusecheck op ARGS` in this process: its parser and the CLI's error handling and time limit."""
    import fusecheck.op.cli as module
    from fusecheck.cli.main import HelpFormatter, Parser, add_run_arguments, run_command
    parser = Parser(prog="fusecheck op", formatter_class=HelpFormatter)
    module.add_arguments(parser)
    add_run_arguments(parser)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    args.command = "op"
    return run_command(module, args)


def failing_keys(report) -> set[str]:
    return {r.name.split(".")[0] for r in report.all_rows if not r.passed}


def test_the_correct_op_passes_in_fp32_bf16_fp16_in_one_call(tmp_path, capsys):
    out = tmp_path / "op.json"
    assert op(KERNEL, "--dtype", "fp32,bf16,fp16", "--repeat", "1", "--json", str(out), "-q") == 0
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["dtypes"] == ["fp32", "bf16", "fp16"]
    shapes = {",".join(f"{k}={v}" for k, v in s.items()) for s in load_spec(KERNEL).shapes}
    judged = {r["name"].split(".")[0] for r in data["rows"]}
    assert judged == {f"{d}[{s}]" for d in data["dtypes"] for s in shapes}
    probes = {r["name"].split(".")[1].split(":")[0] for r in data["rows"] if ":" in r["name"]}
    assert probes == {"nan_inf", "magnitude"}
    assert all(r["verdict"]["status"] == "PASS" for r in data["rows"])
    text = capsys.readouterr().out
    assert "verdict: PASS (exit 0)" in text and "failure rate per dtype and shape" in text


def test_the_tail_chunk_bug_fails_on_the_non_dividing_shapes_only():
    spec = load_spec(PLANTED + "op_tail_bug.py:TailChunkDropped")
    report = check_op(spec, dtypes=["bf16"], repeat=1)
    tails = {f"bf16[{','.join(f'{k}={v}' for k, v in s.items())}]" for s in spec.shapes if s["n"] % spec.chunk}
    assert report.exit_code == 1 and tails and failing_keys(report) == tails


def test_the_5_percent_race_fails_under_repeat_100_with_its_rate_and_bound(tmp_path, capsys):
    out = tmp_path / "race.json"
    code = op(PLANTED + "op_race.py:StaleReadRace", "--dtype", "fp32", *TWO_SHAPES, "--no-probes", "--repeat", "100",
              "--json", str(out), "-q")
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 1 and data["status"] == "FAIL" and data["repeat"] == 100
    overall = data["rates"]["overall"]
    assert overall["runs"] == 200 and 0 < overall["failures"] < 200
    assert overall["ci95_low"] < overall["rate"] < overall["ci95_high"] and data["rates"]["calls_per_run"] == 1
    assert len(data["rates"]["per_shape"]) == 2 and all(v["runs"] == 100 for v in data["rates"]["per_shape"].values())
    failed_runs = [r for r in data["runs"] if not r["passed"]]
    assert len(failed_runs) == overall["failures"]
    assert f"{overall['failures']}/200 runs failed" in text and "Wilson 95%" in text and "unit: 1 run = 1 call" in text


def test_rate_bound_picks_the_runs_and_a_clean_op_passes_with_the_bound_stated(tmp_path, capsys):
    out = tmp_path / "bound.json"
    assert op(KERNEL, "--dtype", "fp32", "--shape", "m=5,k=24,n=50", "--no-probes", "--rate-bound", "0.05",
              "--json", str(out), "-q") == 0
    data = json.loads(out.read_text())
    assert data["repeat"] == 73 and data["rates"]["overall"]["ci95_high"] < 0.05
    text = capsys.readouterr().out
    assert "0/73 runs failed" in text and "excludes a 5% failure rate" in text and "73 runs" in text


def test_a_clean_pass_too_short_to_exclude_the_requested_rate_says_so(capsys):
    assert op(KERNEL, "--dtype", "fp32", "--shape", "m=5,k=24,n=50", "--no-probes", "--repeat", "3", "-q") == 0
    assert "this PASS cannot exclude a 5% failure rate per run: --rate-bound 0.05 runs 73" in \
        " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("ref,args", [
    (PLANTED + "op_correct.py:OneChunk", []), (PLANTED + "op_correct.py:OneColumnAtATime", []),
    (PLANTED + "op_correct.py:ChunkOfSeven", []), (PLANTED + "op_correct.py:ThreePass", []),
    (PLANTED + "op_correct.py:SplitK", []), (KERNEL, ["chunk=5"]), (KERNEL, ["chunk=64"])])
def test_correct_variants_pass_with_every_probe(ref, args):
    report = check_op(load_spec(ref, args), dtypes=["fp32", "bf16", "fp16"], repeat=1,
                      shapes=[{"m": 4, "k": 16, "n": 32}, {"m": 5, "k": 24, "n": 50}])
    assert report.passed, [(r.name, r.verdict.message) for r in report.all_rows if not r.passed]
    assert report.probe_rows


@pytest.mark.parametrize("bug,probe", [("NonFiniteDropped", "nan_inf:x"), ("NoMaxSubtraction", "magnitude:huge")])
def test_a_bug_only_a_probe_sees_fails_that_probe_only(bug, probe):
    report = check_op(load_spec(f"{PLANTED}op_probe_bugs.py:{bug}"), dtypes=["bf16"], repeat=1,
                      shapes=[{"m": 5, "k": 24, "n": 50}])
    failed = {r.name.split(".", 1)[1].rsplit(".output", 1)[0] for r in report.all_rows if not r.passed}
    assert report.exit_code == 1 and failed and all(f.startswith(probe) for f in failed)
    assert all(r.passed for r in report.rows)


def test_train_judges_every_gradient_and_a_wrong_one_fails():
    shapes = [{"m": 5, "k": 24, "n": 50}]
    good = check_op(load_spec(KERNEL), dtypes=["bf16"], repeat=1, train=True, probes=False, shapes=shapes)
    assert good.passed and {r.name.split(".", 1)[1] for r in good.rows} >= {"grad.x", "grad.w", "grad.b"}
    bad = check_op(load_spec(PLANTED + "op_probe_bugs.py:BiasGradScaled"), dtypes=["bf16"], repeat=1, train=True,
                   probes=False, shapes=shapes)
    assert {r.name.split(".", 1)[1] for r in bad.rows if not r.passed} == {"grad.b"}


class _RowSum(OpSpec):
    """sum over a row: a row with NaN or +Inf and -Inf is NaN in the golden."""
    shapes = [{"m": 4, "n": 6}]
    dtypes = ("fp32",)

    def make_inputs(self, shape, dtype, seed):
        return {"x": seeded_randn((shape["m"], shape["n"]), seed, dtype),
                "y": seeded_randn((shape["m"], shape["n"]), seed + 1, dtype)}

    def reference(self, x, y):
        return x.sum(-1) + y.sum(-1)


class _InfForNaN(_RowSum):
    """A kernel that writes +Inf where the chain has NaN: non-finite at the golden's places, of another kind."""

    def fused(self, x, y):
        out = self.reference(x, y)
        return torch.where(torch.isnan(out), torch.full_like(out, float("inf")), out)


@pytest.mark.parametrize("promise,passes", [("exact", False), ("positions", True)])
def test_special_inputs_choose_the_probed_inputs_and_their_promise(promise, passes):
    spec = _InfForNaN()
    spec.special_inputs = {"x": promise, "y": None}   # y opts out
    report = check_op(spec, repeat=1)
    specials = {r.name.split(".")[1] for r in report.probe_rows if "nan_inf" in r.name}
    assert specials == {"nan_inf:x"} and all(r.passed for r in report.rows)
    assert all(r.passed for r in report.probe_rows if "nan_inf" in r.name) is passes


@pytest.mark.parametrize("name,code", [("WrongShape", "shape_mismatch"), ("WrongDtype", "dtype_mismatch"),
                                       ("NotATensor", "type_mismatch"), ("EmptyOutput", "empty"),
                                       ("AllNaNGolden", "golden_all_nan")])
def test_never_a_pass_without_a_comparable_finite_result(name, code):
    report = check_op(load_spec(f"{PLANTED}op_broken.py:{name}"), repeat=1, probes=False)
    assert not report.passed and report.rows[0].verdict.code == code
    assert report.exit_code == (2 if code in ("empty", "golden_all_nan") else 1)


@pytest.mark.parametrize("argv,says", [
    (["tests/planted/nothere.py:X"], "not found"),
    ([PLANTED + "op_broken.py:NotASpec"], "not a fusecheck.op.OpSpec subclass"),
    ([KERNEL, "--spec-arg", "chonk=3"], "does not take it"),
    ([KERNEL, "--spec-arg", "chunk=0"], "chunk must be >= 1"),
    ([KERNEL, "--spec-arg", "chunk=two"], "not a valid int"),
    ([KERNEL, "--dtype", "fp8"], "comma-separated list"),
    ([KERNEL, "--rate-bound", "1.5"], "strictly between 0 and 1"),
    ([KERNEL, "--shape", "m=3"], "make_inputs"),
    ([PLANTED + "op_broken.py:ReferenceRaises"], "the chain is broken"),
    ([PLANTED + "op_broken.py:InputsNotADict"], "not a non-empty dict"),
    ([PLANTED + "op_broken.py:BadSpecialInputs"], "not floating inputs"),
    ([PLANTED + "op_broken.py:UnknownPromise"], "unknown promise"),
])
def test_a_bad_spec_or_input_is_one_line_and_exit_2(argv, says, capsys):
    assert op(*argv, "-q") == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_kernel_that_raises_is_one_line_and_exit_3(capsys):
    assert op(PLANTED + "op_broken.py:KernelRaises", "-q") == 3
    err = capsys.readouterr().err.strip()
    assert "tile index out of range" in err and len(err.splitlines()) == 1


def test_junit_and_html_reports(tmp_path):
    junit, html = tmp_path / "op.xml", tmp_path / "op.html"
    code = op(PLANTED + "op_tail_bug.py:TailChunkDropped", "--dtype", "bf16", *TWO_SHAPES, "--repeat", "1",
              "--junit", str(junit), "--html", str(html), "-q")
    assert code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failed) > 0
    assert all("n_50" in c.get("name") for c in failed)
    page = html.read_text()
    assert "fusecheck op:" in page and "TailChunkDropped" in page


def test_the_compact_report_keeps_the_probes_to_one_line_and_v_lists_them():
    report = check_op(load_spec(KERNEL), dtypes=["fp32"], repeat=1, shapes=[{"m": 4, "k": 16, "n": 32}])
    compact, verbose = format_op_report(report), format_op_report(report, verbose=True)
    assert "nan_inf:x" not in compact and "probes (magnitude, nan_inf" in compact
    assert "nan_inf:x" in verbose and "magnitude:huge" in verbose
