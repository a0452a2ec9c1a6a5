"""Opt-in emulation of ``Tensor.new`` refused on DirectML (failure_modes.md #11).

torch 2.0 (torch-directml 0.2.0's pin) refuses the legacy constructor on
``PrivateUse1`` tensors (``check_base_legacy_new``, before any backend kernel;
DirectML#400, #415); torch 2.4.1, torch-directml 0.2.5's pin, accepts it, and so does
the default emulated device.  :func:`refused` reproduces the torch 2.0 behaviour on
demand, for testing code (and dmlshim's ``legacy_new`` patch) against older
torch-directml.  It is not an ``emulation.Rule``: the check runs in torch's Python
binding, before dispatch, so it wraps ``torch.Tensor.new`` itself.

The evidence: docs/fixes.md ("Tensor.new: the evidence")."""
from __future__ import annotations

import contextlib
import functools
import threading

import torch

# torch 2.0's text, as in the DirectML#400 / fairseq reports
MESSAGE = ("new(): expected key in DispatchKeySet(CPU, CUDA, HIP, XLA, MPS, IPU, XPU, HPU, Lazy, "
           "Meta) but got: PrivateUse1")
_lock = threading.Lock()


@contextlib.contextmanager
def refused():
    """Inside the block, ``Tensor.new`` on a strided ``privateuseone`` tensor raises
    ``RuntimeError(MESSAGE)``, as torch 2.0 (torch-directml <= 0.2.0) does.

    Enter it *before* ``dmlshim.activate()`` so the shim wraps the refusing method,
    as it wraps torch's own.  On exit ``torch.Tensor.new`` is the object it was on
    entry (restored only if nobody replaced it meanwhile).

    Raises:
        RuntimeError: when nested (one refusal at a time).
    """
    with _lock:
        current = torch.Tensor.__dict__.get("new", torch.Tensor.new)
        if getattr(current, "__dmlshim_refusal__", False):
            raise RuntimeError("emulation.legacy_new.refused() is already active")
        refusing = _refusing(current)
        torch.Tensor.new = refusing
    try:
        yield
    finally:
        with _lock:
            if torch.Tensor.__dict__.get("new") is refusing:
                if "new" in vars(torch._C.TensorBase) and current is torch._C.TensorBase.new:
                    del torch.Tensor.new            # torch.Tensor inherits it again
                else:
                    torch.Tensor.new = current


def _refusing(new):
    @functools.wraps(new)
    def refusing_new(self, *args, **kwargs):
        if self.device.type == "privateuseone" and self.layout is torch.strided:
            raise RuntimeError(MESSAGE)
        return new(self, *args, **kwargs)
    refusing_new.__dmlshim_refusal__ = True
    return refusing_new
