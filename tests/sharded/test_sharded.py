"""The sharded check (`fusecheck check --nproc 2`, FSDP2 per block, gloo on the host): passes on correct code
(a Llama built on the meta device, gradients judged per shard), fails naming the rank whose compiled block is
wrong, names a rank that died or hung, and leaves no rank process behind."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fusecheck.sharded.ranks import name_culprits

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "tests/planted/sharded_backends.py"


def _left_behind(mark: str) -> list[int]:
    """Processes still alive that carry this run's mark in their environment."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                left.append(int(pid))
        except OSError:
            pass
    return left


def sharded(*args, timeout_s: float = 60.0, torchrun: bool = False):
    """`fusecheck check ... --nproc 2`, or with `torchrun` the user's own `torchrun -m fusecheck check ...`."""
    mark = str(uuid.uuid4())
    env = {**os.environ, "FUSECHECK_TEST_MARK": mark, "FUSECHECK_RANK_TIMEOUT_S": str(timeout_s),
           "PYTHONWARNINGS": "ignore"}
    launcher = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "fusecheck"]
                if torchrun else ["-m", "fusecheck"])
    proc = subprocess.run([sys.executable, *launcher, "check", *args, "-q", *([] if torchrun else ["--nproc", "2"])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert _left_behind(mark) == [], "rank processes left behind"
    return proc


@pytest.mark.slow
def test_meta_llama_passes_with_gradient_shards(tmp_path):
    pytest.importorskip("transformers")  # the Llama comes from the optional models extra
    out = tmp_path / "r.json"
    proc = sharded("models/meta.py:build_tiny_meta", "--backend", "aot_eager", "--dtype", "bf16", "--train",
                   "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["ranks"] == 2 and data["failing_ranks"] == [] and data["status"] == "PASS"
    rows = {r["name"]: r for r in data["rows"]}
    for rank in (0, 1):
        assert f"rank{rank}/output" in rows
        grads = [n for n in rows if n.startswith(f"rank{rank}/grad.model.model.layers.1.")]
        assert grads, "every rank judges its own gradient shards"
        # judged against the fp64 golden (summed over ranks, this rank's shard): eager's error is rounding-sized
        assert all(rows[n]["eager_vs_golden"] is not None for n in grads)
    # the ranks hold different shards (a shard judged against the wrong rank's golden rows would fail)
    q = "grad.model.model.layers.0.self_attn.q_proj.weight"
    assert rows[f"rank0/{q}"]["eager_vs_golden"] != rows[f"rank1/{q}"]["eager_vs_golden"]
    assert "built on the meta device" in " ".join(data["notes"])
    assert [b["name"] for b in data["blocks"]] == [f"rank{r}/model.model.layers.{i}" for r in (0, 1) for i in (0, 1)]
    assert data["first_worse_block"] is None
    assert "agreed by all 2 ranks: exit 0" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend,code", [("ulp_jitter", 0), ("second_call_race", 1)])
def test_every_compiled_run_is_judged_on_each_rank(backend, code, tmp_path):
    """As in one process: a harmless 1-ULP jitter between the two compiled runs passes (both judged against
    the golden), a second run that is wrong fails."""
    pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    proc = sharded("models/meta.py:build_tiny_meta", "--backend", f"{PLANTED}:{backend}", "--json", str(out))
    assert proc.returncode == code, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["failing_ranks"] == ([] if code == 0 else [0, 1])


@pytest.mark.slow
def test_a_compiled_block_wrong_on_rank_1_only_fails_naming_rank_1_under_torchrun(tmp_path):
    """Launched by the user's torchrun: each process finds itself a rank; both exit with the agreed code 1."""
    out = tmp_path / "r.json"
    proc = sharded("models/wide_blocks.py:build", "--backend", f"{PLANTED}:corrupt_on_rank1", "--json", str(out),
                   torchrun=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "agreed by all 2 ranks: exit 1" in proc.stdout
    data = json.loads(out.read_text())
    assert data["failing_ranks"] == [1]
    status = {r["name"]: r["verdict"]["status"] for r in data["rows"]}
    assert status["rank0/output"] == "PASS" and status["rank1/output"] == "FAIL"
    assert "failing on rank(s): 1" in proc.stdout
    blocks = {b["name"]: b["verdict"] for b in data["blocks"]}  # each block on eager's input, per rank
    assert data["first_worse_block"] == "rank1/blocks.0"
    assert {v for n, v in blocks.items() if n.startswith("rank0/")} == {"PASS"}


@pytest.mark.slow
def test_a_rank_that_dies_is_named_and_no_rank_is_left(tmp_path):
    proc = sharded("models/wide_blocks.py:build", "--backend", f"{PLANTED}:die_on_rank1",
                   "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 3
    assert "CRASH: rank 1: rank 1 died (exit code 11) in phase 'compiled" in proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())  # no verdict, yet CI finds a report
    assert data["status"] == "ERROR" and data["exit_code"] == 3 and "rank 1 died" in data["error"]


@pytest.mark.slow
def test_an_error_on_every_rank_is_one_line_and_an_error_report(tmp_path):
    proc = sharded(f"{PLANTED}:raises_when_built", "--json", str(tmp_path / "r.json"))
    lines = [line for line in proc.stderr.splitlines() if line.startswith("fusecheck: error:")]
    assert proc.returncode == 2 and len(lines) == 1 and "cannot be built" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["status"] == "ERROR" and data["exit_code"] == 2 and "cannot be built" in data["error"]


@pytest.mark.slow
def test_a_rank_that_hangs_is_named_within_the_timeout():
    proc = sharded("models/wide_blocks.py:build", "--backend", f"{PLANTED}:hang_on_rank1", timeout_s=4)
    assert proc.returncode == 3
    assert "HANG: rank 1:" in proc.stderr and "compiled" in proc.stderr.rpartition("HANG")[2]


def test_usage_errors_are_one_line_before_any_rank_starts():
    proc = subprocess.run([sys.executable, "-m", "fusecheck", "check", "models/nope.py:build", "--nproc", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("fusecheck: error:")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "fusecheck", "check", "--nproc", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2


# ---- naming the culprit from the ranks' status files (no launch) ------------------------------------------
def _s(rank, phase="compiled", **kw):
    return {"rank": rank, "phase": phase, "ended": kw.pop("ended", False), **kw}


def test_culprit_own_error_beats_peers_timeouts():
    statuses = {0: _s(0, ended=True, error={"type": "RuntimeError", "message": "Timed out"}, secondary=True),
                1: _s(1, ended=True, error={"type": "ValueError", "message": "bad"}, secondary=False)}
    kind, ranks, detail = name_culprits(statuses, {0: 3, 1: 3})
    assert (kind, ranks) == ("CRASH", [1]) and "ValueError: bad" in detail


def test_culprit_silent_rank_while_peers_waited_is_a_hang_and_sigterm_is_not_a_death():
    statuses = {0: _s(0, ended=True, error={"type": "RuntimeError", "message": "Timed out"}, secondary=True),
                1: _s(1, phase="golden: layers.3")}
    kind, ranks, detail = name_culprits(statuses, {0: 3, 1: -15})
    assert (kind, ranks) == ("HANG", [1]) and "golden: layers.3" in detail


def test_culprit_killed_by_a_signal_is_a_crash():
    kind, ranks, detail = name_culprits({0: _s(0), 1: _s(1, phase="eager")}, {1: -11})
    assert (kind, ranks) == ("CRASH", [1]) and "signal 11" in detail


def test_culprit_watchdog_hang():
    kind, ranks, _ = name_culprits({0: _s(0), 1: _s(1, ended=True, hung=7.0)}, {1: 3})
    assert (kind, ranks) == ("HANG", [1])


@pytest.mark.slow
def test_tensor_parallel_llama_names_the_rank_whose_block_is_wrong(tmp_path):
    pytest.importorskip("transformers")  # the Llama comes from the optional models extra
    """The target asks for DTensor tensor parallelism (models/meta.py:llama_tp_plan): the golden upcasts each
    rank's own weight shard. Rank 1's wrong block reaches rank 0 through the blocks' all-reduces (end to end
    both ranks may fail), so the per-block verdicts name it: each block on eager's own input, per rank."""
    out = tmp_path / "r.json"
    proc = sharded("models/meta.py:build_tiny_meta_tp", "--backend", f"{PLANTED}:corrupt_on_rank1",
                   "--train", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert "tensor parallelism" in data["notes"][0] and 1 in data["failing_ranks"]
    blocks = {b["name"]: b["verdict"] for b in data["blocks"]}
    assert data["first_worse_block"] == "rank1/model.model.layers.0"
    assert {v for n, v in blocks.items() if n.startswith("rank0/")} == {"PASS"}
    rows = {r["name"]: r for r in data["rows"]}
    q = rows["rank0/grad.model.model.layers.0.self_attn.q_proj.weight"]
    assert q["shape"] == [32, 64] and q["eager_vs_golden"] is not None  # half of q_proj: this rank's TP shard
