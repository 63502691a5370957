"""The kernel runs on a process group that is not the default one (`--group sub`, the default on gloo): global
ranks 1..N of N+1 processes. A kernel that names a peer by its group rank where torch.distributed takes a global
one, or asks dist.get_rank() without its group, is right on the default group and wrong here; correct kernels
pass on both. Bugs: tests/planted/dist_bugs.py; correct kernels: tests/planted/dist_correct.py."""
from __future__ import annotations

import json

import pytest

from fusecheck.distributed.entry import main
from fusecheck.distributed.report import render
from fusecheck.distributed.runner import check
from fusecheck.distributed.task import CheckTask

PLANTED = "tests/planted/dist_bugs.py"
CORRECT = "tests/planted/dist_correct.py"


def run_cli(tmp_path, argv) -> tuple[int, dict]:
    out = tmp_path / "d.json"
    code = main(argv + ["--world-size", "2", "--repeat", "2", "--timeout", "10", "--json", str(out)])
    return code, json.loads(out.read_text())


@pytest.mark.parametrize("cls, code, cause", [
    ("GroupRankAsPeer", 3, "group and default-group ranks or sizes mixed up"),      # isend to a group rank: gloo refuses
    ("GlobalRankSlot", 1, "the fused path, deterministically"),            # own block in dist.get_rank()'s slot
])
def test_a_group_rank_confusion_passes_on_the_default_group_and_fails_on_a_subgroup(tmp_path, cls, code, cause):
    assert run_cli(tmp_path, [f"{PLANTED}:{cls}", "--group", "world"])[0] == 0   # invisible there
    got, data = run_cli(tmp_path, [f"{PLANTED}:{cls}"])                          # the default on gloo: sub
    assert got == code and cause in data["diagnosis"]["cause"], data["diagnosis"]
    assert data["group"].startswith("a subgroup: global ranks 1-2 of 3 processes")


@pytest.mark.parametrize("ref", [f"{CORRECT}:AGRing", f"{CORRECT}:RSRing", f"{CORRECT}:ARRing",
                                 f"{PLANTED}:RingAllGatherP2P", "kernels/ag_gemm.py:AllGatherGemm",
                                 "kernels/gemm_rs.py:GemmReduceScatter", "kernels/ar_rmsnorm.py:AllReduceRMSNorm",
                                 "kernels/a2a_reorder.py:ReverseAllToAllReorder"])
@pytest.mark.parametrize("world", [2, 3])
def test_correct_kernels_pass_on_a_subgroup(ref, world):
    rep = check(CheckTask(ref, repeat=1), world, outside=1)
    assert rep.status == "PASS", render(rep)
    assert rep.outside == 1 and rep.to_dict()["group"].startswith(f"a subgroup: global ranks 1-{world} of")


def test_a_subgroup_under_torchrun_is_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([f"{PLANTED}:GlobalRankSlot", "--group", "sub"]) == 2
    err = capsys.readouterr().err
    assert "--group sub" in err and len(err.strip().splitlines()) == 1
