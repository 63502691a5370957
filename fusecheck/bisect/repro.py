"""`--repro out.py`: a standalone, torch-only script that rebuilds the failing subgraph with its inputs, runs
it eagerly, compiled (the backend, culprit on) and in fp64, and prints the error ratio: what a user attaches
to a compiler bug report. No fusecheck import; a user backend is loaded from its file by path, and so are the
user's Inductor passes (the `*_custom_*_pass` slots as the bisection saw them): their file is loaded under the
module name bisect loaded it with, then the pass object itself is restored (pickled, else its class built
again), so the script compiles with the pass that made compiled worse, not without it."""
from __future__ import annotations

import base64
import io
import os
import pickle
import sys
import textwrap
import types
from typing import Any

import torch
import torch.fx as fx

TEMPLATE = '''\
"""Repro written by `fusecheck bisect`: {title}
Runs the subgraph eagerly, compiled with {backend_spec} and in fp64 (the golden), and prints each output's
RMSE against fp64 and the ratio compiled / eager (> {limit}: compiled is worse than eager). torch only."""
import base64
import importlib
import importlib.util
import io
import os
import pickle
import sys

import torch


def _resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


{globals}

class Repro(torch.nn.Module):
{code}

INPUTS = torch.load(io.BytesIO(base64.b64decode({blob!r})), weights_only=False)


# (Inductor config slot, file, module name, qualname, pickled pass or None): the passes bisect compiled with
PASSES = {passes!r}


def install_passes():
    from torch._inductor import config
    for slot, path, module, qualname, blob in PASSES:
        if module not in sys.modules:
            try:
                importlib.import_module(module)
            except ImportError:
                spec = importlib.util.spec_from_file_location(module, path)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[module] = mod
                sys.path.insert(0, os.path.dirname(path))
                spec.loader.exec_module(mod)
        obj = pickle.loads(blob) if blob is not None else _resolve(module, qualname)
        setattr(config, slot, obj() if isinstance(obj, type) else obj)


def backend():
    install_passes()
    spec = {backend_spec!r}
    if ":" not in spec:
        return spec
    path, name = spec.rsplit(":", 1)
    mod_spec = importlib.util.spec_from_file_location("repro_backend", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return getattr(mod, name)


def rmse(x, golden):
    return (x.double() - golden).pow(2).mean().sqrt().item()


def main():
    with torch.no_grad():
        eager = Repro()(*INPUTS)
        torch._dynamo.reset()
        compiled = torch.compile(Repro(), backend=backend())(*INPUTS)
        golden = Repro().double()(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x
                                    for x in INPUTS])
    worst = 0.0
    for name, e, c, g in zip({outputs!r}, eager, compiled, golden):
        ratio = rmse(c, g) / max(rmse(e, g), 1e-300)
        worst = max(worst, ratio)
        print(f"{{name}}: rmse vs fp64 eager {{rmse(e, g):.6g}} compiled {{rmse(c, g):.6g}} ratio {{ratio:.6g}}")
    print(f"error ratio {{worst:.6g}}: {{'FAIL, compiled is worse than eager' if worst > {limit} else 'PASS'}}")
    return 1 if worst > {limit} else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _global_line(name: str, obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return f"{name} = importlib.import_module({obj.__name__!r})"
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if mod and qual and "<" not in qual:
        return f"{name} = _resolve({mod!r}, {qual!r})"
    return f"{name} = {obj!r}"


PASS_SLOTS = ("pre_grad_custom_pass", "joint_custom_pre_pass", "joint_custom_post_pass",
              "post_grad_custom_pre_pass", "post_grad_custom_post_pass")


def _unwrapped(obj: Any) -> list[Any]:
    """The user's passes in a slot: fusecheck's cache salt (`inner`) is unwrapped, a list flattened."""
    if obj is None:
        return []
    if type(obj).__name__ == "FusecheckSaltPass":
        return _unwrapped(obj.inner)
    if isinstance(obj, (list, tuple)):
        return [p for x in obj for p in _unwrapped(x)]
    return [obj]


def user_passes() -> list[tuple[str, str, str, str, bytes | None]]:
    """(slot, file, module, qualname, pickled object) of each pass in Inductor's custom-pass slots now."""
    try:
        from torch._inductor import config
    except ImportError:  # pragma: no cover
        return []
    out = []
    for slot in PASS_SLOTS:
        passes = _unwrapped(getattr(config, slot, None))
        if len(passes) != 1:   # a slot holds one pass; several would need fusecheck's salt to run them
            continue
        obj = passes[0]
        owner = obj if isinstance(obj, (type, types.FunctionType)) else type(obj)
        module = sys.modules.get(getattr(owner, "__module__", ""), None)
        path = getattr(module, "__file__", None)
        if not path:
            continue
        try:
            blob = None if owner is obj else pickle.dumps(obj)
        except Exception:  # not picklable: its class is built again with no arguments
            blob = None
        out.append((slot, os.path.abspath(path), module.__name__, owner.__qualname__, blob))
    return out


def write_repro(path: str, gm: fx.GraphModule, inputs: list[Any], outputs: list[str], backend_spec: str,
                title: str, limit: float = 2.0) -> None:
    """Write the script; `gm` has placeholders only (no parameters: they are inputs of the window)."""
    if backend_spec and ":" in backend_spec:
        file, name = backend_spec.rsplit(":", 1)
        backend_spec = f"{os.path.abspath(file)}:{name}"
    pc = gm.graph.python_code(root_module="self")
    skip = {"torch", "inf", "nan", "NoneType", "device"}
    globs = "\n".join(_global_line(k, v) for k, v in sorted(pc.globals.items()) if k not in skip)
    globs += "\ninf, nan = float('inf'), float('nan')\ndevice = torch.device\n"
    buf = io.BytesIO()
    torch.save([x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs], buf)
    text = TEMPLATE.format(title=title, backend_spec=backend_spec, limit=limit, globals=globs,
                           code=textwrap.indent(pc.src.strip("\n"), "    "),
                           blob=base64.b64encode(buf.getvalue()).decode(), outputs=outputs,
                           passes=user_passes())
    with open(path, "w") as f:
        f.write(text)
