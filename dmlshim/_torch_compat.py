"""Every private torch API dmlshim uses, in one place, and :func:`check` of them.

Why: dmlshim runs on the torch torch-directml pins (2.4.1) and on current torch, and
private names move between releases without notice.  Reached from here, a piece this
torch lacks is found once, at ``activate()``: a WARNING on logger ``dmlshim`` and a line
in ``python -m dmlshim info`` say which fix is off and what then happens, instead of a
fix quietly doing nothing.  :data:`PIECES` lists them all.

Most are reached through the small functions below, which return None (or a stand-in
that answers the same) where torch lacks the piece.  ``OpOverload.redispatch`` and
``OpOverload._schema`` are only named and checked here: they run once per dispatched call
in every fix, where a wrapper would cost one more Python call per call, so their call
sites use them directly.

Not here: the ``torch._C._dispatch_*`` functions (the dispatcher's Python bindings that
``torch.library`` is built on) stay at their call sites; the compiled gate's read of
``OperatorHandle::operatorDef_`` (patches/csrc/gate.cpp) is checked by its build (where it
does not compile: the Python gate, and ``_gate``'s own WARNING); the development tools
(``emulation``, ``conformance``), which ``activate()`` never reaches, keep theirs.
"""
from __future__ import annotations

import importlib
import logging
import sys
from typing import Any, Callable, List, NamedTuple, Optional

import torch

__all__ = ["check", "warn_missing", "report_line", "destroy_library", "builtin_table",
           "device_constructors", "tensor_methods", "allowed_methods", "has_storage",
           "has_compatible_shallow_copy_type", "inference_mode_off",
           "is_contiguous_for_memory_format", "tree_map", "dispatch_mode_class", "user_cache_dir"]

_log = logging.getLogger("dmlshim")

# Each function looks its piece up when called, not at import: the emulator replaces
# torch._C._has_storage, and a test takes a piece away with monkeypatch.


def _attr(owner: Any, name: str) -> Any:
    return getattr(owner, name, None)


def _module_attr(module: str, name: str) -> Any:
    """``module.name``, or None where the module or the name is missing.  ``sys.modules``
    first: some of these run once per call of a fix."""
    found = sys.modules.get(module)
    if found is None:
        try:
            found = importlib.import_module(module)
        except ImportError:
            return None
    return getattr(found, name, None)


def destroy_library(library: torch.library.Library) -> None:
    """Take ``library``'s kernels out of the dispatcher (``Library._destroy``)."""
    destroy = _attr(library, "_destroy")
    if destroy is not None:
        destroy()


def builtin_table() -> Optional[dict]:
    """TorchScript's ``id(function) -> "aten::op"`` table, or None."""
    get = _module_attr("torch.jit._builtins", "_get_builtin_table")
    return get() if get is not None else None


def device_constructors() -> Optional[set]:
    """The factories ``with torch.device(...)`` moves to that device (an lru_cache'd set), or None."""
    get = _module_attr("torch.utils._device", "_device_constructors")
    return get() if get is not None else None


def tensor_methods() -> Optional[set]:
    """``torch.overrides.is_tensor_method_or_property``'s set (torch.fx's tracer), or None."""
    get = _attr(torch.overrides, "_get_tensor_methods")
    return get() if get is not None else None


def allowed_methods() -> Optional[list]:
    """The Tensor methods an ``UninitializedParameter`` accepts (a list), or None."""
    return _attr(torch.nn.parameter.UninitializedTensorMixin, "_allowed_methods")


def has_storage(t: torch.Tensor) -> bool:
    """Whether ``t`` has a storage (torch-directml's OpaqueTensorImpl has none)."""
    test = _attr(torch._C, "_has_storage")
    if test is not None:
        return test(t)
    try:                                   # the same answer, slower: a storage-less tensor raises
        t.untyped_storage()
        return True
    except (RuntimeError, NotImplementedError):
        return False


def has_compatible_shallow_copy_type(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``Module._apply`` may swap ``b``'s data into ``a`` (keeping ``a``'s class)."""
    test = _attr(torch, "_has_compatible_shallow_copy_type")
    if test is not None:
        return test(a, b)
    return a.device.type == b.device.type       # what it answers for CPU <-> PrivateUse1


def inference_mode_off():
    """A context that turns inference mode off (the C++ guard: no Python per call)."""
    guard = _attr(torch._C, "_InferenceMode")
    return guard(False) if guard is not None else torch.inference_mode(False)


def is_contiguous_for_memory_format(t: torch.Tensor, *, memory_format) -> bool:
    """Whether ``t``'s strides are contiguous in ``memory_format``, from the strides alone
    (never ``t.is_contiguous``: the real binary answers that wrongly)."""
    test = _module_attr("torch._prims_common", "is_contiguous_for_memory_format")
    if test is not None:
        return test(t, memory_format=memory_format)
    # a meta tensor of the same strides: torch's own answer, no data
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return meta.is_contiguous(memory_format=memory_format)


def tree_map(fn: Callable, tree: Any) -> Any:
    """``fn`` applied to every leaf of nested lists, tuples and dicts."""
    mapped = _module_attr("torch.utils._pytree", "tree_map")
    if mapped is not None:
        return mapped(fn, tree)
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, x) for x in tree)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def dispatch_mode_class() -> Optional[type]:
    """``TorchDispatchMode`` (what ``trace.counting`` subclasses), or None."""
    return _module_attr("torch.utils._python_dispatch", "TorchDispatchMode")


def user_cache_dir(appname: str) -> Optional[str]:
    """``torch.utils.cpp_extension``'s default cache root, or None."""
    get = _module_attr("torch._appdirs", "user_cache_dir")
    return get(appname=appname) if get is not None else None


def _schema_ok() -> bool:
    """The ``_schema`` fields the fixes read, on an in-place and an ``out=`` overload."""
    try:
        inplace, out = torch.ops.aten.add_.Tensor._schema, torch.ops.aten.add.out._schema
        first, last = inplace.arguments[0], out.arguments[-1]
        return (isinstance(inplace.name, str) and isinstance(inplace.is_mutable, bool)
                and len(inplace.returns) == 1 and first.alias_info.is_write
                and last.is_out and last.kwarg_only and hasattr(first, "default_value"))
    except (AttributeError, TypeError, IndexError):
        return False


class _Piece(NamedTuple):
    name: str
    present: Callable[[], bool]
    cost: str                  # which fix is off and what then happens


def _has(module: str, name: str) -> Callable[[], bool]:
    return lambda: _module_attr(module, name) is not None


PIECES: List[_Piece] = [
    # these two are read at their call sites (once per dispatched call: no wrapper here)
    _Piece("OpOverload.redispatch",
           lambda: callable(_attr(torch.ops.aten.add.Tensor, "redispatch")),
           "every dispatcher fix fails with AttributeError when it runs"),
    _Piece("OpOverload._schema", _schema_ok,
           "the dispatcher fixes cannot read an op's arguments: they fail when installed or run"),
    _Piece("Library._destroy", lambda: _attr(torch.library.Library, "_destroy") is not None,
           "deactivate() cannot take dmlshim's kernels out of torch's dispatcher: "
           "they stay registered until the process ends"),
    _Piece("_get_builtin_table", _has("torch.jit._builtins", "_get_builtin_table"),
           "torch.jit.script of code calling a function dmlshim wraps, such as torch.cat, "
           "fails: TorchScript does not know the wrapper"),
    _Piece("_device_constructors", _has("torch.utils._device", "_device_constructors"),
           "with torch.device(...) / torch.set_default_device do not reach dmlshim's wrapped "
           "factories: they make CPU tensors"),
    _Piece("_get_tensor_methods", lambda: _attr(torch.overrides, "_get_tensor_methods") is not None,
           "torch.overrides.is_tensor_method_or_property (torch.fx) does not count dmlshim's "
           "wrapped Tensor methods"),
    _Piece("UninitializedTensorMixin._allowed_methods",
           lambda: isinstance(allowed_methods(), list),
           "lazy modules' uninitialized parameters reject dmlshim's wrapped Tensor methods "
           "(ValueError: Attempted to use an uninitialized parameter)"),
    _Piece("_has_storage", lambda: _attr(torch._C, "_has_storage") is not None,
           "none in results: a slower test (untyped_storage()) stands in"),
    _Piece("_has_compatible_shallow_copy_type",
           lambda: _attr(torch, "_has_compatible_shallow_copy_type") is not None,
           "the jit fix decides by device type alone which parameters a move crosses"),
    _Piece("_InferenceMode", lambda: _attr(torch._C, "_InferenceMode") is not None,
           "the inference_mode fix uses the slower torch.inference_mode(False)"),
    _Piece("is_contiguous_for_memory_format",
           _has("torch._prims_common", "is_contiguous_for_memory_format"),
           "the channels_last fix asks a meta tensor instead (same answer, slower)"),
    _Piece("_pytree.tree_map", _has("torch.utils._pytree", "tree_map"),
           "the out_resize fix maps lists, tuples and dicts only"),
    _Piece("TorchDispatchMode", _has("torch.utils._python_dispatch", "TorchDispatchMode"),
           "dmlshim.trace.counting() raises RuntimeError"),
    _Piece("_appdirs.user_cache_dir", _has("torch._appdirs", "user_cache_dir"),
           "each process imports torch.utils.cpp_extension to find the compiled gate (about 1 s)"),
]


def check() -> List[str]:
    """Each piece this torch lacks, as ``"name (what it costs)"``; [] when all are present."""
    missing = []
    for piece in PIECES:
        try:
            ok = piece.present()
        except Exception:  # noqa: BLE001 - a half-present piece counts as missing
            ok = False
        if not ok:
            missing.append(f"{piece.name} ({piece.cost})")
    return missing


_warned: set = set()


def warn_missing() -> List[str]:
    """:func:`check`, each missing piece logged once per process as a WARNING on logger
    ``dmlshim`` (as ``_gate`` reports a missing compiled gate).  Called by ``activate()``."""
    missing = check()
    for line in missing:
        if line not in _warned:
            _warned.add(line)
            _log.warning("dmlshim: torch %s lacks %s", torch.__version__, line)
    return missing


def report_line(missing: List[str]) -> str:
    """The ``info``/``doctor`` line after ``torch internals``."""
    return "all present" if not missing else "missing " + "; ".join(missing)
