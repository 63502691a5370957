"""torch 2.13's numerics knobs as toggles, templates.off, and the notes for toggles that do not apply."""
from __future__ import annotations

import json

import pytest
import torch

from fusecheck.toggles import TOGGLES, ToggleUnsupported, applicability, not_applying, toggled
from fusecheck.toggles.census import collecting_census

KNOBS = {
    "eager_numerics.division_rounding": ("eager_numerics.division_rounding", True),
    "eager_numerics.disable_ftz": ("eager_numerics.disable_ftz", True),
    "eager_numerics.use_pytorch_libdevice": ("eager_numerics.use_pytorch_libdevice", True),
    "emulate_precision_casts_on_saved_tensors.off": ("emulate_precision_casts_on_saved_tensors", False),
    "deterministic": ("deterministic", True),
    "batch_invariant": ("batch_invariant", True),
}


def _get(key):
    from torch._inductor import config

    obj = config
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", KNOBS)
def test_each_knob_sets_its_key_inside_and_restores_it(name):
    key, value = KNOBS[name]
    before = _get(key)
    assert before != value, f"{key} is already {value}: the toggle would do nothing"
    with toggled([name]):
        assert _get(key) == value
    assert _get(key) == before


@pytest.mark.parametrize("name", ["eager_numerics.disable_ftz", "deterministic"])
def test_a_torch_without_the_key_says_not_supported(torch_config_entries, name):
    from torch._inductor import config

    torch_config_entries.delitem(config._config, KNOBS[name][0])  # as a torch before 2.13 (or after a rename) has it
    with pytest.raises(ToggleUnsupported, match=rf"{name}.*not supported by the installed torch.*{KNOBS[name][0]}"):
        with toggled([name]):
            pass


def test_triton_only_knobs_do_not_apply_to_cpu_graphs_and_say_so():
    gm = torch.fx.symbolic_trace(lambda x: x / 3)
    for node in gm.graph.nodes:
        node.meta["val"] = torch.empty(2, device="cpu")
    reasons = applicability(["eager_numerics.division_rounding", "eager_numerics.disable_ftz", "deterministic"],
                            [gm], train=False)
    assert "Triton codegen only" in reasons["eager_numerics.division_rounding"]
    assert reasons["deterministic"] is None
    for node in gm.graph.nodes:
        node.meta["val"] = torch.empty(2, device="meta").to("meta")
    notes = not_applying(["emulate_precision_casts_on_saved_tensors.off", "partitioner.no_recompute"], [gm],
                         train=False)
    assert len(notes) == 2 and all("does not apply to this run" in n for n in notes)
    assert "no backward" in notes[1]


def test_templates_off_puts_matmuls_back_on_aten_and_restores_the_lowerings():
    """Inductor decomposes a one-row bmm and a 1x8 @ 8x1 mm into fused loops on CPU; templates.off keeps
    both as eager's aten kernels, and the next compile decomposes again."""
    def f(a, b, c):
        return torch.bmm(a, b).relu() + torch.mm(c, c.t()).sum()

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(4, 1, 8, generator=g), torch.randn(4, 8, 8, generator=g), torch.randn(1, 8, generator=g))
    runs = {}
    for key, names in [("before", ()), ("off", ("templates.off",)), ("after", ())]:
        with toggled(list(names)), collecting_census() as census:
            out = torch.compile(f)(*args)
        runs[key] = census
        assert torch.allclose(out, f(*args))
    assert runs["before"].n_extern == 0 and runs["after"].signature() == runs["before"].signature()
    externs = [k for k in runs["off"].kernels if "aten." in k]
    assert runs["off"].n_extern == 2 and any("aten.bmm" in k for k in externs) and any("aten.mm" in k for k in externs)


def test_fusion_template_says_it_turns_templates_on():
    assert "ON" in TOGGLES["fusion.template"].doc and "templates.off" in TOGGLES["fusion.template"].doc


def test_a_forward_only_check_says_which_toggle_does_not_apply():
    from fusecheck.case import Case
    from fusecheck.check import run_check

    case = Case(torch.nn.Linear(8, 8), (torch.randn(4, 8),), "lin")
    report = run_check(case, toggles=("partitioner.no_recompute",))
    assert any("partitioner.no_recompute does not apply" in n and "no backward" in n for n in report.notes)


def test_toggles_listing_shows_the_knobs_promises_and_what_this_torch_lacks(capsys, tmp_path):
    import argparse

    from fusecheck.cli import toggles as cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    out_json = tmp_path / "t.json"
    assert cli.run(p.parse_args(["--json", str(out_json)])) == 0
    out = capsys.readouterr().out
    for name in KNOBS | {"templates.off": 0, "numerics.strict": 0}:
        assert name in out
    data = {d["name"]: d for d in json.loads(out_json.read_text())}
    assert data["numerics.strict"]["supported"].startswith("no: ") and data["deterministic"]["supported"] == "yes"
    assert data["batch_invariant"]["promises"] == ["run_to_run", "batch_invariant"]


def test_bisect_takes_toggles_and_refuses_unknown_ones(monkeypatch, capsys):
    import fusecheck.bisect.cli
    from fusecheck.bisect.result import BisectResult
    from fusecheck.cli.main import main

    seen = {}

    def fake(case, opts, **kw):
        seen["toggles"] = opts.toggles
        return BisectResult("pass", "the target already passes", None, [], 1, 40, {})

    monkeypatch.setattr(fusecheck.bisect.cli, "bisect", fake)
    target = "models/mlp.py:build"
    assert main(["bisect", target, "--toggle", "partitioner.no_recompute,emulate_precision_casts"]) == 0
    assert seen["toggles"] == ("partitioner.no_recompute", "emulate_precision_casts")
    assert "toggled build" in capsys.readouterr().out
    assert main(["bisect", target, "--toggle", "fusion.nope"]) == 2
    assert main(["bisect", target, "--toggle", "numerics.strict"]) == 2  # unsupported by torch 2.13: before compiling


def test_bisect_probes_without_inductor_are_skipped_under_toggles():
    from fusecheck.bisect.objective import run_trial
    from fusecheck.case import Case
    from fusecheck.check import CheckOptions

    trial = run_trial(Case(torch.nn.Linear(2, 2), (torch.randn(2, 2),)),
                      CheckOptions(backend="aot_eager_decomp_partition", toggles=("fusion.pointwise",)), {})
    assert trial.report is None and "act on Inductor" in trial.error
