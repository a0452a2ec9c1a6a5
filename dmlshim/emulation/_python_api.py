"""The emulated device bound through torch's Python PrivateUse1 API (torch >= 2.5).

A device tensor is an ordinary CPU allocation whose DLPack capsule was
re-tagged from ``kDLCPU`` (1) to ``kDLExtDev`` (12), which ``torch`` maps to
PrivateUse1. The reverse re-tag gives a CPU *alias* of a device tensor: same
memory, same sizes/strides, so CPU kernels can read and write it in place.
Each move costs about 1.5 µs and copies nothing. Kernels reach Python through
one boxed fallback (``Library.fallback``).

torch 2.4.1 has none of this (no ``Library.fallback``, no
``_setup_privateuseone_for_python_backend``, DLPack refuses kDLExtDev), and
:mod:`._compiled` is faster where both exist, so this binding serves only torch
>= 2.5 without a C++ toolchain (``_backend.select_binding``).
"""
import ctypes

import torch

_KDL_CPU = 1
_KDL_EXT_DEV = 12
_DEVICE_TYPE_OFFSET = 8  # DLTensor: void* data; DLDevice{int32 device_type, ...}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack
_int32_at = ctypes.c_int32.from_address

NAME = "python"


def available() -> bool:
    """Whether this torch has the Python PrivateUse1 backend API."""
    try:
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch.library.Library, "fallback")


def _retag(t, code):
    # torch._C._to_dlpack exports the data only (no autograd history, no grad check).
    cap = _to_dlpack(t)
    _int32_at(_get_pointer(cap, b"dltensor") + _DEVICE_TYPE_OFFSET).value = code
    return _from_dlpack(cap)


def to_device(cpu_tensor):
    """A device tensor that owns ``cpu_tensor``'s memory (no copy)."""
    return _retag(cpu_tensor, _KDL_EXT_DEV)


def device_without_index(cpu_tensor):
    """As :func:`to_device`, on ``privateuseone`` without an index, as torch-directml's
    empty kernel returns for a device given without one (the real 0.2.5 binary).
    Raises RuntimeError on torch 2.4 (its from_dlpack takes no such device)."""
    cap = _to_dlpack(cpu_tensor)
    device = _get_pointer(cap, b"dltensor") + _DEVICE_TYPE_OFFSET
    _int32_at(device).value = _KDL_EXT_DEV
    _int32_at(device + 4).value = -1          # DLDevice.device_id follows device_type
    return _from_dlpack(cap)


def cpu_alias(dev_tensor):
    """A CPU tensor aliasing ``dev_tensor``'s memory (writes are shared)."""
    return _retag(dev_tensor, _KDL_CPU)


def setup(device_type, device_module, fallback, take_op):
    """Make PrivateUse1 a Python backend whose every op reaches ``fallback``.

    Args:
        device_type: the backend's name (``"privateuseone"``).
        device_module: what ``torch.privateuseone`` becomes.
        fallback: ``(OpOverload, *args, **kwargs) -> result``, the boxed fallback.
        take_op: unused here (the Python fallback registers per-op kernels itself).

    Returns:
        The ``torch.library.Library`` objects, which must stay referenced.
    """
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    # The same-name rename is required: without it backward() fails with
    # "Cannot access accelerator device".
    _setup_privateuseone_for_python_backend(rename=device_type, backend_module=device_module)
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(fallback, dispatch_key="PrivateUse1")
    # torch-directml registers no autocast kernels: autocast is a no-op (row #36).
    lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    return [lib]
