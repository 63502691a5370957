"""`--repro out.py`: a standalone, torch-only script that rebuilds the failing subgraph with its inputs, runs
it eagerly, compiled (the backend, culprit on) and in fp64, and prints the error ratio: what a user attaches
to a compiler bug report. No fusecheck import; a user backend is loaded from its file by path."""
from __future__ import annotations

import base64
import io
import os
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


def backend():
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
    print(f"error ratio {{worst:.6g}}")
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
                           blob=base64.b64encode(buf.getvalue()).decode(), outputs=outputs)
    with open(path, "w") as f:
        f.write(text)
