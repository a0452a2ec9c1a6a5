"""dmlshim._torch_compat: the private torch APIs dmlshim uses, and their check (issue 49 item 6).

A piece this torch lacks is named by ``check()``, logged once as a WARNING at
``activate()`` and shown by ``python -m dmlshim info``; the stand-ins answer as torch does.
"""
import json
import logging

import pytest
import torch
import torch._appdirs  # noqa: F401 - the modules REMOVALS reaches into
import torch._prims_common  # noqa: F401
import torch.jit._builtins  # noqa: F401
import torch.utils._device  # noqa: F401
import torch.utils._python_dispatch  # noqa: F401
import torch.utils._pytree  # noqa: F401

import dmlshim
from dmlshim import _torch_compat
from dmlshim.__main__ import main
from dmlshim.patches import _identity

# (owner, attribute) that takes each piece of _torch_compat.PIECES away, in its order
REMOVALS = [
    (torch._ops.OpOverload, "redispatch"),
    (torch.ops.aten.add_.Tensor, "_schema"),
    (torch.library.Library, "_destroy"),
    (torch.jit._builtins, "_get_builtin_table"),
    (torch.utils._device, "_device_constructors"),
    (torch.overrides, "_get_tensor_methods"),
    (torch.nn.parameter.UninitializedTensorMixin, "_allowed_methods"),
    (torch._C, "_has_storage"),
    (torch, "_has_compatible_shallow_copy_type"),
    (torch._C, "_InferenceMode"),
    (torch._prims_common, "is_contiguous_for_memory_format"),
    (torch.utils._pytree, "tree_map"),
    (torch.utils._python_dispatch, "TorchDispatchMode"),
    (torch._appdirs, "user_cache_dir"),
]


@pytest.fixture(autouse=True)
def _inactive(monkeypatch):
    dmlshim.deactivate()
    monkeypatch.setattr(_torch_compat, "_warned", set())       # each test sees its own warnings
    yield
    dmlshim.deactivate()


def test_every_piece_is_present_on_this_torch():
    assert _torch_compat.check() == [], torch.__version__
    assert _torch_compat.report_line([]) == "all present"


def test_every_piece_has_a_removal_here():
    assert len(REMOVALS) == len(_torch_compat.PIECES)


@pytest.mark.parametrize("owner, name", REMOVALS, ids=[n for _, n in REMOVALS])
def test_check_names_a_missing_piece_and_what_it_costs(monkeypatch, owner, name):
    monkeypatch.delattr(owner, name)
    [line] = _torch_compat.check()
    assert name.lstrip("_") in line and "(" in line, line          # the name, then its cost


def test_activate_warns_once_per_missing_piece_and_installs_as_before(monkeypatch, caplog, dml_device):
    # a table torch itself does not need here (torch.fx's); primed first, as the session
    # keeps _identity's tables once computed
    _identity.prime()
    monkeypatch.delattr(torch.overrides, "_get_tensor_methods")
    with caplog.at_level(logging.WARNING, logger="dmlshim"):
        dmlshim.activate(fallback="known", trace=0)
        dmlshim.deactivate()
        dmlshim.activate(fallback="known", trace=0)
    records = [r for r in caplog.records if "_get_tensor_methods" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "torch.fx" in records[0].getMessage()                    # what it costs
    # the rest is installed and runs as before
    assert dmlshim.is_active() and torch.cat is not torch._C._VariableFunctions.cat
    out = torch.cat([torch.ones(2, device=dml_device), torch.ones(0, device=dml_device)])
    assert out.shape == (2,) and out.device.type == dml_device.type


def test_activate_warns_nothing_when_all_is_present(caplog):
    with caplog.at_level(logging.WARNING, logger="dmlshim"):
        dmlshim.activate(fallback="known", trace=0)
    assert not [r for r in caplog.records if "lacks" in r.getMessage()]


def test_info_prints_the_line(monkeypatch, capsys):
    assert main(["info"]) == 0
    assert "torch internals: all present" in capsys.readouterr().out
    monkeypatch.delattr(torch.utils._device, "_device_constructors")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch internals: missing _device_constructors (" in out and "CPU tensors" in out
    assert main(["info", "--json"]) == 0
    [line] = json.loads(capsys.readouterr().out)["torch_internals_missing"]
    assert line.startswith("_device_constructors (")


def test_a_missing_table_is_none_not_an_error(monkeypatch):
    """_identity's tables come from _torch_compat: a missing one is None (check() names
    it), never an exception swallowed on the way."""
    monkeypatch.delattr(torch.utils._device, "_device_constructors")
    monkeypatch.delattr(torch.jit._builtins, "_get_builtin_table")
    assert _torch_compat.device_constructors() is None and _torch_compat.builtin_table() is None
    assert _torch_compat.device_constructors in _identity.TABLES


def test_the_stand_ins_answer_as_torch_does(monkeypatch, dml_device):
    cpu, dev = torch.ones(2, 3), torch.ones(2, 3, device=dml_device)
    x = torch.empty(2, 3, 4, 5)
    layouts = [x, x.to(memory_format=torch.channels_last), x.transpose(1, 2), x[:, :, ::2]]
    formats = [torch.contiguous_format, torch.channels_last]

    def answers():
        return ([_torch_compat.has_storage(t) for t in (cpu, dev)],
                [_torch_compat.has_compatible_shallow_copy_type(a, b)
                 for a, b in ((cpu, cpu), (cpu, dev), (dev, cpu), (dev, dev))],
                [_torch_compat.is_contiguous_for_memory_format(t, memory_format=f)
                 for t in layouts for f in formats],
                _torch_compat.tree_map(lambda v: v * 2, [1, (2, {"a": 3})]))

    before = answers()
    for owner, name in [(torch._C, "_has_storage"), (torch, "_has_compatible_shallow_copy_type"),
                        (torch._prims_common, "is_contiguous_for_memory_format"),
                        (torch.utils._pytree, "tree_map")]:
        monkeypatch.delattr(owner, name)
    assert answers() == before
    with _torch_compat.inference_mode_off():
        assert not torch.is_inference_mode_enabled()
