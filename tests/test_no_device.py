"""No DirectML device, no cost (issue 26): ``activate()`` on a machine without a target
device puts nothing on any call's path, and a device that appears later gets its fixes.

The suite's session has the emulated device installed (conftest), so the machine without
a device is a fresh Python (``torch_directml`` hidden, no emulator until the script
installs it); the in-process tests use ``target="cuda"`` where CUDA is absent.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import dmlshim
from dmlshim import devices, patches

ROOT = Path(__file__).resolve().parents[1]
ANYWHERE = {p.name for p in patches.REGISTRY if p.anywhere}

# A CPU-only machine: activate(), then everything a CPU call could pass through is
# compared with what it was; then a device appears (emulation.install()).
SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["torch_directml"] = None          # no real DirectML, whatever is installed
    import torch, torch.nn.functional as F
    import dmlshim
    from dmlshim import patches, probing

    OPS = ["aten::mul.Tensor", "aten::mul_.Tensor", "aten::add.Tensor", "aten::cat",
           "aten::relu", "aten::matmul", "aten::linear", "aten::_to_copy", "aten::index.Tensor"]
    OWNERS = {"torch.Tensor": torch.Tensor, "torch.nn.functional": F, "torch": torch,
              "torch._C._nn": torch._C._nn, "torch.fft": torch.fft, "torch.linalg": torch.linalg,
              "torch.jit.RecursiveScriptModule": torch.jit.RecursiveScriptModule}

    def tables():
        return {op: torch._C._dispatch_dump_table(op) for op in OPS}

    def attributes():
        return {name: dict(vars(owner)) for name, owner in OWNERS.items()}

    def replaced(before):
        return sorted(f"{name}.{key}" for name, attrs in before.items()
                      for key, value in attrs.items() if vars(OWNERS[name]).get(key) is not value)

    def device_calls(dev):
        x, mask = torch.tensor([1.5, -2.0], device=dev), torch.tensor([True, False], device=dev)
        lstm = torch.nn.LSTM(3, 4).to(dev)
        return {"mul": str((x * mask).dtype),
                "cat": list(torch.cat([x, torch.ones(0, device=dev)]).shape),
                "lstm": list(lstm(torch.ones(2, 1, 3, device=dev))[0].shape)}

    tables_before, attributes_before = tables(), attributes()
    dmlshim.activate()
    out = {"active": dmlshim.is_active(), "device": probing.last().device,
           "installed": patches.installed(), "tables": [op for op, t in tables().items()
                                                        if t != tables_before[op]],
           "replaced": replaced(attributes_before),
           "added": sorted(k for n in ("torch.Tensor", "torch.nn.functional")
                           for k in set(vars(OWNERS[n])) - set(attributes_before[n]))}
    from dmlshim import emulation
    dev = emulation.install()                      # a device appears after activate()
    out["late"] = {"device": probing.last().device, "installed": sorted(patches.installed()),
                   "calls": device_calls(dev)}
    dmlshim.deactivate()
    dmlshim.activate()                             # what activate() gives with the device there
    out["direct"] = {"installed": sorted(patches.installed()), "calls": device_calls(dev)}
    dmlshim.deactivate()
    out["after"] = {"installed": patches.installed(), "replaced": replaced(attributes_before)}
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def fresh():
    """What the script saw, in a fresh Python without DirectML."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLSHIM_", "INFERENCE_"))}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_activate_without_a_device_installs_nothing_a_call_passes_through(fresh):
    assert fresh["active"] and fresh["device"] is None
    assert set(fresh["installed"]) <= ANYWHERE == {"basicsr"}    # a module alias, no wrapper
    assert fresh["tables"] == []                  # aten dispatch tables as torch left them
    assert fresh["replaced"] == [] and fresh["added"] == []   # the original objects


def test_a_device_appearing_later_gets_what_activate_gives_it(fresh):
    late, direct = fresh["late"], fresh["direct"]
    assert late["device"] == "privateuseone:0"
    assert late["installed"] == direct["installed"]
    assert {"mul", "dispatcher", "cat", "rnn", "jit", "auto"} <= set(late["installed"])
    assert late["calls"] == direct["calls"] == {"mul": "torch.float32", "cat": [2], "lstm": [2, 1, 4]}


def test_deactivate_restores_everything_after_a_late_device(fresh):
    assert fresh["after"] == {"installed": [], "replaced": []}


@pytest.fixture
def no_cuda():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA: target='cuda' must find no device")
    dmlshim.deactivate()
    yield
    dmlshim.deactivate()


def test_a_device_of_another_type_does_not_wake_it_and_deactivate_stops_waiting(no_cuda):
    dmlshim.activate(target="cuda")
    before = patches.installed()
    assert set(before) <= ANYWHERE and dmlshim._device_added in devices._watchers
    devices.added()                                # the emulated DirectML device is no CUDA
    assert patches.installed() == before and dmlshim._device_added in devices._watchers
    dmlshim.deactivate()
    assert dmlshim._device_added not in devices._watchers and patches.installed() == []


def test_when_added_calls_back_until_cancelled():
    calls = []
    cancel = devices.when_added(lambda: calls.append(1))
    devices.added()
    devices.added()
    cancel()
    devices.added()
    assert calls == [1, 1]
