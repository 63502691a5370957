"""The repeat runs' digests (fusecheck/runs/digest.py): equal bits give equal digests; any single changed
element, a signed zero, another dtype or shape gives a different one; with the default chunk and with a
small one, so that chunk boundaries and the tail of fewer than eight bytes are crossed."""
import pytest
import torch

import fusecheck.runs.digest as dg
from fusecheck.runs.digest import digest


@pytest.fixture(params=[None, 64])
def words_path(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(dg, "_CHUNK", request.param)
        monkeypatch.setattr(dg, "_WEIGHTS", {})
    return request.param


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 10_000), (torch.float32, 1_001), (torch.uint8, 13),
                                     (torch.float64, 257), (torch.int16, 7)])
def test_any_single_changed_element_changes_the_digest(words_path, dtype, n):
    torch.manual_seed(0)
    a = (torch.randn(n) * 50).to(dtype)
    assert digest(a) == digest(a.clone())
    for i in sorted({0, 1, n // 3, n // 2, n - 2, n - 1}):  # both ends, and positions across chunks and tails
        b = a.clone()
        b.view(-1)[i] = b.view(-1)[i] + (1 if not dtype.is_floating_point else torch.finfo(dtype).eps * 4 + 1)
        assert not torch.equal(a, b)
        assert digest(b) != digest(a), (words_path, dtype, i)


def test_bits_not_values_shape_and_dtype_count(words_path):
    z = torch.zeros(3)
    assert digest(z) != digest(torch.tensor([0.0, -0.0, 0.0]))  # a signed zero
    assert digest(z) != digest(torch.zeros(3, dtype=torch.int32))  # the dtype is part of the digest
    assert digest(z) != digest(torch.zeros(1, 3))
    nan = torch.tensor([float("nan")])
    assert digest(nan) == digest(nan.clone())


def test_views_bools_and_complex_are_read_as_their_elements(words_path):
    a = torch.randn(8, 6)
    assert digest(a.t()) == digest(a.t().contiguous())  # a non-contiguous view digests as its values
    assert digest(a.t()) != digest(a)
    m = torch.rand(33) > 0.5
    flipped = m.clone()
    flipped[17] = ~flipped[17]
    assert digest(m) != digest(flipped)
    c = torch.randn(5, dtype=torch.complex64)
    assert digest(c) != digest(c.conj())  # the conjugate bit is resolved, not ignored
    assert digest(torch.empty(0)) == digest(torch.empty(0))
    x = torch.randn(11, dtype=torch.bfloat16)
    assert digest(x[1:]) == digest(x[1:].clone())  # a view off the eight-byte boundary
