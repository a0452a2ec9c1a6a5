"""CPU islands (dmlshim.islands, patches/dtypes.py): complex, bfloat16 and float64
values DirectML cannot hold (failure_modes.md #7, #8, #9).

Each creator is tested both ways: without the shim the emulated process abort (or
the float64 error) reproduces; with it the result equals the CPU's, islands on the
CPU and real-valued results on the device."""
import warnings

import pytest
import torch

import dmlshim
from dmlshim import devices, islands

N_FFT, HOP = 400, 160


@pytest.fixture
def shim(shim, monkeypatch):
    monkeypatch.setattr(islands, "_warned", set())      # one warning per op, per test


def _audio(seconds=0.2):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, int(16000 * seconds), generator=g)


def log_mel(audio, window, filters):
    """Whisper's front end (openai-whisper audio.log_mel_spectrogram)."""
    stft = torch.stft(audio, N_FFT, HOP, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = filters @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def vocoder(mag, phase, window):
    """A Vocos-style ISTFT head: magnitude and phase to a waveform."""
    spec = torch.complex(mag * torch.cos(phase), mag * torch.sin(phase))
    return torch.istft(spec, N_FFT, HOP, window=window)


def _inputs(dml_device):
    audio, window = _audio(), torch.hann_window(N_FFT)
    filters = torch.rand(80, N_FFT // 2 + 1, generator=torch.Generator().manual_seed(1))
    return (audio, window, filters), tuple(t.to(dml_device) for t in (audio, window, filters))


CREATORS = {
    "stft": lambda x: torch.stft(x, N_FFT, HOP, window=torch.hann_window(N_FFT).to(x.device),
                                 return_complex=True),
    "fft.rfft": lambda x: torch.fft.rfft(x),
    "fft.irfft": lambda x: torch.fft.irfft(x),                 # complex inside, real result
    "complex": lambda x: torch.complex(x, x * 2),
    "bfloat16": lambda x: x.bfloat16(),
    "to complex64": lambda x: x.to(torch.complex64),
    "zeros complex": lambda x: torch.zeros(3, dtype=torch.complex64, device=x.device),
}


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
@pytest.mark.parametrize("name", list(CREATORS))
def test_without_shim_complex_and_bf16_abort(dml_device, name):
    from dmlshim import emulation
    dmlshim.deactivate()
    with pytest.raises(emulation.FatalDirectMLError, match="Invalid or unsupported data type"):
        CREATORS[name](_audio().to(dml_device))


# x.bfloat16() on the device follows DMLSHIM_BF16 (float32 there by default): tests/test_bf16.py
@pytest.mark.parametrize("name", [n for n in CREATORS if n != "bfloat16"])
def test_creators_make_islands_equal_to_the_cpu(shim, dml_device, name, assert_parity):
    x = _audio()
    expected = CREATORS[name](x)
    with pytest.warns(islands.CPUIslandWarning):
        got = CREATORS[name](x.to(dml_device))
    assert got.dtype == expected.dtype
    if islands.holdable(expected.dtype, dml_device):
        assert got.device == dml_device and not islands.is_island(got)
    else:
        assert islands.is_island(got) and got.is_cpu and islands.home(got) == dml_device
    assert_parity(got.cpu(), expected)


def test_log_mel_front_end_runs_with_device_results(shim, dml_device, assert_parity):
    cpu, dev = _inputs(dml_device)
    expected = log_mel(*cpu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        got = log_mel(*dev)
    assert got.device == dml_device and got.dtype == torch.float32
    assert_parity(got.cpu(), expected)
    rows = {r["op"]: r for r in dmlshim.report().rows}
    assert rows["aten::stft"]["actions"] == {"island": 1}
    assert rows["aten::stft"]["d2h"] > 0                    # the audio went to the CPU, counted
    assert rows["Tensor.abs"]["h2d"] > 0                    # the magnitudes came back


def vocos_head(mag, p, window):
    """Vocos' ISTFTHead: a Python complex scalar makes the spectrum."""
    x, y = torch.cos(p), torch.sin(p)
    spec = mag * (x + 1j * y)
    return torch.istft(spec, N_FFT, HOP, window=window)


@pytest.mark.parametrize("head", [vocoder, vocos_head], ids=["torch.complex", "x + 1j * y"])
def test_istft_vocoder_returns_the_waveform_on_the_device(shim, dml_device, assert_parity, head):
    g = torch.Generator().manual_seed(2)
    mag, phase = torch.rand(2, N_FFT // 2 + 1, 12, generator=g), torch.randn(2, N_FFT // 2 + 1, 12, generator=g)
    window = torch.hann_window(N_FFT)
    expected = head(mag, phase, window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        got = head(mag.to(dml_device), phase.to(dml_device), window.to(dml_device))
    assert got.device == dml_device and got.dtype == expected.dtype
    assert_parity(got.cpu(), expected)


def test_autograd_flows_through_an_island(shim, dml_device, assert_parity):
    cpu, dev = _inputs(dml_device)
    a_cpu, a_dev = cpu[0].clone().requires_grad_(), dev[0].clone().requires_grad_()
    log_mel(a_cpu, *cpu[1:]).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        log_mel(a_dev, *dev[1:]).sum().backward()
    assert a_dev.grad.device == dml_device
    assert_parity(a_dev.grad.cpu(), a_cpu.grad)


def test_island_facts(shim, dml_device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        spec = torch.fft.rfft(_audio().to(dml_device))
        assert spec.device == torch.device("cpu") and islands.home(spec) == dml_device
        real = spec.real                                  # a view stays an island and aliases
        assert islands.is_island(real) and real.dtype == torch.float32
        real.zero_()
        assert torch.count_nonzero(spec.real) == 0
        assert spec.mul_(2) is spec                       # in-place keeps the object
        mag = spec.abs()                                  # a real result goes home
        assert mag.device == dml_device and not islands.is_island(mag)
    assert islands.home(torch.ones(1)) is None and not islands.is_island(mag)


def test_one_warning_per_op(shim, dml_device):
    x = _audio().to(dml_device)
    with pytest.warns(islands.CPUIslandWarning, match="torch.fft.rfft|rfft") as record:
        torch.fft.rfft(x)
    assert record[0].filename == __file__                   # points at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", islands.CPUIslandWarning)
        torch.fft.rfft(x)


def test_ordinary_device_mismatch_still_raises(shim, dml_device):
    # The rule is narrow: a CPU tensor that is not an island is the user's bug.
    # (not mm: the real 0.2.5 binary takes a CPU operand there; fidelity-defects.json)
    with pytest.raises(RuntimeError):
        torch.cat([torch.randn(2, 3), torch.randn(3, 3).to(dml_device)])
    with pytest.raises(RuntimeError):
        torch.randn(2, 3) + torch.randn(2, 3).to(dml_device)


@pytest.fixture
def no_float64(dml_device):
    if devices.has_float64_support(dml_device):
        pytest.skip("this device has float64")


FLOAT64 = {
    "double": lambda x: x.double(),
    "float_power": lambda x: torch.float_power(x, 2),
    "softmax dtype": lambda x: torch.softmax(x, -1, dtype=torch.float64),
    "arange dtype": lambda x: torch.arange(4, dtype=torch.float64, device=x.device) + x[0, :4],
}


@pytest.mark.parametrize("name", list(FLOAT64))
def test_computed_float64_is_an_island(shim, dml_device, no_float64, name, assert_parity):
    x = torch.rand(2, 6, generator=torch.Generator().manual_seed(3))
    expected = FLOAT64[name](x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        got = FLOAT64[name](x.to(dml_device))
    assert got.dtype == torch.float64 and islands.is_island(got)
    assert_parity(got, expected)


@pytest.mark.emulated_only(reason="emulation.configured(has_float64_support=True)")
def test_float64_stays_on_a_device_that_has_it(shim, dml_device):
    from dmlshim import emulation
    with emulation.configured(has_float64_support=True):
        y = torch.rand(3).to(dml_device).double()
        assert y.device == dml_device and not islands.is_island(y)


def test_cpu_gives_a_plain_tensor(shim, dml_device, assert_same):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        spec = torch.fft.rfft(_audio().to(dml_device))
    for plain in (spec.cpu(), spec.to("cpu"), spec.to(device="cpu", dtype=torch.complex128)):
        assert type(plain) is torch.Tensor and plain.is_complex()
    assert_same(spec.cpu(), spec.to("cpu"))


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
def test_without_shim_complex_scalar_aborts(dml_device):
    from dmlshim import emulation
    dmlshim.deactivate()
    with pytest.raises(emulation.FatalDirectMLError):
        torch.ones(3).to(dml_device) * 1j


def test_complex_scalar_arithmetic_makes_an_island(shim, dml_device, assert_same):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        x = torch.arange(1.0, 4.0)
        for form in (lambda t: t * 1j, lambda t: 1j * t, lambda t: t + 2j, lambda t: 2j - t,
                     lambda t: t / 1j, lambda t: torch.add(t, 1j)):
            z = form(x.to(dml_device))
            assert islands.is_island(z)
            assert_same(z, form(x))                             # computed on the CPU
