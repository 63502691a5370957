"""The toggle matrix: rows, not-applicable rows, the most-moving row, JSON, and the CLI exit codes."""
from __future__ import annotations

import json

import pytest
import torch

from fusecheck.case import Case, TargetError
from fusecheck.matrix import MARK, MatrixRow, mark_most_moved, run_matrix
from fusecheck.toggles import ToggleError

TARGET = "tests/planted/tiny_tanh.py:build_centred"


@pytest.fixture(scope="module")
def target():
    return TARGET


@pytest.fixture(scope="module")
def report(target):
    from fusecheck.case import load_target

    return run_matrix(load_target(target), ["fusion.pointwise", "fusion.reduction", "emulate_precision_casts"],
                      all_together=True)


def test_rows_baseline_toggles_all_and_not_applicable(report):
    names = [r.name for r in report.rows]
    assert names == ["baseline", "fusion.pointwise", "fusion.reduction", "all", "emulate_precision_casts"]
    na = report.rows[-1]
    assert na.report is None and na.skipped == "not applicable: no fp16/bf16 tensors in the graph"
    base, pw = report.rows[0].numbers(), report.rows[1].numbers()
    assert pw["kernels"] > base["kernels"] and pw["fx_nodes_fused"] < base["fx_nodes_fused"]
    assert report.rows[3].toggles == ("fusion.pointwise", "fusion.reduction")
    assert report.exit_code == 0


class _Stub(MatrixRow):
    def __init__(self, name, rmse, reference="baseline"):
        super().__init__(name, (name,), reference=reference if name != "baseline" else None, report=object())
        self._rmse = rmse

    def golden_rmse(self):
        return {"output": self._rmse}


def test_the_row_that_moves_most_against_its_reference_is_marked():
    rows = [_Stub("baseline", 1e-3), _Stub("max_autotune", 2e-3), _Stub("a", 1.5e-3), _Stub("b", 0.25e-3),
            _Stub("fusion.template", 2e-3, reference="max_autotune")]
    mark_most_moved(rows)
    assert [r.name for r in rows if r.most] == ["b"]  # |log2(0.25)| = 2 beats 2x, 1.5x, and 1x vs its own ref
    assert rows[4].movement == 0.0 and rows[1].movement == 1.0 and abs(rows[2].movement - 0.585) < 1e-3
    still = [_Stub("baseline", 1e-3), _Stub("a", 1e-3)]
    mark_most_moved(still)
    assert not any(r.most for r in still)


def test_a_toggle_with_no_effect_is_flagged_not_shown_as_a_plain_pass(target, report):
    """CPU Inductor never splits reductions: the row equals the baseline and must say so."""
    from fusecheck.case import load_target
    from fusecheck.matrix import NO_EFFECT

    m = run_matrix(load_target(target), ["split_reductions"])
    assert m.rows[1].name == "split_reductions" and m.rows[1].no_effect
    assert NO_EFFECT in m.table()
    assert not report.rows[1].no_effect  # fusion.pointwise changes the kernels


def test_the_marker_shows_in_the_table(report):
    assert (MARK in report.table()) == any(r.most for r in report.rows)


def test_json_keeps_the_census_and_the_numbers(report):
    d = json.loads(json.dumps(report.to_dict(), default=str))
    rows = {r["name"]: r for r in d["rows"]}
    assert rows["fusion.pointwise"]["census"]["n_kernels"] == rows["fusion.pointwise"]["kernels"]
    assert rows["baseline"]["census"]["kernels"], "the census lists which FX nodes went into which kernel"
    assert {"rmse", "max_rel", "ulp_max", "error_ratio", "elements_differing_from_eager", "verdict"} <= set(
        rows["baseline"])
    assert "not applicable" in report.table()


def test_non_inductor_backend_and_bad_names_fail_before_compiling():
    case = Case(torch.nn.Identity(), (torch.randn(2),), "id")
    with pytest.raises(TargetError, match="not Inductor"):
        run_matrix(case, ["fusion.pointwise"], backend="aot_eager")
    with pytest.raises(ToggleError, match="unknown toggle 'fusion.nope'"):
        run_matrix(case, ["fusion.nope"])


def test_cli_exit_codes(target, tmp_path, capsys):
    from fusecheck.cli.main import main

    out = tmp_path / "m.json"
    assert main(["matrix", target, "--toggles", "fusion.pointwise", "--json", str(out)]) == 0
    assert "fusion.pointwise" in capsys.readouterr().out
    assert [r["name"] for r in json.loads(out.read_text())["rows"]] == ["baseline", "fusion.pointwise"]
    assert main(["matrix", target, "--toggles", "fusion.nope"]) == 2
    assert main(["matrix", target, "--backend", "aot_eager"]) == 2
    assert main(["check", target, "--toggle", "fusion.nope"]) == 2
    assert "unknown toggle 'fusion.nope'" in capsys.readouterr().err


def test_toggles_listing(capsys):
    import argparse

    from fusecheck.cli import toggles as cli
    from fusecheck.toggles import TOGGLES

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--how"])) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TOGGLES) and "realize" in out


def test_a_forward_only_matrix_says_which_training_toggles_do_not_apply(target):
    from fusecheck.case import load_target

    m = run_matrix(load_target(target), ["partitioner.no_recompute"])
    assert [r.name for r in m.rows] == ["baseline", "partitioner.no_recompute"] and m.rows[1].report is None
    assert any(n.startswith("forward-only run: partitioner.no_recompute does not apply") for n in m.notes)
    assert "note: forward-only run" in m.table() and m.to_dict()["notes"] == m.notes


def test_the_matrix_package_keeps_its_imports():
    import fusecheck.matrix as matrix

    for name in ("run_matrix", "MatrixRow", "MatrixReport", "mark_most_moved", "plan", "BASELINE", "ALL", "MARK",
                 "NO_EFFECT", "REFERENCE_ONLY", "add_arguments", "run"):
        assert hasattr(matrix, name), name
