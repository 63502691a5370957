"""The neighbour the planted op specs import (`from op_kernel import ...`, with the spec's folder on sys.path,
as `fusecheck op` puts it): the reference kernel kernels/op_online_softmax.py, loaded from its file."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "fusecheck_kernels_op_online_softmax"
_PATH = Path(__file__).resolve().parents[2] / "kernels" / "op_online_softmax.py"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
_kernel = sys.modules[_NAME]

NEG_INF, OnlineSoftmax, online_softmax = _kernel.NEG_INF, _kernel.OnlineSoftmax, _kernel.online_softmax
chunk_bounds, chunk_logits, normalise, running_update = (_kernel.chunk_bounds, _kernel.chunk_logits,
                                                         _kernel.normalise, _kernel.running_update)
