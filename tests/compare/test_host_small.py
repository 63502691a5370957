"""Small tensors on an accelerator are compared on a host copy (fusecheck/compare/host.py): the same metrics
and verdicts as on the device, and a planted error still fails."""
import pytest
import torch

from fusecheck.compare import compare
from fusecheck.compare.host import HOST_ELEMS, to_host


def _triple(n, device, bad=0):
    g = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) * 3
    e = g.to(torch.bfloat16)
    r = (g * (1 + 2e-3 * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
         ).to(torch.bfloat16)
    if bad:
        r[:bad] = -r[:bad]  # a few sign flips
    return r.to(device), e.to(device), g.to(device)


def test_cpu_tensors_stay_where_they_are():
    r, e, g = _triple(100, "cpu")
    assert all(a is b for a, b in zip(to_host(r, e, g), (r, e, g)))
    assert to_host(r, None)[1] is None


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("n,bad", [(1, 0), (1000, 0), (1000, 8), (HOST_ELEMS - 1, 0), (HOST_ELEMS - 1, 3)])
def test_host_copy_gives_the_devices_metrics_and_verdict(n, bad, monkeypatch):
    r, e, g = _triple(n, "cuda", bad)
    moved = to_host(r, e, g)
    assert all(t.device.type == "cpu" for t in moved)
    on_host = compare(r, e, g, name="x")
    monkeypatch.setenv("FUSECHECK_HOST_SMALL", "0")
    on_device = compare(r, e, g, name="x")
    assert on_host.verdict.status == on_device.verdict.status and on_host.verdict.code == on_device.verdict.code
    assert on_host.passed == (bad == 0)
    for a, b in ((on_host.vs_golden, on_device.vs_golden), (on_host.vs_reference, on_device.vs_reference)):
        for k, v in a.values.items():
            assert v == pytest.approx(b.values[k], rel=1e-9, abs=0), k


@pytest.mark.gpu
@CUDA
def test_large_tensors_and_mixed_devices_stay_put():
    r, e, g = _triple(HOST_ELEMS, "cuda")
    assert all(a is b for a, b in zip(to_host(r, e, g), (r, e, g)))
    small = _triple(10, "cuda")
    # compiled and eager on different devices is the user's mismatch, reported as such, not hidden by a copy
    assert compare(small[0], small[1].cpu(), name="x").verdict.code == "device_mismatch"
    # a golden kept on the host (--golden-device cpu) goes with small device tensors
    assert compare(small[0], small[1], small[2].cpu(), name="x").passed
