"""Where each aten overload goes on torch-directml 0.2.5 (torch 2.4.1).

Read from ``dmlshim/data/dml_op_routing_torch241.tsv`` (through ``dmlshim.dml_ops``):
torch 2.4.1's dispatcher with torch_directml_native loaded, one row per overload (3127
rows; see failure_modes.md, "Companion files").  Routes: ``DML_KERNEL`` (native), ``CPU_FALLBACK`` (copied to the
CPU and back, with a warning), ``CPU_FALLBACK_NO_CPU_KERNEL`` (``NotImplementedError``,
row #34), ``COMPOSITE_IMPLICIT`` / ``COMPOSITE_EXPLICIT`` (decomposes before DirectML),
``UNKNOWN`` (not an overload of torch 2.4.1).

What each route means and how structured ops take their ``out=`` delegate's route:
docs/emulation.md ("Routing")."""
import functools

import torch

from ..dml_ops import ROUTING_FILE, data_lines

DML_KERNEL = "DML_KERNEL"
CPU_FALLBACK = "CPU_FALLBACK"
NO_CPU_KERNEL = "CPU_FALLBACK_NO_CPU_KERNEL"
COMPOSITE_IMPLICIT = "COMPOSITE_IMPLICIT"
COMPOSITE_EXPLICIT = "COMPOSITE_EXPLICIT"
UNKNOWN = "UNKNOWN"


@functools.lru_cache(maxsize=None)
def table():
    """``{overload name: (route, delegate name)}`` with ``(`` suffixes dropped."""
    rows = {}
    for line in data_lines(ROUTING_FILE):
        name, raw = line.split("\t")[:2]
        if name == "op":
            continue
        delegate = name
        if "->" in raw:  # COMPOSITE_NONFUNCTIONAL->add.out:DML_KERNEL
            delegate, raw = raw.split("->", 1)[1].rsplit(":", 1)
        rows[name] = (raw.split("(", 1)[0], delegate)
    return rows


def op_name(op) -> str:
    """``"add.Tensor"`` for ``torch.ops.aten.add.Tensor``, ``"aten::add.Tensor"`` or itself."""
    if not isinstance(op, str):
        base = op._schema.name.split("::", 1)[-1]
        overload = op._overloadname
        return base if overload == "default" else f"{base}.{overload}"
    name = op.split("::", 1)[-1]
    return name[: -len(".default")] if name.endswith(".default") else name


def lookup(op):
    """``(route, name DirectML reports)`` for an overload; ``(UNKNOWN, name)`` if absent."""
    name = op_name(op)
    return table().get(name, (UNKNOWN, name))


def route(op) -> str:
    """The route of one overload on torch-directml 0.2.5.

    Args:
        op: an ``OpOverload`` or its name, ``"cat"``, ``"aten::add.Tensor"``.

    Returns:
        One of ``DML_KERNEL``, ``CPU_FALLBACK``, ``CPU_FALLBACK_NO_CPU_KERNEL``,
        ``COMPOSITE_IMPLICIT``, ``COMPOSITE_EXPLICIT``, ``UNKNOWN``.
    """
    return lookup(op)[0]


def has_cpu_kernel(name: str) -> bool:
    """Whether the running torch registers a CPU kernel for ``name`` (``"_scaled_mm"``).

    ``CPU_FALLBACK_NO_CPU_KERNEL`` rows are exactly those without one on torch 2.4.1."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU")
    except RuntimeError:          # not an operator of the running torch
        return False


def fallback_warning(name: str) -> str:
    """torch-directml's ``dml_cpu_fallback`` warning text (failure_modes.md note B)."""
    return (f"The operator 'aten::{name}' is not currently supported on the DML backend "
            "and will fall back to run on the CPU. This may have performance implications.")


def no_cpu_kernel_error(name: str) -> NotImplementedError:
    """PyTorch's dispatcher error when the CPU fallback has no CPU kernel (row #1, #34)."""
    return NotImplementedError(
        f"Could not run 'aten::{name}' with arguments from the 'CPU' backend. This could be "
        "because the operator doesn't exist for this backend, or was omitted during the "
        "selective/custom build process (if using custom build). If you are a Facebook "
        "employee using PyTorch on mobile, please visit https://fburl.com/ptmfixes for "
        f"possible resolutions. 'aten::{name}' is only available for these backends: "
        f"[{', '.join(_backends_with_kernel(name))}].")


def _backends_with_kernel(name):
    # The running dispatcher's computed table, as its own error message lists it.
    try:
        dump = torch._C._dispatch_dump_table(f"aten::{name}")
    except RuntimeError:
        return ["PrivateUse1", "Meta"]
    keys = (line.split(":", 1)[0] for line in dump.splitlines() if ": " in line)
    return [k for k in keys if k != "CPU"] or ["PrivateUse1", "Meta"]
