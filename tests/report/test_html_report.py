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


def test_model_scale_page_groups_rows_worst_first_and_cards_only_the_worst():
    from fusecheck.report.html.check import CARD_LIMIT, WORST_CARDS, block_of
    rows = [_row(f"grad.model.layers.{i}.{k}", "FAIL" if (i, k) == (7, "mlp.up.weight") else "PASS",
                 e=1e-7, c=(1e-3 if (i, k) == (7, "mlp.up.weight") else 1e-7 * (1 + i / 100)))
            for i in range(10) for k in ("attn.q.weight", "mlp.up.weight", "norm.bias")]
    assert len(rows) > CARD_LIMIT
    page = render_check({"case": "big", "status": "FAIL", "rows": rows})
    info = parse_page(page)
    assert page.count('class="card"') == WORST_CARDS and "By block (worst first)" in info.text
    by_block = page[page.index("By block"):page.index("By parameter kind")]
    assert by_block.index("layers.<wbr>7") < by_block.index("layers.<wbr>0")   # the failing block first
    by_kind = page[page.index("By parameter kind"):page.index("worst rows")]
    assert by_kind.index("mlp.<wbr>up.<wbr>weight") < by_kind.index("norm.<wbr>bias")
    assert page.count("<details><summary>") >= 10                 # every row, collapsed per block
    assert block_of("grad.model.layers.3.mlp.up.weight", []) == ("model.layers.3", "mlp.up.weight")
    assert block_of("grad.blocks.1.up.bias", ["blocks.1", "blocks.10"]) == ("blocks.1", "up.bias")
    assert block_of("output", []) == ("(outside the blocks)", "output")


def test_every_chart_has_axis_titles_and_scales():
    import re
    page = render_check({"case": "t", "status": "FAIL", "rows": [{**_row("output", "FAIL", "worse_than_eager",
        1e-7, 2.4e-3), "octaves": {"base": -20, "eager": [[18, 5, 1e-7], [19, 9, 2e-7]],
                                   "compiled": [[18, 5, 1e-3], [19, 9, 3e-3]]}}],
        "blocks": [{"name": f"blocks.{i}", "eager_rmse": 1e-7, "compiled_rmse": None} for i in range(3)]})
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert {re.search(r'data-chart="(\w+)"', s).group(1) for s in svgs} == {"ratios", "octaves", "blocks"}
    for s in svgs:
        assert 'class="axis-title"' in s and s.count('class="tick"') >= 2
    assert "24 000×" in page                                      # the gap written out, on a log axis with 1×
    assert ">1×<" in page and "--regional" in page                # no compiled per block: says how to get it


def test_bisect_page_marks_the_kernels_holding_a_culprit():
    kernels = [{"graph": 0, "kernel": "extern_kernels.mm", "fx_nodes": ["mm_default"], "output": "mm_default",
                "status": "PASS", "code": "within_tolerance", "rmse": 1e-3, "eager_rmse": 1e-3, "ratio": 1.0,
                "culprit": "1"},
               {"graph": 0, "kernel": "cpp_fused_mul_1", "fx_nodes": ["mul"], "output": "mul", "status": "PASS",
                "rmse": 1e-8, "eager_rmse": 1e-8, "ratio": 1.0, "culprit": ""}]
    page = render_bisect({"status": "culprits", "exit_code": 1, "culprits": [], "max_compiles": 40,
                          "kernels": kernels})
    parse_page(page)
    assert page.count('<span class="mark">culprit 1</span>') == 1 and page.count('class="culprit"') == 1


def test_dist_folder_is_one_page_and_a_crashed_rank_is_marked_not_green():
    from fusecheck.report.html.page import STATUS_COLORS

    def spec(name, status="PASS", ranks=()):
        return {"spec": name, "status": status, "world_size": 2, "run": {"status": status.lower() if ranks else "ok",
                "ranks": list(ranks), "detail": "rank 1: RuntimeError: boom",
                "errors": {"1": {"type": "RuntimeError", "message": "boom", "traceback": "Traceback ..."}}},
                "layers": {"whole": {"status": "INCOMPLETE", "runs": [{"ranks": {"0": {"passed": True},
                                                                              "1": {"passed": True}}}]}},
                "diagnosis": {"cause": f"{status} on rank(s) 1" if ranks else "none",
                              "findings": [{"cause": "CRASH on rank(s) 1", "layer": "run", "evidence": "rank 1: boom"}]
                              if ranks else []}}
    data = {"tool": "fusecheck dist", "status": "HANG/CRASH", "exit_code": 3,
            "summary": [{"spec": "a.py:A", "status": "PASS", "layers": {"whole": "PASS"}, "cause": "none"},
                        {"spec": "b.py:B", "status": "CRASH", "layers": {}, "cause": "CRASH on rank(s) 1"}],
            "checks": [spec("a.py:A"), spec("b.py:B", "CRASH", [1])]}
    page = render_dist(data)
    info = parse_page(page)
    flat = parse_page(page.replace("<wbr>", "")).text
    assert info.tables == 3 and "a.py:A" in flat and "b.py:B" in flat
    assert '<span class="mark">CRASH</span>' in page and "✖ CRASH" in page
    crashed = page[page.rindex("<td", 0, page.index("✖ CRASH")):page.index("✖ CRASH")]
    assert 'class="culprit"' in crashed and STATUS_COLORS["PASS"] not in crashed
    assert "<li><b>CRASH on rank(s) 1</b> (layer run): rank 1: boom</li>" in page and '"findings"' not in page
