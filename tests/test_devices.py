"""Device selection, float64 support, and `python -m dmlshim info`."""
import subprocess
import sys

import pytest
import torch

from dmlshim import devices, select_device


def test_auto_picks_the_best_available(monkeypatch):
    monkeypatch.delenv("DMLSHIM_DEVICE", raising=False)
    monkeypatch.delenv("INFERENCE_DEVICE", raising=False)
    expected = next(k for k in devices.ORDER if devices.available(k))
    assert select_device().type == {"directml": "privateuseone"}.get(expected, expected)


def test_order_is_cuda_directml_xpu_mps_cpu(monkeypatch):
    monkeypatch.setattr(devices, "available", lambda kind: kind in ("directml", "mps", "cpu"))
    monkeypatch.setattr(devices, "_make", lambda kind, index: kind)
    assert select_device("auto") == "directml"
    monkeypatch.setattr(devices, "available", lambda kind: kind in ("cuda", "directml", "cpu"))
    assert select_device("auto") == "cuda"


@pytest.mark.parametrize("var", ["DMLSHIM_DEVICE", "INFERENCE_DEVICE"])
def test_environment_forces_a_device(monkeypatch, var):
    monkeypatch.delenv("DMLSHIM_DEVICE", raising=False)
    monkeypatch.setenv(var, "cpu")
    assert select_device() == torch.device("cpu")


def test_dmlshim_device_wins_over_alias(monkeypatch):
    monkeypatch.setenv("DMLSHIM_DEVICE", "cpu")
    monkeypatch.setenv("INFERENCE_DEVICE", "not-a-device")
    assert select_device() == torch.device("cpu")


def test_unavailable_or_unknown_device_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(devices, "available", lambda kind: kind == "cpu")
    with pytest.raises(ValueError, match="'cuda' was requested .* not available here; available: cpu"):
        select_device("cuda")
    monkeypatch.setenv("DMLSHIM_DEVICE", "tpu")
    with pytest.raises(ValueError, match="DMLSHIM_DEVICE='tpu': allowed values are auto, directml"):
        select_device()


def test_has_float64_support(dml_device):
    assert devices.has_float64_support("cpu") is True
    assert devices.has_float64_support(torch.device("cuda")) is True


@pytest.mark.emulated_only(
    reason="switches the emulator's float64 support (emulation.configured(has_float64_support=...))")
def test_has_float64_support_follows_the_emulator(dml_device):
    from dmlshim import emulation
    with emulation.configured(has_float64_support=False):
        assert devices.has_float64_support(dml_device) is False
    with emulation.configured(has_float64_support=True):
        assert devices.has_float64_support(dml_device) is True


def test_info_command():
    done = subprocess.run([sys.executable, "-m", "dmlshim", "info"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"torch          {torch.__version__}" in done.stdout
    assert "torch-directml" in done.stdout and "backends" in done.stdout
    for name in ("mul", "rnn", "cat", "dtypes"):
        assert f"  {name} " in done.stdout
    done = subprocess.run([sys.executable, "-m", "dmlshim", "nonsense"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "invalid choice" in done.stderr


@pytest.mark.emulated_only(
    reason="asserts the emulated adapter select_device falls back to when torch_directml is absent")
def test_emulated_device_stands_in_for_directml(dml_device, monkeypatch):
    monkeypatch.setattr(devices, "_torch_directml", lambda: None)
    assert devices.available("directml")
    assert select_device("directml") == torch.device("privateuseone:0") == dml_device
    monkeypatch.setenv("DMLSHIM_DEVICE", "dml")
    assert select_device() == dml_device
    [adapter] = devices.directml_adapters()
    assert adapter["name"].startswith("emulated") and adapter["float64"] == devices.has_float64_support(dml_device)


def test_torch_directml_version_from_its_distribution(monkeypatch):
    """torch_directml has no __version__: info and doctor read the distribution's."""
    import importlib.metadata
    import types

    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.2.5.dev240914" if name == "torch-directml" else "?")
    assert devices.torch_directml_version(types.ModuleType("torch_directml")) == "0.2.5.dev240914"
    assert devices.torch_directml_version(None) is None


def test_info_names_torch_directml_where_it_runs(dml_device):
    """On the real binary ``info`` names its version (it printed "not installed" there)."""
    found = devices.info()["torch_directml"]
    if "torch_directml" in sys.modules:
        assert found and found.startswith("0.2.5")
    else:
        assert found is None                # the emulated device: torch-directml is not here
