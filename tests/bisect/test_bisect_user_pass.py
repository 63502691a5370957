"""A user's own Inductor pass, defined in the target file, runs every `mm` in bf16 (issue 25): bisect names the
pass, the per-kernel attribution names the kernel the culprit landed in (the extern `mm`, never absent), and
`--repro` writes a script that loads the pass the way bisect did and reproduces the failure in a fresh process."""
import json
import os
import re
import subprocess
import sys

import pytest
from torch._inductor import config

from fusecheck.cli.main import main

TARGET = "tests/planted/user_pass_target.py:build"


@pytest.fixture
def pre_pass_slot():
    """The target installs its pass when loaded: the slot is put back afterwards for the other tests, through
    torch's own config.patch (monkeypatch.setattr on torch's config module deletes the key on undo)."""
    with config.patch(post_grad_custom_pre_pass=config.post_grad_custom_pre_pass):
        yield
    assert hasattr(config, "post_grad_custom_pre_pass")


def test_user_pass_culprit_named_with_its_mm_kernel_and_repro_fails(tmp_path, pre_pass_slot):
    out, repro = tmp_path / "b.json", tmp_path / "repro.py"
    code = main(["bisect", TARGET, "--kinds", "pass", "--repro", str(repro), "--json", str(out), "-q"])
    data = json.loads(out.read_text())
    assert code == 1 and data["status"] == "culprits", data["log"]
    (c,) = data["culprits"]
    assert c["kind"] == "pass" and "LossyMM" in c["name"]
    assert "extern_kernels.mm" in c["kernels"]
    held = {k["kernel"] for k in data["kernels"] if k["culprit"] == "1"}
    assert "extern_kernels.mm" in held, data["kernels"]        # the lossy mm is in the attribution table
    assert data["kernels"][0]["culprit"] == "1"                # culprit rows first
    casts = [k for k in data["kernels"] if k["fx_nodes"] == ["convert_element_type_default"]]
    assert casts and float(casts[0]["rmse"]) > 0               # the bf16 cast shows its rounding, not 0

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(repro)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    ratio = float(re.search(r"error ratio ([0-9.e+-]+)", run.stdout).group(1))
    assert ratio > 100 and "FAIL" in run.stdout, run.stdout
