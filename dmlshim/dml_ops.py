"""torch-directml 0.2.5's own aten kernels, read from the data files that record them.

``data/dml_registered_ops.txt``: the 296 aten overloads torch_directml_native registers
a PrivateUse1 kernel for; ``data/dml_op_routing_torch241.tsv``: where every aten overload
of torch 2.4.1 goes on a DirectML tensor.  How both were read from the binary: their
headers and docs/directml/failure_modes.md.  The patches read them here without
importing the emulator, which routes its device by them (``emulation.routing``).
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import FrozenSet, Iterator, Tuple

import torch

REGISTERED_FILE = "dml_registered_ops.txt"
ROUTING_FILE = "dml_op_routing_torch241.tsv"
OUT_UNRESIZED_FILE = "dml_out_unresized_torch241.txt"

# Views whose schema does not say so: _unsafe_view's CPU kernel is view's, but it has no
# alias annotation (torchgen's NOTE [Unsafe View]: autograd does not track it as a view).
_UNANNOTATED_VIEWS = frozenset(["_unsafe_view"])
# A view torch-directml has a kernel for but that is neither fixed nor modelled (#41):
# Tensor.as_subclass calls alias, and a Python kernel's result gets a Python object it
# then refuses to re-wrap; nothing a model calls reaches alias.
_NOT_FIXED = frozenset(["alias"])


def data_lines(file: str) -> Iterator[str]:
    """The lines of ``data/<file>`` (``REGISTERED_FILE``, ``ROUTING_FILE``), blank and
    ``#`` comment lines left out."""
    text = resources.files(__package__).joinpath("data").joinpath(file).read_text("utf-8")
    return (line for line in text.splitlines() if line and not line.startswith("#"))


@functools.lru_cache(maxsize=None)
def out_unresized() -> FrozenSet[str]:
    """The aten ops whose ``out=`` kernel does not resize an ``out=`` of the wrong size on the
    real 0.2.5 binary: ``"mul"``, ``"mm"`` ... (failure_modes.md #65; benchmarks/out_sweep.py)."""
    return frozenset(line.strip() for line in data_lines(OUT_UNRESIZED_FILE))


@functools.lru_cache(maxsize=None)
def registered() -> FrozenSet[str]:
    """The overloads with a native DirectML kernel: ``"view"``, ``"add.out"`` ... (296)."""
    return frozenset(line.strip() for line in data_lines(REGISTERED_FILE))


def aten_op(name: str):
    """``torch.ops.aten.add.Tensor`` for ``"add.Tensor"`` (``"add"``: the default overload).

    Raises:
        AttributeError: the running torch has no such overload.
    """
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


@functools.lru_cache(maxsize=None)
def view_kernels() -> Tuple[str, ...]:
    """torch-directml's own view kernels, those inference_mode breaks (failure_modes.md #41):
    the ``registered()`` overloads whose result is, on the CPU, a view of their input (the
    schema's return aliases an input it does not write: ``Tensor(a)``), and
    ``_unsafe_view``.  DirectML's kernel builds the view as a new tensor, an inference
    tensor inside inference_mode, where the CPU makes a normal one; torch's ADInplaceOrView
    kernel then gives it its base's version counter, which an inference tensor refuses.
    On torch 2.4.1 and 2.13: ``_reshape_alias``, ``_unsafe_view``, ``as_strided``,
    ``reshape``, ``split.Tensor``, ``split_with_sizes``, ``unfold``, ``view``
    (t/transpose/expand/slice/select/permute reach ``as_strided``).  Not ``alias``
    (``_NOT_FIXED``).  The fix (``patches.inference_mode``) and the emulator's rule for
    #41 both use this list."""
    views = []
    for name in sorted(registered() - _NOT_FIXED):
        try:
            op = aten_op(name)
        except AttributeError:                # not an overload of the running torch
            continue
        if name in _UNANNOTATED_VIEWS or any(r.alias_info is not None and not r.alias_info.is_write
                                             for r in op._schema.returns):
            views.append(name)
    return tuple(views)
