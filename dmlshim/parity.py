"""Parity with the CPU: figures that compare a device result with the CPU reference,
and the tolerance profiles that judge them.

A real GPU does not compute bit for bit like the CPU, so dmlshim claims parity through
a *profile* (``exact`` on the emulator's default numerics, ``device`` on a real GPU or
``numerics="gpu"``; thresholds in :data:`PROFILES`), and every comparison prints its
figures::

    from dmlshim import parity
    figures = parity.compare(device_out, cpu_out)          # TensorFigures
    print(figures)                                         # max abs 0, max rel 0, ...
    parity.assert_close(device_out, cpu_out, "device")     # AssertionError with figures

Where each threshold comes from: docs/parity.md."""
import dataclasses
import math
import sys
from typing import Dict, List, Optional, Sequence

import torch

__all__ = ["Profile", "PROFILES", "profile", "default_profile", "TensorFigures",
           "ImageFigures", "TranscriptFigures", "compare", "compare_images",
           "compare_transcripts", "assert_close"]

_FLOAT_TOLERANCE_DEVICE = {torch.float64: (1e-3, 1e-3), torch.float32: (1e-3, 1e-3),
                           torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2)}


@dataclasses.dataclass(frozen=True)
class Profile:
    """One tolerance profile.

    Attributes:
        name: ``"exact"`` or ``"device"``.
        float_tolerance: ``{dtype: (rtol, atol)}`` for floating-point tensors; a dtype
            not listed compares exactly.
        max_pixel: largest allowed absolute difference of a uint8 image, in levels.
        min_psnr_db: smallest allowed PSNR of an image, in dB (``inf`` = identical).
        max_timestamp_ms: largest allowed timestamp difference, in milliseconds.
        max_token_edits: largest allowed token edit distance of a transcript.
    """

    name: str
    float_tolerance: Dict[torch.dtype, tuple]
    max_pixel: int
    min_psnr_db: float
    max_timestamp_ms: float
    max_token_edits: int

    def tolerance(self, dtype):
        """``(rtol, atol)`` for a tensor dtype (``(0, 0)``: exact)."""
        return self.float_tolerance.get(dtype, (0.0, 0.0))


PROFILES = {
    "exact": Profile("exact", {}, max_pixel=0, min_psnr_db=math.inf, max_timestamp_ms=0,
                     max_token_edits=0),
    # max_pixel / min_psnr_db: the whole GFPGAN pipeline (detect, align, GFPGANv1Clean
    # at 512, paste back; random weights, examples/gfpgan_restore.py) under the
    # emulator's GPU numerics differed from the CPU by at most 1 level, PSNR 80.1 dB
    # (92.9 dB on an aligned face). 4 levels and 45 dB leave room for a real GPU's
    # larger convolution error; 45 dB is above the ~40 dB where differences start to
    # be visible.
    "device": Profile("device", _FLOAT_TOLERANCE_DEVICE, max_pixel=4, min_psnr_db=45.0,
                      max_timestamp_ms=60, max_token_edits=0),
    # A model run in float16 on the device against the CPU's float32 (``RealESRGANer(half=True)``,
    # how people run it on a GPU; issue 51): Real-ESRGAN x4plus, 23 RRDB blocks, differed by at
    # most 5 levels, 50.2 dB, 57% of the values, on the real 0.2.5 binary; realesr-animevideov3 by
    # 2 levels, 56.1 dB; on the emulator, where the difference is float16's rounding alone, by 1-2
    # levels, 59.6-62.2 dB.  8 levels leave room for a GPU's own float16 accumulation; 45 dB is
    # the device profile's bound, below which a difference starts to be visible.
    "float16": Profile("float16", {d: (1e-2, 1e-2) for d in _FLOAT_TOLERANCE_DEVICE}, max_pixel=8,
                       min_psnr_db=45.0, max_timestamp_ms=60, max_token_edits=0),
}


def profile(name) -> Profile:
    """The :class:`Profile` named ``name`` (a Profile is returned as is).

    Raises:
        ValueError: an unknown name; allowed: ``exact``, ``device``, ``float16``.
    """
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"tolerance profile {name!r}: allowed values are "
                         f"{', '.join(PROFILES)}") from None


def default_profile(device) -> Profile:
    """``exact`` for the emulated device with CPU numerics, else ``device``.

    Args:
        device: the device the results were computed on (``torch.device`` or str).
    """
    device = torch.device(device)
    if device.type == "cpu":
        return PROFILES["exact"]
    emulation = sys.modules.get("dmlshim.emulation")
    if (device.type == "privateuseone" and emulation is not None and emulation.is_installed()
            and emulation.numerics() == "cpu"):
        return PROFILES["exact"]
    return PROFILES["device"]


# ---------------------------------------------------------------- tensors

@dataclasses.dataclass(frozen=True)
class TensorFigures:
    """How a tensor differs from its CPU reference.

    Attributes:
        shape_equal, dtype_equal: metadata agree.
        numel: elements compared.
        max_abs: largest ``|actual - expected|`` (0 for equal tensors).
        max_rel: largest ``|actual - expected| / |expected|`` over nonzero expected.
        max_ulp: largest distance in units in the last place of ``expected``'s dtype
            (floating point only; 0 otherwise).
        mismatched: elements outside ``(rtol, atol)``, as a share of ``numel`` (0..1).
        rtol, atol: the tolerance ``mismatched`` was counted with.
    """

    shape_equal: bool
    dtype_equal: bool
    numel: int
    max_abs: float
    max_rel: float
    max_ulp: float
    mismatched: float
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        """Shapes and dtypes equal, no element outside the tolerance."""
        return self.shape_equal and self.dtype_equal and self.mismatched == 0

    def __str__(self):
        if not (self.shape_equal and self.dtype_equal):
            return f"shape/dtype differ (shape equal: {self.shape_equal}, dtype equal: {self.dtype_equal})"
        return (f"max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, max ULP "
                f"{self.max_ulp:.0f}, mismatched {self.mismatched:.2%} of {self.numel} "
                f"(rtol {self.rtol:g}, atol {self.atol:g})")


def _ulp(expected):
    # One unit in the last place at each expected value (spacing to the next float).
    finfo = torch.finfo(expected.dtype)
    mag = expected.abs().clamp_min(finfo.tiny)
    return torch.nextafter(mag, torch.full_like(mag, math.inf)) - mag


def compare(actual: torch.Tensor, expected: torch.Tensor, profile_name="exact") -> TensorFigures:
    """Figures for ``actual`` (any device) against the CPU reference ``expected``.

    Args:
        actual, expected: tensors; ``actual`` is copied to the CPU.
        profile_name: the profile whose tolerance counts ``mismatched``.

    Returns:
        :class:`TensorFigures`. NaNs in the same places count as equal.
    """
    prof = profile(profile_name)
    actual = actual.detach().cpu()
    expected = expected.detach().cpu()
    rtol, atol = prof.tolerance(expected.dtype)
    shape_equal, dtype_equal = actual.shape == expected.shape, actual.dtype == expected.dtype
    if not (shape_equal and dtype_equal) or expected.numel() == 0:
        return TensorFigures(shape_equal, dtype_equal, expected.numel(), 0.0, 0.0, 0.0,
                             0.0, rtol, atol)
    floating = expected.is_floating_point()
    if not floating:
        diff = (actual.to(torch.int64) - expected.to(torch.int64)).abs().double()
        return TensorFigures(True, True, expected.numel(), float(diff.max()), 0.0, 0.0,
                             float((diff > 0).double().mean()), rtol, atol)
    a, e = actual.double(), expected.double()
    same = (a == e) | (a.isnan() & e.isnan())
    diff = torch.where(same, torch.zeros_like(a), (a - e).abs().nan_to_num(math.inf))
    mismatched = ~(same | (diff <= atol + rtol * e.abs()))   # a NaN bound: mismatch
    finite = e.isfinite() & (e != 0)
    max_rel = float((diff[finite] / e[finite].abs()).max()) if finite.any() else 0.0
    ulp = _ulp(expected).double()
    max_ulp = float((diff[finite] / ulp[finite]).max()) if finite.any() else 0.0
    return TensorFigures(True, True, expected.numel(), float(diff.max()), max_rel, max_ulp,
                         float(mismatched.double().mean()), rtol, atol)


def assert_close(actual, expected, profile_name="exact", msg: str = "") -> TensorFigures:
    """Raise ``AssertionError`` with the figures unless ``actual`` is within the profile.

    Tuples and lists are compared element by element.

    Returns:
        The figures (of the last element for a sequence).
    """
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            raise AssertionError(f"{msg}expected a sequence of {len(expected)}, got {actual!r}")
        figures = None
        for i, (a, e) in enumerate(zip(actual, expected)):
            figures = assert_close(a, e, profile_name, f"{msg}[{i}] ")
        return figures
    figures = compare(actual, expected, profile_name)
    if not figures.ok:
        raise AssertionError(f"{msg}not within the {profile(profile_name).name!r} profile: {figures}")
    return figures


# ---------------------------------------------------------------- images

@dataclasses.dataclass(frozen=True)
class ImageFigures:
    """How an 8-bit image differs from its CPU reference.

    Attributes:
        max_pixel: largest absolute difference of a channel value, in levels (0..255).
        psnr_db: peak signal-to-noise ratio in dB (``inf`` for identical images).
        mismatched: share of channel values that differ at all (0..1).
    """

    max_pixel: int
    psnr_db: float
    mismatched: float

    def within(self, profile_name) -> bool:
        prof = profile(profile_name)
        return self.max_pixel <= prof.max_pixel and self.psnr_db >= prof.min_psnr_db

    def __str__(self):
        return (f"max pixel difference {self.max_pixel}, PSNR {self.psnr_db:.1f} dB, "
                f"{self.mismatched:.2%} of values differ")


def compare_images(actual, expected) -> ImageFigures:
    """Figures for two uint8 images (numpy arrays or tensors) of the same shape.

    Raises:
        ValueError: the shapes differ.
    """
    a = torch.as_tensor(actual).to(torch.float64)
    e = torch.as_tensor(expected).to(torch.float64)
    if a.shape != e.shape:
        raise ValueError(f"image shapes differ: {tuple(a.shape)} vs {tuple(e.shape)}")
    diff = (a - e).abs()
    mse = float((diff ** 2).mean()) if diff.numel() else 0.0
    psnr = math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    return ImageFigures(int(diff.max()) if diff.numel() else 0, psnr,
                        float((diff > 0).double().mean()) if diff.numel() else 0.0)


# ---------------------------------------------------------------- transcripts

@dataclasses.dataclass(frozen=True)
class TranscriptFigures:
    """How a transcript differs from its CPU reference.

    Attributes:
        text_equal: the texts are identical strings.
        token_edits: Levenshtein distance between the token sequences (whitespace
            separated, or characters for text without spaces).
        tokens: number of reference tokens.
        timestamp_max_ms: largest difference of a start or end time, in ms
            (``inf`` when the number of timestamps differs).
    """

    text_equal: bool
    token_edits: int
    tokens: int
    timestamp_max_ms: float

    def within(self, profile_name) -> bool:
        prof = profile(profile_name)
        return (self.token_edits <= prof.max_token_edits
                and self.timestamp_max_ms <= prof.max_timestamp_ms)

    def __str__(self):
        return (f"text {'equal' if self.text_equal else 'differs'}, {self.token_edits} token "
                f"edit(s) of {self.tokens}, timestamps max delta {self.timestamp_max_ms:g} ms")


def _tokens(text: str) -> List[str]:
    return text.split() if " " in text.strip() else list(text.strip())


def _edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    from rapidfuzz.distance import Levenshtein
    return Levenshtein.distance(a, b)


def compare_transcripts(actual_text: str, expected_text: str,
                        actual_timestamps: Optional[Sequence] = None,
                        expected_timestamps: Optional[Sequence] = None) -> TranscriptFigures:
    """Figures for a transcript against the CPU's (FunASR: ``text``, ``timestamp`` = [[start_ms, end_ms], ...])."""
    a_ts, e_ts = list(actual_timestamps or []), list(expected_timestamps or [])
    if len(a_ts) != len(e_ts):
        delta = math.inf
    else:
        delta = max((abs(float(x) - float(y)) for pa, pe in zip(a_ts, e_ts)
                     for x, y in zip(pa, pe)), default=0.0)
    expected_tokens = _tokens(expected_text)
    return TranscriptFigures(actual_text == expected_text,
                             _edit_distance(_tokens(actual_text), expected_tokens),
                             len(expected_tokens), delta)
