"""Dynamo backends with training bugs planted, for `fusecheck train` (`--backend tests/planted/train_plants.py:NAME`).

Each is the bug a compiled training step can have that a one-step check cannot see, because it only shows
once parameters change or the optimizer runs:
- `stale_weights`: the forward keeps the parameter values it first saw (a captured graph that froze its
  weights as constants) while gradients still reach the live parameters. Bitwise equal to eager at step 0.
- `bf16_masters`, `double_update_every_3`, `loss_scale_not_undone`: bugs of a compiled optimizer step (use
  with `--compile-optimizer`): the updated master weights rounded to bf16 where eager keeps fp32; the update
  applied twice on every third step; the gradients still multiplied by a loss scale of 1024 when the update
  reads them. The model's forward/backward graphs run as captured.
An optimizer graph is told from a model graph by what it holds: dynamo lifts the optimizer's parameters as
attributes named `*param_groups*` (and its gradients as inputs); a model graph has none.
"""
import torch


def _optimizer_params(gm) -> list[torch.Tensor]:
    return [getattr(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and "param_groups" in n.target and "params" in n.target]


def _as_captured(gm):
    return gm.forward


def stale_weights(gm, example_inputs):
    first: dict[int, torch.Tensor] = {}

    def run(*args):
        moved = []
        for a in args:
            if isinstance(a, torch.nn.Parameter):
                stale = first.setdefault(id(a), a.detach().clone())
                a = a + (stale - a).detach()  # the value of step 0, the gradient of the live parameter
            moved.append(a)
        return gm(*moved)
    return run


def _optimizer_bug(bug):
    def backend(gm, example_inputs):
        params = _optimizer_params(gm)
        if not params:
            return _as_captured(gm)
        calls = [0]

        def run(*args):
            calls[0] += 1
            return bug(gm, params, args, calls[0])
        return run
    backend.__name__ = bug.__name__
    return backend


@_optimizer_bug
def bf16_masters(gm, params, args, call):
    out = gm(*args)
    with torch.no_grad():
        for p in params:
            p.copy_(p.to(torch.bfloat16))
    return out


@_optimizer_bug
def double_update_every_3(gm, params, args, call):
    out = gm(*args)
    return gm(*args) if call % 3 == 0 else out


@_optimizer_bug
def loss_scale_not_undone(gm, params, args, call):
    return gm(*[a * 1024.0 if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
