"""Any backend, golden-aware (issue 9, item 4): `--backend FILE.py:NAME` splits the captured FX graph down to
the smallest subgraph the backend makes worse than eager against fp64, and `--repro` writes a standalone,
torch-only script that reproduces the error ratio (run here in a subprocess, outside the repository)."""
import json
import os
import re
import subprocess
import sys

from fusecheck.cli.main import main

TARGET = "tests/planted/chain_targets.py:tanh_exp_mlp"
BACKEND = "tests/planted/rounding_backend.py:"


def test_backend_rounding_one_op_bisected_to_that_op_and_repro_reproduces_the_ratio(tmp_path):
    out, repro = tmp_path / "b.json", tmp_path / "repro.py"
    code = main(["bisect", TARGET, "--backend", BACKEND + "lossy_exp_backend", "--repro", str(repro),
                 "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 1 and data["status"] == "culprits", data["log"]
    (c,) = data["culprits"]
    assert c["kind"] == "subgraph" and c["fx_nodes"] == ["exp"], c
    measured = max(r["error_ratio"] for r in c["with"]["rows"].values())
    assert measured > 100 and data["compiles"] <= 8

    text = repro.read_text()
    assert "fusecheck" not in re.sub(r'""".*?"""', "", text, flags=re.S), "the script must not need fusecheck"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(repro)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stderr          # 1: compiled worse than eager
    ratio = float(re.search(r"error ratio ([0-9.e+-]+)", run.stdout).group(1))
    assert abs(ratio - measured) <= 1e-3 * measured, (ratio, measured)


def test_backend_that_changes_nothing_is_not_bisected():
    assert main(["bisect", TARGET, "--backend", BACKEND + "exact_backend", "--max-compiles", "3"]) == 0


def test_unknown_backend_is_one_line_exit_2(capsys):
    assert main(["bisect", TARGET, "--backend", "nonsense"]) == 2
    assert "Traceback" not in capsys.readouterr().err
