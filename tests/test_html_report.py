"""The --html pages: self-contained, well-formed, and drawing what each report holds (synthetic reports)."""
import pytest
import torch

from fusecheck.report.distribution import distributions, error_distribution
from fusecheck.report.html import RENDERERS, render_bisect, render_check, render_dist, render_matrix
from tests.html_check import parse_page


def _row(name, status="PASS", code="within_tolerance", e=1e-7, c=1.2e-7):
    return {"name": name, "dtype": "bfloat16", "shape": [8, 8], "error_ratio": c / e,
            "verdict": {"status": status, "code": code, "message": "m"},
            "eager_vs_golden": {"rmse": e, "max_rel": 10 * e, "max_abs": e, "mean_rel": e, "ulp_max": 3},
            "vs_golden": {"rmse": c, "max_rel": 10 * c, "max_abs": c, "mean_rel": c, "ulp_max": 4}, "notes": []}


def test_check_page_draws_distributions_and_the_block_curve():
    g = torch.randn(1000, dtype=torch.float64)
    data = {"case": "toy", "status": "FAIL", "exit_code": 1, "backend": "inductor", "rows": [
        {**_row("output", "FAIL", "worse_than_eager", 1e-7, 1e-3),
         "distribution": distributions(g.float().double(), g.bfloat16().double(), g)},
        _row("grad.w")],
        "blocks": [{"name": f"layers.{i}", "eager_rmse": 1e-6, "compiled_rmse": 1e-6 * (1 + 10 * (i > 2)),
                    "ratio": 1 + 10 * (i > 2), "verdict": "FAIL" if i > 2 else "PASS"} for i in range(5)],
        "memory": {"golden": 2**30}}
    info = parse_page(render_check(data))
    assert info.svgs == 1 + 2 + 1  # block curve; quantiles + histogram; metric bars for the row without
    assert "layers.4" in info.text and "1024 MiB" in info.text and "worse_than_eager" in info.text
    without = parse_page(render_check({**data, "blocks": None}))
    assert without.svgs == 3


def test_error_reports_and_empty_reports_render():
    for kind, render in RENDERERS.items():
        parse_page(render({"status": "ERROR", "exit_code": 3, "error": "codegen <exploded>"}))
    assert "codegen &lt;exploded&gt;" in render_check({"error": "codegen <exploded>"})


def test_matrix_heat_map_colours_the_worse_row_red():
    def rep(rmse):
        return {"rows": [{"name": "output", "vs_golden": {"rmse": rmse}}]}
    data = {"case": "t", "exit_code": 0, "moves_most": "fusion.x", "rows": [
        {"name": "baseline", "reference": None, "report": rep(1e-4), "verdict": "PASS", "kernels": 3},
        {"name": "fusion.x", "reference": "baseline", "report": rep(4e-4), "verdict": "PASS", "moves_most": True},
        {"name": "fusion.y", "reference": "baseline", "report": None, "skipped": "not applicable: no reductions"}]}
    page = render_matrix(data)
    parse_page(page)
    assert 'style="background:rgb(255,105,85)"' in page  # 4x worse: saturated red
    assert "not applicable: no reductions" in page


def test_bisect_chain_and_dist_grid():
    summary = {"rows": {"output": {"rmse": 1e-3, "eager_rmse": 1e-6, "status": "FAIL"}}}
    bis = {"status": "culprits", "exit_code": 1, "message": "1 culprit", "compiles": 7, "max_compiles": 40,
           "decisions": {"fusion": 3}, "baseline": summary, "final": summary, "seconds": 3.0,
           "culprits": [{"kind": "fusion", "name": "fuse(mm, add)", "fx_nodes": ["mm", "add"], "kernels": ["k0"],
                         "with": summary, "without": summary}], "kernels": [], "log": ["probe 1"]}
    info = parse_page(render_bisect(bis))
    assert "culprit 1" in info.text and "fuse(mm, add)" in info.text
    runs = [{"ranks": {"0": {"passed": True}, "1": {"passed": False, "comparison": {"verdict": {"message": "bad"}}}}}]
    dist = {"spec": "k.py:S", "status": "FAIL", "world_size": 2, "layers": {
        "comm": {"status": "PASS", "runs": [{"ranks": {"0": {"passed": True}, "1": {"passed": True}}}]},
        "whole": {"status": "FAIL", "runs": runs}}, "diagnosis": {"cause": "rank 1"}}
    page = render_dist(dist)
    info = parse_page(page)
    assert "rank 1" in info.text and "1/1" in info.text and 'title="bad"' in page


def test_error_distribution_quantiles_and_shared_bins():
    g = torch.zeros(1000, dtype=torch.float64)
    a = g + torch.logspace(-9, -3, 1000, dtype=torch.float64)
    d = error_distribution(a, g)
    assert d["n"] == 1000 and d["quantiles"]["1"] == pytest.approx(1e-3)
    assert d["quantiles"]["0.5"] == pytest.approx(1e-6, rel=0.05)
    assert sum(d["counts"]) == 1000 and d["log10_bins"] == [-16.0, 4.0, 0.5]
    assert error_distribution(a, g[:10]) is None and error_distribution(a.long(), g.long()) is None
