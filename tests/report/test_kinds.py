"""Model-scale tables (fusecheck/report/kinds.py): above KIND_ROWS rows the table shows one row per parameter
kind (names alike but for a block index), its worst row, nearest to the limit first; a failing row is never
hidden in its kind, and the JSON keeps every row."""
import json
import math
import re

import torch

from fusecheck.case import Case
from fusecheck.check import run_check
from fusecheck.compare import Comparison, Status, Verdict
from fusecheck.report.kinds import KIND_ROWS, by_kind, closeness, kind_of
from fusecheck.report.table import format_report


def _row(name, margin=0.5, fail=False):
    v = Verdict(Status.FAIL if fail else Status.PASS, "worse_than_eager" if fail else "not_worse_than_eager", "",
                margins={"rmse": margin})
    return Comparison(name, "bf16", (4,), v)


def test_kinds_collapse_block_indices_only():
    assert kind_of("grad.model.layers.17.self_attn.q_proj.weight") == "grad.model.layers.*.self_attn.q_proj.weight"
    assert kind_of("grad.h.3.mlp.c_fc.2") == "grad.h.*.mlp.c_fc.*"
    assert kind_of("grad.input[0]") == "grad.input[0]" and kind_of("output.1e5") == "output.1e5"


def test_a_small_table_is_left_as_it_is():
    rows = [_row(f"grad.layers.{i}.w") for i in range(KIND_ROWS)]
    assert by_kind(rows) == (rows, None)


def test_each_kind_shows_its_worst_row_nearest_to_the_limit_first_and_failures_are_counted():
    rows = [_row("output", 0.1)]
    for i in range(30):
        rows.append(_row(f"grad.layers.{i}.q.weight", 0.2 + 0.01 * i))  # worst: layers.29 at 0.49
        rows.append(_row(f"grad.layers.{i}.k.weight", 0.9 if i == 7 else 0.3))  # worst: layers.7 at 0.9
    rows.append(_row("grad.layers.12.v.weight", 0.1, fail=True))
    rows.append(_row("grad.layers.13.v.weight", 0.95))
    shown, counts = by_kind(rows)
    assert [r.name for r in shown] == ["grad.layers.*.v.weight", "grad.layers.*.k.weight", "grad.layers.*.q.weight",
                                       "output"]
    assert counts == ["2, 1 FAIL, worst 12", "30, worst 7", "30, worst 29", "1"]
    assert closeness(shown[0]) == math.inf and shown[1].verdict.margins["rmse"] == 0.9


class Deep(torch.nn.Module):
    def __init__(self, n=24, d=8):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def test_a_check_of_many_blocks_prints_kinds_and_its_json_keeps_every_row(tmp_path):
    torch.manual_seed(0)
    r = run_check(Case(Deep(), (torch.randn(4, 8),), "deep"), backend="aot_eager", train=True)
    assert len(r.rows) == 50
    text = format_report(r)
    assert "50 rows shown as 4 kinds" in text
    assert re.search(r"grad\.layers\.\*\.weight +24 ", text), text  # bitwise equal to eager: no worst to name
    assert re.search(r"grad\.layers\.\*\.bias +24 ", text), text
    assert "grad.layers.17.weight" not in text.split("per block")[0]
    data = json.loads(json.dumps(r.to_dict()))
    assert len(data["rows"]) == 50 and any(row["name"] == "grad.layers.17.weight" for row in data["rows"])
    assert not any("updates its own state" in n for n in r.notes)  # the auto golden's copy is not that note
