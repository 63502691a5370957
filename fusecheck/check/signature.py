"""What a baseline is recorded for: a digest of the model's parameter and buffer names, shapes and dtypes and
of the inputs' shapes. Two targets may share a case name (`Case(..., "net")`); a baseline of one must not
accept the other's failures as known."""
from __future__ import annotations

import hashlib

import torch
from torch.utils import _pytree as pytree

from fusecheck.case import Case


def model_signature(case: Case) -> str:
    h = hashlib.sha1()
    model = case.model
    if isinstance(model, torch.nn.Module):
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
    else:
        h.update(f"{type(model).__module__}.{getattr(model, '__qualname__', type(model).__name__)};".encode())
    for path, leaf in pytree.tree_flatten_with_path((case.inputs, case.kwargs))[0]:
        shape = tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else type(leaf).__name__
        h.update(f"{pytree.keystr(path)}:{shape};".encode())
    return h.hexdigest()[:16]
