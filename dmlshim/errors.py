"""Readable DirectML errors: HRESULT recognition and ANSI code-page decoding.

torch-directml formats an HRESULT with ``FormatMessageA``, i.e. in the process's
ANSI code page, and Python decodes that text as UTF-8. On English Windows the
result is the plain message (``RuntimeError: The parameter is incorrect.``); on
Chinese, Japanese, Russian... Windows it is a ``UnicodeDecodeError`` whose
``.object`` holds the localized bytes (failure_modes.md row #4 and Note A); on
WSL the same HRESULT renders as ``Unknown error -2147024809`` (row #28).

This module turns all three into one :class:`DirectMLError` that names the
HRESULT, the op, and its input shapes and dtypes, and it decides which errors
are worth retrying on the CPU (:func:`classify`).
"""
from __future__ import annotations

import codecs
import locale
import os
import re
import sys
from dataclasses import dataclass

import torch

__all__ = [
    "DirectMLError", "HResult", "HRESULTS", "ansi_codepage", "parse_codepage", "decode",
    "recognise", "classify", "translate", "describe_inputs",
]

RETRY, FATAL, OTHER = "retry", "fatal", "other"


@dataclass(frozen=True)
class HResult:
    """One Windows HRESULT: ``name`` (e.g. ``"E_INVALIDARG"``), ``value``
    (unsigned 32-bit), the English system ``text``, and whether running the op
    on the CPU instead is a sensible answer to it (``retryable``)."""
    name: str
    value: int
    text: str
    retryable: bool = True

    def __str__(self):
        return f"{self.name} (0x{self.value:08X})"


E_INVALIDARG = HResult("E_INVALIDARG", 0x80070057, "The parameter is incorrect.")
E_OUTOFMEMORY = HResult("E_OUTOFMEMORY", 0x8007000E,
                        "Not enough storage is available to complete this operation.", False)
HRESULTS = {h.value: h for h in (
    E_INVALIDARG,
    E_OUTOFMEMORY,
    HResult("ERROR_NOT_ENOUGH_MEMORY", 0x80070008,
            "Not enough memory resources are available to process this command.", False),
    HResult("E_FAIL", 0x80004005, "Unspecified error"),
    HResult("E_NOTIMPL", 0x80004001, "Not implemented"),
    HResult("DXGI_ERROR_INVALID_CALL", 0x887A0001, "The application made a call that is invalid."),
    # The device is gone: a CPU retry would hide a dead GPU (row #27).
    HResult("DXGI_ERROR_DEVICE_REMOVED", 0x887A0005,
            "The GPU device instance has been suspended. Use GetDeviceRemovedReason "
            "to determine the appropriate action.", False),
    HResult("DXGI_ERROR_DEVICE_HUNG", 0x887A0006,
            "The GPU will not respond to more commands, most likely because of an "
            "invalid command passed by the calling application.", False),
    HResult("DXGI_ERROR_DEVICE_RESET", 0x887A0007,
            "The GPU will not respond to more commands, most likely because some other "
            "application submitted invalid commands.", False),
    HResult("DXGI_ERROR_DRIVER_INTERNAL_ERROR", 0x887A0020,
            "An internal issue prevented the driver from carrying out the specified "
            "operation.", False),
)}

# Localized system texts: (code page, text, HRESULT value). zh-CN/zh-TW/ja/ko/ru
# E_INVALIDARG, zh-CN E_OUTOFMEMORY and device-removed are the texts of
# failure_modes.md Note A (their bytes match the reported UnicodeDecodeErrors);
# the Western ones are the Windows message table's and appear only as text.
_LOCALIZED = [
    ("cp936", "参数错误", 0x80070057),
    ("cp950", "參數錯誤", 0x80070057),
    ("cp932", "パラメーターが間違っています", 0x80070057),
    ("cp949", "매개 변수가 틀립니다", 0x80070057),
    ("cp1251", "Параметр задан неверно", 0x80070057),
    ("cp1252", "Falscher Parameter", 0x80070057),
    ("cp1252", "Paramètre incorrect", 0x80070057),
    ("cp1252", "El parámetro no es correcto", 0x80070057),
    ("cp1252", "Not enough memory resources are available to complete this operation",
     0x8007000E),                                       # newer Windows' E_OUTOFMEMORY text
    ("cp1252", "Ran out of memory", 0x8007000E),
    ("cp936", "存储空间不足，无法完成此操作", 0x8007000E),
    ("cp936", "存储空间不足，无法处理此命令", 0x80070008),
    ("cp936", "GPU 设备实例已经暂停", 0x887A0005),
    ("cp936", "未指定的错误", 0x80004005),
]
# Untranslated markers: API names survive localization; the out-of-memory text
# is torch-directml's own English message (row #26).
_MARKERS = [
    ("GetDeviceRemovedReason", 0x887A0005),
    ("not enough GPU video memory", 0x8007000E),
]
_FATAL_TEXTS = ("could not allocate tensor", "out of memory")
# torch's own argument-device checks: CUDA raises them too, so they are the caller's
# error, not DirectML's; a CPU retry would turn them into a later, stranger failure.
_ARGUMENT_DEVICE_TEXTS = ("expected all tensors to be on the same device",
                          "argument should be a 1d cpu int64 tensor")
_UNKNOWN_ERROR = re.compile(r"Unknown error (-?\d+)")   # WSL/Linux rendering (#28)
_HEX = re.compile(r"0x([0-9A-Fa-f]{8})\b")


def ansi_codepage() -> str:
    """The code page DirectML's messages are written in, as a Python codec name.

    ``DMLSHIM_CODEPAGE`` (a number such as ``936`` or a codec name such as
    ``cp936``/``gbk``) wins; else the Windows ANSI code page (``GetACP()``);
    elsewhere the locale's encoding. Raises ``ValueError`` for an unknown value.
    """
    env = os.environ.get("DMLSHIM_CODEPAGE", "").strip()
    if env:
        return parse_codepage(env)
    return _system_codepage()


def parse_codepage(value: str, *, name: str = "DMLSHIM_CODEPAGE") -> str:
    """A code page number (``936``) or codec name (``gbk``) as Python's codec name.

    Raises ``ValueError`` naming ``name`` and the allowed values."""
    text = str(value).strip()
    try:
        return codecs.lookup(f"cp{text}" if text.isdigit() else text).name
    except LookupError:
        raise ValueError(
            f"{name}={value!r} is not a known code page; allowed: a Windows code page "
            "number (936, 932, 949, 950, 1251, 1252, 65001, ...) or a Python codec name "
            "(cp936, gbk, shift_jis, utf-8, ...)") from None


def _system_codepage():
    if sys.platform == "win32":
        import ctypes
        return codecs.lookup(f"cp{ctypes.windll.kernel32.GetACP()}").name
    enc = getattr(locale, "getencoding", None)          # Python >= 3.11
    enc = enc() if enc else locale.getpreferredencoding(False)
    return codecs.lookup(enc).name


def decode(data: bytes, codepage: str | None = None) -> tuple[str, str]:
    """Decode a DirectML message's raw bytes (``UnicodeDecodeError.object``).

    Returns ``(text, codepage_used)``. ``codepage`` (or ``DMLSHIM_CODEPAGE``)
    is obeyed when given; otherwise the ANSI code page is tried first and the
    known localized texts (Note A) identify the code page when it fails.
    """
    data = bytes(data)
    explicit = codepage or os.environ.get("DMLSHIM_CODEPAGE", "").strip()
    cp = codecs.lookup(codepage).name if codepage else ansi_codepage()
    try:
        text = data.decode(cp)
    except UnicodeDecodeError:
        text = None
    if text is not None and (explicit or recognise(text)):
        return text, cp
    for known_cp, known, _ in _LOCALIZED:
        if known.encode(known_cp) in data:
            return data.decode(known_cp, "replace"), known_cp
    return (text if text is not None else data.decode(cp, "replace")), cp


def recognise(text: str) -> HResult | None:
    """The HRESULT a DirectML message stands for, or None.

    Knows the English and localized system texts, untranslated markers
    (``GetDeviceRemovedReason``), WSL's ``Unknown error -2147024809`` and
    explicit ``0x80070057``-style codes. An unlisted code gives an HResult
    named ``HRESULT_0x...`` that is retryable unless it is a DXGI device error.
    """
    m = _UNKNOWN_ERROR.search(text) or _HEX.search(text)
    if m:
        value = int(m.group(1), 16 if m.re is _HEX else 10) & 0xFFFFFFFF
        if value & 0x80000000:                           # a failure HRESULT
            return HRESULTS.get(value) or HResult(
                f"HRESULT_0x{value:08X}", value, "", value >> 16 != 0x887A)
    # FormatMessage text is the whole exception message (Note A point 1), so a
    # prefix match cannot mistake torch's "... not implemented for ..." for E_NOTIMPL.
    folded = text.strip().casefold()
    for h in HRESULTS.values():
        if folded.startswith(h.text.casefold().rstrip(".")):
            return h
    for _, known, value in _LOCALIZED:
        if folded.startswith(known.casefold()):
            return HRESULTS[value]
    for marker, value in _MARKERS:
        if marker.casefold() in folded:
            return HRESULTS[value]
    return None


def classify(exc: BaseException) -> str:
    """How the shim should treat ``exc`` raised by a torch call on the device.

    ``"retry"``: DirectML-class and the CPU can be expected to run the op
    (E_INVALIDARG and unknown HRESULTs, "The parameter is incorrect.", any
    other ``RuntimeError``/``NotImplementedError`` from the backend, the
    ``UnicodeDecodeError`` of Note A). ``"fatal"``: DirectML-class but a CPU
    retry would hide the real problem (out of memory, device removed/hung/reset).
    ``"other"``: not a DirectML error (TypeError, ValueError, ..., and torch's own
    argument-device checks that CUDA raises too: "Expected all tensors to be on the
    same device", pack_padded_sequence's "'lengths' argument should be a 1D CPU
    int64 tensor").
    """
    if isinstance(exc, DirectMLError):
        return RETRY if exc.retryable else FATAL
    if isinstance(exc, UnicodeDecodeError):
        h = recognise(decode(exc.object)[0])
        return FATAL if h and not h.retryable else RETRY
    if isinstance(exc, (RuntimeError, NotImplementedError)):
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError  # < 2.5: cuda only
        if isinstance(exc, oom):
            return FATAL
        text = str(exc)
        h = recognise(text)
        folded = text.casefold()
        if (h and not h.retryable) or any(t in folded for t in _FATAL_TEXTS):
            return FATAL
        if any(t in folded for t in _ARGUMENT_DEVICE_TEXTS):
            return OTHER
        return RETRY
    return OTHER


_SHORT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
          torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
          torch.complex64: "c64", torch.complex128: "c128"}


def _describe(x):
    if isinstance(x, torch.Tensor):
        dtype = _SHORT.get(x.dtype, str(x.dtype).replace("torch.", ""))
        return f"{dtype}{list(x.shape)}@{x.device}"
    if isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
        return "[" + ", ".join(_describe(t) for t in x) + "]"
    return None


def describe_inputs(args=(), kwargs=None) -> tuple:
    """Shapes, dtypes and devices of the tensor arguments (``"f32[2, 3]@cpu"``),
    never their values. Non-tensor arguments are left out."""
    out = [d for d in map(_describe, args) if d]
    out += [f"{k}={d}" for k, v in (kwargs or {}).items() if (d := _describe(v))]
    return tuple(out)


class DirectMLError(RuntimeError):
    """A DirectML failure made readable (a ``RuntimeError``, so existing
    ``except RuntimeError`` handlers still catch it).

    Attributes: ``message`` (the decoded text), ``hresult`` (:class:`HResult`
    or None), ``op`` (e.g. ``"torch.cat"``), ``inputs`` (tuple of
    ``"f32[43, 512]@privateuseone:0"`` strings), ``codepage`` (the code page
    the message was decoded with, None if it was not bytes), ``retryable``.
    The original exception is chained as ``__cause__``.
    """

    def __init__(self, message, hresult=None, op=None, inputs=(), codepage=None):
        self.message, self.hresult, self.op = message, hresult, op
        self.inputs, self.codepage = tuple(inputs), codepage
        self.retryable = hresult.retryable if hresult else not any(
            t in message.casefold() for t in _FATAL_TEXTS)
        super().__init__(self._format())

    def _format(self):
        head = "DirectML error" + (f" {self.hresult}" if self.hresult else "")
        if self.op:
            head += f" in {self.op}({', '.join(self.inputs)})"
        tail = f" [decoded from {self.codepage}]" if self.codepage else ""
        return f"{head}: {self.message.strip()}{tail}"

    def __reduce__(self):   # picklable across multiprocessing
        return (type(self), (self.message, self.hresult, self.op, self.inputs, self.codepage))


def translate(exc: BaseException, op=None, args=(), kwargs=None) -> DirectMLError | None:
    """A :class:`DirectMLError` for ``exc`` when it is a DirectML HRESULT
    failure (a ``UnicodeDecodeError`` of Note A, or a ``RuntimeError`` whose
    text names a recognised HRESULT), else None. The caller raises it
    ``from exc``. ``op``/``args``/``kwargs`` describe the failed call."""
    if isinstance(exc, DirectMLError):
        return exc
    if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, (bytes, bytearray)):
        text, cp = decode(exc.object)
        return DirectMLError(text, recognise(text), op, describe_inputs(args, kwargs), cp)
    if isinstance(exc, RuntimeError):
        h = recognise(str(exc))
        if h is not None:
            return DirectMLError(str(exc), h, op, describe_inputs(args, kwargs))
    return None
