"""Transparency: code that works without dmlshim works identically with it, the CPU
included (docs/transparency.md).

torch recognises some functions by identity (``func in _allowed_methods``,
``func in _device_constructors()``, ``func is F.scaled_dot_product_attention``);
dmlshim's wrappers must be recognised there too (dmlshim/patches/_identity.py).
Each case runs without dmlshim first (it works), then with ``activate()``.
"""
import pytest
import torch
import torch.nn.functional as F

import dmlshim

CONVERSIONS = {
    "to cpu": lambda m, dev: m.to("cpu"),
    "to float32": lambda m, dev: m.to(torch.float32),
    "half": lambda m, dev: m.half(),
    "float": lambda m, dev: m.float(),
    "to device": lambda m, dev: m.to(dev),
}
LAZY = {
    "LazyLinear": (lambda: torch.nn.LazyLinear(4), (2, 3)),
    "LazyConv2d": (lambda: torch.nn.LazyConv2d(4, 3), (1, 2, 6, 6)),
}


def _lazy_outcomes(dml_device):
    """For each lazy module, conversion and place: the parameters' state after the
    conversion (type, device, dtype) and, where torch can run it, the first forward.

    On the CPU every conversion is followed by a forward. On a PrivateUse1 device torch
    itself replaces an uninitialized parameter by an empty ``Parameter`` in
    ``Module._apply`` (``_has_compatible_shallow_copy_type`` knows no PrivateUse1), with
    or without dmlshim, so there the forward runs on a module made on the device."""
    out = {}
    for name, (make, shape) in LAZY.items():
        for conversion, convert in CONVERSIONS.items():
            torch.manual_seed(0)
            module = make()
            convert(module, dml_device)
            out[name, conversion] = [(type(p).__name__, p.device.type, p.dtype) for p in module.parameters()]
            module = make().float() if conversion == "to device" else module.float()
            torch.manual_seed(1)
            x = torch.randn(*shape)
            torch.manual_seed(2)                 # the parameters are made at the first forward
            out[name, conversion, "forward"] = module(x)
        torch.manual_seed(2)
        on_device = type(make())(*([4, 3] if name == "LazyConv2d" else [4]), device=dml_device)
        torch.manual_seed(2)
        out[name, "made on the device", "forward"] = on_device(x.to(dml_device)).to("cpu")
    return out


def test_lazy_modules_convert_and_run_with_dmlshim(dml_device, assert_same):
    """With dmlshim active ``.to()/.half()/.float()`` of a lazy module raised
    ``ValueError: Attempted to use an uninitialized parameter`` (CPU and device); now
    every conversion leaves the parameters as without dmlshim (a move to the device keeps them
    uninitialized: lazy_modules, tests/test_conformance_all.py) and the first forward
    equals the one without dmlshim, bit for bit."""
    dmlshim.deactivate()
    expected = _lazy_outcomes(dml_device)
    dmlshim.activate(trace=0)
    try:
        got = _lazy_outcomes(dml_device)
    finally:
        dmlshim.deactivate()
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert_same(got[key], value, f"{key}: ")
        elif key[1] == "to device":
            # torch turns them into empty Parameters there (above); dmlshim's lazy_modules
            # keeps them uninitialized, as a move to the CPU or CUDA does
            assert {kind for kind, _, _ in got[key]} == {"UninitializedParameter"}, key
            assert [(device, dtype) for _, device, dtype in got[key]] == [(d, t) for _, d, t in value], key
        else:
            assert got[key] == value, key
    assert expected["LazyLinear", "half"] == [("UninitializedParameter", "cpu", torch.float16)] * 2


def _defaults(dev):
    """Where factories and module parameters go under the default-device context."""
    with torch.device(dev):
        made = [torch.zeros(2), torch.randn(2), torch.fft.fftfreq(3), torch.nn.Linear(2, 2).weight]
    torch.set_default_device(dev)
    try:
        made += [torch.ones(2), torch.arange(3)]
    finally:
        torch.set_default_device(None)
    return [t.device.type for t in made]


def test_default_device_context_still_moves_factories(dml_device):
    """``with torch.device(dml)`` / ``torch.set_default_device(dml)`` recognise factories
    by identity; with dmlshim they used to make CPU tensors silently."""
    dmlshim.deactivate()
    assert _defaults(dml_device) == [dml_device.type] * 6
    dmlshim.activate(trace=0)
    try:
        assert _defaults(dml_device) == [dml_device.type] * 6
    finally:
        dmlshim.deactivate()


def test_aliases_stay_one_object_and_tables_are_restored():
    """``F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention``
    (torch.nn.attention.bias.CausalBias tests it); deactivate leaves torch's tables as
    they were."""
    from torch.nn.parameter import UninitializedTensorMixin
    from torch.utils._device import _device_constructors

    dmlshim.deactivate()
    before = (list(UninitializedTensorMixin._allowed_methods), set(_device_constructors()))
    dmlshim.activate(trace=0)
    try:
        assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
        assert torch.Tensor.to in UninitializedTensorMixin._allowed_methods
        assert torch.zeros in _device_constructors()
    finally:
        dmlshim.deactivate()
    assert (list(UninitializedTensorMixin._allowed_methods), set(_device_constructors())) == before


# ---------------------------------------------------------------- OpInfo / ModuleInfo samples

OPS = (r"^(add|mul|div|cat|where|cumsum|softmax|fft\.fft|zeros|arange|to|index_put|"
       r"nn\.functional\.(conv2d|scaled_dot_product_attention|cross_entropy))$")
MODULES = r"^nn\.(LazyConv(2d|Transpose1d)|Linear|Conv2d|LSTM|TransformerEncoderLayer)$"


@pytest.fixture(scope="module")
def cases():
    pytest.importorskip("expecttest", reason="torch.testing's OpInfo database needs expecttest")
    from dmlshim import conformance
    dmlshim.deactivate()
    ops = conformance.collect(OPS, ["float32", "float16", "int64", "bool"])
    modules = conformance.collect_modules(MODULES)
    return ops.cases + modules.cases


def _transparency(cases, device_kind):
    from dmlshim import conformance
    return {(c.op, c.variant, c.dtype, c.index): r for c, r in
            zip(cases, conformance.run_mode(cases, conformance.TRANSPARENCY, device=device_kind))}


def test_opinfo_and_moduleinfo_samples_are_identical_with_dmlshim(cases, device_kind):
    """The OpInfo (float32/float16/int64/bool) and ModuleInfo (float32 forward) samples
    of a representative subset give on the CPU with ``activate()`` exactly what they give
    without it (``make conformance`` runs all of them: docs/transparency.md)."""
    assert {c.op for c in cases} >= {"add", "cat", "nn.LazyConv2d", "nn.LazyConvTranspose1d", "nn.LSTM"}
    results = _transparency(cases, device_kind)
    failed = {k: f"{r.cls}: {r.message}" for k, r in results.items()
              if r.cls not in ("match", "nondeterministic")}
    assert not failed
    assert sum(r.cls == "match" for r in results.values()) >= 0.95 * len(results)


def test_the_transparency_run_finds_what_dmlshim_breaks(cases, monkeypatch, device_kind):
    """Both ways: with the identity tables left alone (the bug this file guards
    against), the lazy modules' samples raise in the transparency run."""
    from dmlshim.patches import _identity
    monkeypatch.setattr(_identity, "alias", lambda original, wrapper: None)
    results = _transparency([c for c in cases if c.op.startswith("nn.Lazy")], device_kind)
    assert results and {r.cls for r in results.values()} == {"error"}
    assert all("uninitialized parameter" in r.message for r in results.values())


def test_a_sparse_island_comes_back_to_the_cpu(dml_device, assert_same):
    """``x.to(dml).to_sparse()``: DirectML has no sparse kernels (failure_modes.md #30),
    so raw it fails; with dmlshim it is a CPU island, whose ``.to("cpu")`` and ``.cpu()``
    raised ``Cannot access storage of SparseTensorImpl`` and now give the plain sparse
    tensor the CPU gives."""
    from dmlshim import islands

    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    dmlshim.deactivate()
    try:                    # the emulator raises (#30); the real 0.2.5 binary, measured,
        raw = x.to(dml_device).to_sparse()      # returns a strided tensor on the device
    except (RuntimeError, NotImplementedError):
        pass
    else:
        assert raw.layout == torch.strided
    dmlshim.activate(trace=0)
    try:
        island = x.to(dml_device).to_sparse()
        assert islands.is_island(island)
        for plain in (island.to("cpu"), island.cpu()):
            assert type(plain) is torch.Tensor and plain.layout == torch.sparse_coo
            assert_same(plain.to_dense(), x)
    finally:
        dmlshim.deactivate()
