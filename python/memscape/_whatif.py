"""The doctor's what-if changes, made to an unchanged program while it runs under prediction.

``memscape doctor --verify -- COMMAND`` runs the program once as it is and once under each
change the doctor proposes that can be made from outside the program; each run's peak is the
change *executed*, beside the doctor's arithmetic. A change is made through module hooks and
the optimizer's base class, so it applies to any ``torch.nn`` model and ``torch.optim``
optimizer (the program's own subclasses too):

- ``checkpointing``: each module of a repeated stack (two or more modules of one class in a
  ``ModuleList`` or ``Sequential``) runs under ``torch.utils.checkpoint`` (non-reentrant);
- ``bf16_activations``: the outermost module's forward runs under ``autocast("cuda", bfloat16)``;
- ``optimizer:sgd_momentum``: every optimizer steps as ``SGD(momentum=0.9)`` over its parameters;
- ``zero_grad_before_forward``: the gradients are set to ``None`` as the outermost forward starts.

The others (``optimizer:adam_8bit``, ``optimizer:adafactor``: libraries this does not
assume; ``batch:xK``: an unchanged program's batch cannot be found from outside) are not
executed (``EXECUTABLE``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List

import torch

#: The changes this module can make (the keys of `Change::key` in core/doctor/src/whatif.rs).
EXECUTABLE = ("checkpointing", "bf16_activations", "optimizer:sgd_momentum", "zero_grad_before_forward")


def install(key: str) -> Callable[[], None]:
    """Makes change ``key``; returns what undoes it."""
    if key not in EXECUTABLE:
        raise ValueError(f"the what-if {key!r} cannot be executed (these can: {', '.join(EXECUTABLE)})")
    if key == "optimizer:sgd_momentum":
        return _sgd_momentum()
    depth = [0]
    autocasts: List[Any] = []

    def before(module: Any, args: Any) -> None:
        if depth[0] == 0:
            if key == "zero_grad_before_forward":
                for p in module.parameters():
                    p.grad = None
            elif key == "bf16_activations":
                ac = torch.autocast("cuda", dtype=torch.bfloat16)
                ac.__enter__()
                autocasts.append(ac)
            elif key == "checkpointing":
                _checkpoint_stacks(module)
        depth[0] += 1

    def after(module: Any, args: Any, out: Any) -> None:
        depth[0] -= 1
        if depth[0] == 0 and autocasts:
            autocasts.pop().__exit__(None, None, None)

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(before),
             torch.nn.modules.module.register_module_forward_hook(after)]

    def undo() -> None:
        for h in hooks:
            h.remove()

    return undo


def _checkpoint_stacks(root: Any) -> None:
    """Wraps each module of every repeated stack under ``root`` in activation checkpointing."""
    from torch.utils.checkpoint import checkpoint

    for m in root.modules():
        if not isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        children = list(m.children())
        kinds = [type(c) for c in children]
        for c in children:
            if kinds.count(type(c)) < 2 or getattr(c, "_memscape_checkpointed", False):
                continue
            c._memscape_checkpointed = True
            c.forward = functools.partial(checkpoint, c.forward, use_reentrant=False)


def _sgd_momentum() -> Callable[[], None]:
    """Every optimizer made from now on steps as SGD with momentum over its parameters."""
    base = torch.optim.Optimizer
    real_init = base.__init__

    def init(self: Any, params: Any, defaults: Any) -> None:
        real_init(self, params, defaults)
        if isinstance(self, torch.optim.SGD):
            return
        groups = [{"params": g["params"], "lr": g.get("lr", 1e-3)} for g in self.param_groups]
        sgd = torch.optim.SGD(groups, lr=groups[0]["lr"] if groups else 1e-3, momentum=0.9)
        self.step = sgd.step

    base.__init__ = init

    def undo() -> None:
        base.__init__ = real_init

    return undo
