"""`fusecheck dist` command line: exit codes, the JSON report, and the torchrun entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusecheck.distributed.entry import main

ROOT = Path(__file__).resolve().parents[2]
AG = "kernels/ag_gemm.py:AllGatherGemm"


def test_pass_writes_per_layer_per_rank_json(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main([AG, "--world-size", "2", "--repeat", "3", "--shape", "m=5,k=4,n=3", "--json", str(out)]) == 0
    assert "PASS" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["world_size"] == 2 and data["shapes"] == [{"m": 5, "k": 4, "n": 3}]
    assert set(data["layers"]) == {"comm", "compute", "whole"}
    assert data["repeat_stats"]["whole"]["runs"] == 3 and data["repeat_stats"]["whole"]["bound"].startswith("Wilson")
    runs = data["layers"]["whole"]["runs"]
    assert [(r["repeat"], sorted(r["ranks"])) for r in runs] == [(0, ["0", "1"]), (1, ["0", "1"]), (2, ["0", "1"])]
    assert all(v["comparison"]["verdict"]["status"] == "PASS" for r in runs for v in r["ranks"].values())
    comm = data["layers"]["comm"]["runs"][0]["ranks"]["1"]
    assert comm["comparison"]["verdict"]["code"] == "bitwise_equal" and comm["tag_dtype"] == "float32"
    assert data["diagnosis"]["cause"].startswith("none")


def test_fail_is_exit_1_with_diagnosis(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["tests/planted/dist_bugs.py:WrongRankOrder", "--world-size", "2", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "diagnosis: communication" in text and "misrouted" in text
    assert json.loads(out.read_text())["layers"]["comm"]["status"] == "FAIL"


@pytest.mark.parametrize("argv, message", [
    (["kernels/nope.py:Nothing"], "not found"),
    (["kernels/ag_gemm.txt"], "must look like"),
    ([AG, "--shape", "m7"], "key=value"),
    ([AG, "--layers", "comm,magic"], "unknown layer"),
    ([AG, "--layers", ","], "names no layer"),
    ([AG, "--stress", "--max-delay-ms", "1e12"], "a stress delay must stay below a quarter of the timeout"),
    (["kernels/symm_mem_ops.py:SymmMemAllGatherMatmul"], "needs CUDA GPUs"),
])
def test_bad_input_is_exit_2(argv, message, capsys):
    import torch
    if "symm_mem" in argv[0] and torch.cuda.device_count() >= 2:
        pytest.skip("this machine can run the symmetric-memory op")
    assert main(argv + ["--world-size", "2"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("world, message", [
    ("1", "at least 2 ranks"),      # every collective is the identity: a misrouting kernel would pass
    ("0", "at least 2 ranks"),
    ("100000", "time out waiting for each other"),
])
def test_a_world_size_that_cannot_judge_the_kernel_is_exit_2_before_any_rank_starts(world, message, capsys,
                                                                                    no_ranks):
    assert main(["tests/planted/dist_bugs.py:WrongRankOrder", "--world-size", world]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_one_rank_under_torchrun_is_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main([AG]) == 2
    assert "at least 2 ranks" in capsys.readouterr().err


def test_nccl_requested_without_gpus_is_exit_2(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert main([AG, "--backend", "nccl"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_crash_is_exit_3(capsys):
    assert main(["tests/planted/dist_bugs.py:CrashesOnRank", "--world-size", "2", "--timeout", "10"]) == 3
    assert "CRASH" in capsys.readouterr().out


def test_torchrun_entry_point(tmp_path):
    """`torchrun -m fusecheck.distributed`: ranks from RANK/WORLD_SIZE, results gathered to rank 0."""
    out = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "fusecheck.distributed", AG, "--backend", "gloo", "--shape", "m=5,k=4,n=3", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["status"] == "PASS" and data["world_size"] == 2
    assert all(sorted(r["ranks"]) == ["0", "1"] for layer in data["layers"].values() for r in layer["runs"])


# ---- issue 10: spec errors, typed --spec-arg, many specs in one process, --time-limit, help ---------------------

SPEC_TEMPLATE = '''
import torch
from fusecheck.distributed import DistSpec, seeded_randn


class Good(DistSpec):
    collective = "all_gather"
    shapes = [{"m": 4}]

    def __init__(self, rank: int = 0, scale: float = 1.0, names: str = "", flag: bool = False, extra=None):
        self.args = dict(rank=rank, scale=scale, names=names, flag=flag, extra=extra)

    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": seeded_randn((shape["m"], 3), 1000 * seed + rank + 1, dtype)}

    def comm_input(self, inputs):
        return inputs["a"]


class RaisesInMakeInputs(Good):
    def make_inputs(self, shape, rank, world, seed, dtype):
        raise KeyError("n")


class UnknownCollective(Good):
    collective = "all_gather_v"


class ShapesAsLists(Good):
    shapes = [[3, 8, 4]]


class CtorRaises(Good):
    def __init__(self):
        raise RuntimeError("ctor boom")


class TilingNotDict(Good):
    tiling = "three"


class MakeInputsNumpy(Good):
    def make_inputs(self, shape, rank, world, seed, dtype):
        return {"a": super().make_inputs(shape, rank, world, seed, dtype)["a"].numpy()}


class IgnoresDtype(Good):
    def make_inputs(self, shape, rank, world, seed, dtype):
        return super().make_inputs(shape, rank, world, seed, torch.float32)
'''


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "specs.py"
    path.write_text(SPEC_TEMPLATE)
    return path


@pytest.fixture
def no_ranks(monkeypatch):
    from fusecheck.distributed.pool import RankPool

    def refuse(self):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(RankPool, "start", refuse)


@pytest.mark.parametrize("cls, extra, message", [
    ("RaisesInMakeInputs", [], "RaisesInMakeInputs.make_inputs({'m': 4}, rank=0, world=2, seed=0) raised KeyError"),
    ("UnknownCollective", [], "collective 'all_gather_v' unknown"),
    ("ShapesAsLists", [], "ShapesAsLists.shapes must be a list of dicts"),
    ("CtorRaises", [], "CtorRaises() raised RuntimeError: ctor boom"),
    ("TilingNotDict", [], "tiling must be a dict like {'chunks': 3}, not 'three'"),
    ("MakeInputsNumpy", [], "returned {'a': 'ndarray'} among its values"),
    ("IgnoresDtype", ["--dtype", "bf16"], "comm_input is float32 where the op dtype is bfloat16"),
    ("Good", ["--shape", "m=0"], "comm_input has no elements"),
    ("ShapesAsLists", ["--shape", "m=4"], "ShapesAsLists.shapes must be a list of dicts"),
    ("Good", ["--spec-arg", "rank=nan"], "--spec-arg rank=nan: not a valid int"),
    ("Good", ["--spec-arg", "flag=maybe"], "not a valid bool"),
    ("Good", ["--spec-arg", "nope=1"], "--spec-arg nope: no spec's constructor takes it"),
    ("Good", ["--spec-arg", "rank"], "must be key=value"),
])
def test_a_spec_error_is_exit_2_before_any_rank_starts(spec_file, cls, extra, message, capsys, no_ranks):
    assert main([f"{spec_file}:{cls}", "--world-size", "2", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_spec_args_are_typed_by_the_constructor(spec_file):
    from fusecheck.distributed.spec import spec_class, typed_spec_args
    kwargs, unknown = typed_spec_args(spec_class(f"{spec_file}:Good"), [
        "rank=3", "scale=nan", "names=a,b=c", "flag=true", 'extra={"k": [1, 2]}'])
    assert unknown == set()
    assert kwargs["rank"] == 3 and kwargs["scale"] != kwargs["scale"]          # float('nan') only where a float
    assert kwargs["names"] == "a,b=c" and kwargs["flag"] is True and kwargs["extra"] == {"k": [1, 2]}


def test_many_specs_and_a_folder_share_one_pool_one_summary_one_exit_code(tmp_path, capsys):
    from fusecheck.distributed import runner
    runner.close_pools()
    out = tmp_path / "many.json"
    code = main(["kernels", f"{ROOT}/tests/planted/dist_bugs.py:WrongRankOrder", "--repeat", "1",
                 "--layers", "comm", "--json", str(out)])
    assert code == 1
    data = json.loads(out.read_text())
    rows = {r["spec"].rsplit(":", 1)[1]: r for r in data["summary"]}
    assert rows["WrongRankOrder"]["status"] == "FAIL" and rows["AllGatherGemm"]["status"] == "PASS"
    assert {rows[k]["status"] for k in ("GemmReduceScatter", "ReverseAllToAllReorder", "AllReduceRMSNorm")} == {"PASS"}
    import torch
    if not torch.cuda.is_available():    # the symmetric-memory ops need CUDA: skipped with the reason, not failed
        assert rows["SymmMemAllGatherMatmul"]["status"] == "SKIP" and "nccl" in rows["SymmMemAllGatherMatmul"]["cause"]
    assert data["exit_code"] == 1 and len(data["checks"]) == 5
    assert "fusecheck dist summary: FAIL (exit 1), 7 spec(s)" in capsys.readouterr().out
    assert len(runner._POOLS) == 1        # one pool of ranks served every check


def test_help_describes_repeat_and_the_module_entry_has_a_time_limit(capsys):
    with pytest.raises(SystemExit):
        argparse_main(["-h"])
    text = capsys.readouterr().out
    assert "--time-limit" in text and "layers 1 and 3" not in text and "default: 10" in text
    assert main([AG, "--time-limit", "-1"]) == 2


def argparse_main(argv):
    import argparse

    from fusecheck.cli.dist import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parser.add_argument("--time-limit")
    parser.parse_args(argv)


def test_time_limit_ends_a_hanging_check_of_the_module_entry():
    cmd = [sys.executable, "-m", "fusecheck.distributed", "tests/planted/dist_bugs.py:HangsOnRank", "--timeout", "60",
           "--time-limit", "4", "--repeat", "1", "--layers", "whole"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "timed out after 4 s" in proc.stderr


def test_a_broken_spec_found_in_a_folder_is_an_error_row_and_the_others_still_run(tmp_path, capsys):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "broken.py").write_text(SPEC_TEMPLATE.replace("class Good(", "class _Good(").replace("(Good)", "(_Good)")
                                      .replace("class UnknownCollective", "class _UnknownCollective")
                                      .replace("class ShapesAsLists", "class _ShapesAsLists")
                                      .replace("class CtorRaises", "class _CtorRaises")
                                      .replace("class TilingNotDict", "class _TilingNotDict")
                                      .replace("class MakeInputsNumpy", "class _MakeInputsNumpy")
                                      .replace("class IgnoresDtype", "class _IgnoresDtype"))
    (folder / "crash.py").write_text("raise RuntimeError('import boom')\n")   # a file that cannot be imported
    out = tmp_path / "many.json"
    code = main([str(folder), AG, "--repeat", "1", "--layers", "comm", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 2 and [r["status"] for r in data["summary"]] == ["ERROR", "ERROR", "PASS"], data["summary"]
    assert "raised KeyError" in data["summary"][0]["cause"]
    assert "crash.py raised RuntimeError: import boom" in data["summary"][1]["cause"]
    assert "fusecheck dist summary: ERROR (exit 2), 3 spec(s)" in capsys.readouterr().out


def test_a_spec_imports_the_module_beside_it_without_pythonpath(tmp_path):
    """A spec file next to its kernel module (`from my_kernel import ...`) runs from any folder, with no
    PYTHONPATH, as a script beside its module would: the ranks see the spec's folder too."""
    (tmp_path / "my_kernel.py").write_text(
        "import importlib.util\n\n"
        f"_spec = importlib.util.spec_from_file_location('ar_reference', {str(ROOT / 'kernels' / 'ar_rmsnorm.py')!r})\n"
        "_mod = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_mod)\n"
        "AllReduceRMSNorm = _mod.AllReduceRMSNorm\n")
    (tmp_path / "spec.py").write_text(
        "from my_kernel import AllReduceRMSNorm\n\n"
        "class Spec(AllReduceRMSNorm):\n"
        "    shapes = [{'t': 4, 'h': 8}]\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, "-m", "fusecheck", "dist", str(tmp_path / "spec.py") + ":Spec",
                           "--world-size", "2", "--repeat", "1", "--json", str(out), "-q"],
                          cwd="/", env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(out.read_text())["status"] == "PASS"
