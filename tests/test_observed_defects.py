"""Defects seen on the real torch-directml 0.2.5 binary (dmlshim.catalogue, found "real binary"), both ways.

Bilinear and non-integer nearest upsampling give wrong values (failure_modes.md #21, #60);
``nn.PReLU(C)`` on a 4-D input aborts the process (#29); ``Tensor.repeat`` with more than 4
dimensions is refused (#61); views of offset views and split's chunks are copies (#62);
``F.pad`` with nothing to pad returns a tensor never written (#63); a copy from the device into
a CPU tensor rebinds it (#64); an ``out=`` of the wrong size is neither resized nor checked (#65).
On the emulator: with the default
rules each defect shows without dmlshim and the result is within the device profile with
it; with a rule off its probe passes and its fix stays off.  The tests without the marker
run on the real device too (``DMLSHIM_TEST_DEVICE=directml``).
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.emulation import rules
from dmlshim.patches import _resample

CPU = torch.device("cpu")
OBSERVED = [d for d in catalogue.DEFECTS if d.found == catalogue.MEASURED]
DEFECTS = {d.name: d for d in OBSERVED}


def _image(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _grad_of_input(fn, x):
    """``fn(x)`` and the gradient of ``(fn(x) * ramp).sum()`` with respect to ``x``."""
    x = x.clone().requires_grad_()
    y = fn(x)
    y.backward(torch.linspace(-1, 1, y.numel()).view(y.shape).to(y.device))
    return y.detach(), x.grad


def _gfpgan_bilinear(device):
    """GFPGANv1Clean's up and down ResBlocks and StyleGAN2's ToRGB skip (align_corners=False),
    and their backward."""
    x = _image(1, 3, 17, 23).to(device)
    up = _grad_of_input(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False), x)
    down = _grad_of_input(lambda t: F.interpolate(t, scale_factor=0.5, mode="bilinear", align_corners=False), x)
    return (*up, *down, F.interpolate(x, size=(40, 33), mode="bilinear", align_corners=True))


def _nearest_17(device):
    """A 1.7x nearest upsample, by scale and by size, and its backward."""
    x = _image(1, 3, 17, 23).to(device)
    return (*_grad_of_input(lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest"), x),
            F.interpolate(x, size=(28, 39), mode="nearest"))


def _prelu_channels(device):
    """Real-ESRGAN's SRVGGNetCompact activation, PReLU(64) on a 4-D input, and on a 3-D one,
    with the gradients of the input (zeros included) and of the weights."""
    x = _image(2, 64, 5, 6)
    x[0, :, 0] = 0.0
    w = torch.rand(64, generator=torch.Generator().manual_seed(1))
    x, w = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    y = F.prelu(x, w)
    y.backward(torch.linspace(-1, 1, y.numel()).view(y.shape).to(device))
    return y.detach(), x.grad, w.grad, F.prelu(_image(4, 64, 7).to(device), w.detach())


def _repeat_5d(device):
    """FunASR's CTC prefix scorer, ``x.unsqueeze(3).repeat(1, 1, 1, n, 1)`` (inference: its
    backward aborts the real binary, not fixed), a 5-D repeat of a 4-D input, an all-ones
    5-D repeat (a copy, not a view) and a 6-D one (on the CPU: a 6-D cat aborts there)."""
    x = _image(2, 7, 1, 5).to(device)
    once = x.unsqueeze(0).repeat(1, 1, 1, 1, 1)
    assert not once._is_view()
    six = x.repeat(2, 1, 1, 2, 1, 3)
    return (x.unsqueeze(3).repeat(1, 1, 1, 3, 1), x.repeat(2, 1, 3, 1, 2), once,
            six.sum(0).sum(0) if device == CPU else six.cpu().sum(0).sum(0))


def _offset_views(device):
    """Writes through views of offset views: a transposed row, a slice from 0, a column block
    (``x[1:][:, 4:8]``), RealESRGANer's 4-D tile assignment, a reshape, split and chunk; a view
    read after its base changed; SeACo's hotword LSTM's
    ``pad_packed_sequence``; and a gradient through views of views."""
    x = torch.arange(60.0).view(5, 12).to(device)
    x[1:].t()[0].mul_(-1)
    x[1:][0:2].add_(100)
    x[1:][:, 4:8] = torch.full((4, 4), 7.0).to(device)
    x[1:].reshape(-1)[3:5].zero_()
    x.split(2)[1].add_(0.5)
    x.chunk(2, 1)[1][2:].mul_(2)
    later = x[1:].t()
    x.add_(1)
    tiles = torch.zeros(1, 3, 12, 12).to(device)
    for i in range(3):
        tiles[:, :, 4 * i:4 * i + 4, 0:4] = torch.full((1, 3, 4, 4), float(i)).to(device)
    packed = torch.nn.utils.rnn.pack_padded_sequence(_image(3, 4, 2).to(device), [4, 2, 1],
                                                     batch_first=True)
    padded, lengths = torch.nn.utils.rnn.pad_packed_sequence(packed, batch_first=True)
    w = _image(4, 6).to(device).requires_grad_()
    (w[1:].t()[2:] * 3).sum().backward()
    return x, later.clone(), tiles, padded, lengths, w.grad


def _pad_zero(device):
    """Fun-ASR-Nano's adaptor pad with nothing to pad (3-D, six zeros), a 2-D and a transposed
    one, a real pad beside them, and the gradient through a zero pad."""
    x = _image(1, 11, 8).to(device)
    w = _image(3, 4, seed=1).to(device).requires_grad_()
    F.pad(w, (0, 0)).mul(torch.arange(12.0).view(3, 4).to(device)).sum().backward()
    return (F.pad(x, (0, 0, 0, 0, 0, 0), value=0.0), F.pad(x[0], (0, 0)), F.pad(x[0].t(), (0, 0, 0, 0)),
            F.pad(x, (0, 0, 0, 1)), w.grad)


def _copy_to_cpu(device):
    """Device values copied into CPU tensors: a root and an alias of it, slices, a transposed
    view, an int64 destination of a float32 source, and whisper's language token
    (``tokens[:, 1] = lang_tokens``) by assignment."""
    src = torch.arange(1.0, 13.0).view(3, 4).to(device)
    root = torch.zeros(3, 4)
    alias = root.view(12)
    root.copy_(src)
    rows, ints, cols = torch.zeros(5, 4), torch.zeros(3, 4, dtype=torch.int64), torch.zeros(4, 3)
    rows[1:4].copy_(src)
    ints.copy_(src)
    cols.t().copy_(src)
    tokens = torch.tensor([[50258, 50259, 50359]])
    tokens[:, 1] = torch.tensor([50325]).to(device)
    rows[4, 1:3] = src[0, :2]
    return alias, rows, ints, cols, tokens


def _out_resize(device):
    """``out=`` tensors of the wrong size: empty and too large for an element-wise op of a
    permuted input (the CPU gives its layout), a reduction, mm, cat, a factory, masked_select
    (a data-dependent shape: the meta device cannot size it), a (values, indices) pair; and
    whether a float times a bool into a bool ``out=`` is refused."""
    x = _image(3, 4, 2).permute(2, 0, 1).to(device)
    wide = torch.empty(40, device=device)
    outs = [torch.empty(0, device=device) for _ in range(6)]
    values, indices = torch.empty(0, device=device), torch.empty(7, dtype=torch.int64, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                       # "An output ... was resized"
        results = [torch.mul(x, 2, out=outs[0]), torch.exp(x, out=wide), torch.sum(x, 1, out=outs[1]),
                   torch.mm(x[0], x[1].t(), out=outs[2]), torch.cat([x, x], 1, out=outs[3]),
                   torch.arange(5.0, out=outs[4]), torch.masked_select(x, x > 0, out=outs[5])]
        torch.sort(x, 1, out=(values, indices))
    try:
        torch.mul(x, x > 0, out=torch.empty(2, 3, 4, dtype=torch.bool, device=device))
        refused = False
    except RuntimeError:
        refused = True
    assert all(r is o for r, o in zip(results, [outs[0], wide, *outs[1:]]))
    return (*outs, wide, values, indices, torch.tensor([o.stride() for o in (outs[0], wide)]),
            torch.tensor(refused))


REPROS = {"upsample_bilinear": _gfpgan_bilinear, "upsample_nearest": _nearest_17,
          "prelu_channels": _prelu_channels, "repeat_5d": _repeat_5d, "offset_views": _offset_views,
          "pad_zero": _pad_zero, "copy_to_cpu": _copy_to_cpu, "out_resize": _out_resize}
# defect -> the default rules that produce it
RULES = {"upsample_bilinear": lambda r: r.op in ("upsample_bilinear2d", "upsample_bilinear2d_backward"),
         "upsample_nearest": lambda r: r.op in ("upsample_nearest2d", "upsample_nearest2d_backward"),
         "prelu_channels": lambda r: r.op == "_prelu_kernel",
         "repeat_5d": lambda r: r.op == "repeat",
         "offset_views": lambda r: r.source.startswith("failure_modes.md #62;"),
         "pad_zero": lambda r: r.source.startswith("failure_modes.md #63;"),
         "copy_to_cpu": lambda r: r.source.startswith("failure_modes.md #64;"),
         "out_resize": lambda r: r.source.startswith("failure_modes.md #65;")}


# ------------------------------------------------------------ on any device, with the shim

@pytest.mark.parametrize("name", sorted(REPROS))
def test_with_the_shim_equals_cpu(dml_device, shim_off, name, assert_parity):
    """Within the device profile: the fixes compute with other kernels than the CPU's
    (a resampling per axis, relu and clamp_min), rounding differently by an ulp or so."""
    dmlshim.activate(fallback="known")
    assert set(DEFECTS[name].fixes) <= set(patches.installed())
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU), profile="device")


def test_probes_pass_on_the_cpu():
    assert all(not d.probe(CPU).broken for d in OBSERVED if not d.static)


# ------------------------------------------------------------ both ways, on the emulator

@pytest.mark.emulated_only(
    reason="turns the defect's emulator rule on alone (emulation.configure)")
@pytest.mark.parametrize("name", ["upsample_bilinear", "upsample_nearest", "offset_views", "pad_zero",
                                  "copy_to_cpu", "out_resize"])
def test_rule_on_detected_differs_raw_fixed_with_the_shim(dml_device, shim_off, name, assert_parity,
                                                          assert_differs):
    emulation.configure(rules=[r for r in rules.default_rules() if RULES[name](r)])
    verdict = DEFECTS[name].probe(dml_device)
    assert verdict.broken and verdict.figure.startswith(("max |Δ|", "shape"))
    assert_differs(REPROS[name](dml_device), REPROS[name](CPU))         # the defect shows
    dmlshim.activate(fallback="known")
    assert [d for d, s in probing.last().status.items() if s == probing.DETECTED] == [name]
    assert set(DEFECTS[name].fixes) <= set(patches.installed())
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU), profile="device")
    assert DEFECTS[name].probe(dml_device).broken                       # probes see the raw device


def test_offset_views_alias_inside_inference_mode(dml_device, shim_off, assert_parity):
    """Both view fixes on one call: a tile of a normal tensor written inside inference_mode
    (RealESRGANer's loop; #41 and #62 on the real binary)."""
    def tiles(device):
        out = torch.zeros(1, 3, 12, 12).to(device)
        with torch.inference_mode():
            for i in range(3):
                out[:, :, 4 * i:4 * i + 4, 0:4] = torch.full((1, 3, 4, 4), float(i)).to(device)
                out[:, :, 4 * i:4 * i + 4][..., 4:8].add_(i)
        return out
    dmlshim.activate(fallback="known")
    assert {"offset_views", "inference_mode"} <= set(patches.installed())
    assert_parity(tiles(dml_device), tiles(CPU))


def test_offset_views_keep_a_split_geometry_per_shape(dml_device, shim_off, assert_parity):
    """A split's geometry (meta device) is computed once per shape and arguments, and the
    views made from it are each call's own; another shape, or tensor arguments, compute
    again."""
    from dmlshim.patches import offset_views
    offset_views._geometry.cache_clear()
    dmlshim.activate(fallback="known")

    def splits(device, n):
        x = torch.arange(4.0 * n).view(n, 4).to(device)
        return [t * 2 for part in (x.split(2), x[1:].split([1, n - 2])) for t in part]
    for n in (6, 6, 8):
        for got, want in zip(splits(dml_device, n), splits(CPU, n)):
            assert_parity(got, want)
    kept = offset_views._geometry.cache_info()
    assert (kept.misses, kept.currsize) == (4, 4)       # split and split_with_sizes, n = 6 and 8
    offset_views._meta_geometry(torch.ops.aten.split.Tensor, (torch.zeros(4), torch.tensor(2)), {})
    assert offset_views._geometry.cache_info() == kept                # a tensor argument: no key


@pytest.mark.emulated_only(
    reason="turns the defect's emulator rule on alone (emulation.configure)")
def test_repeat_over_four_dims_raises_raw_and_is_fixed(dml_device, shim_off, assert_parity):
    emulation.configure(rules=[r for r in rules.default_rules() if RULES["repeat_5d"](r)])
    verdict = DEFECTS["repeat_5d"].probe(dml_device)
    assert verdict.broken and "must be 4 or lower, but got 5" in verdict.figure
    with pytest.raises(RuntimeError, match="must be 4 or lower, but got 5"):
        _repeat_5d(dml_device)
    dmlshim.activate(fallback="known")
    assert [d for d, s in probing.last().status.items() if s == probing.DETECTED] == ["repeat_5d"]
    assert "repeat" in patches.installed()
    assert_parity(_repeat_5d(dml_device), _repeat_5d(CPU))
    assert DEFECTS["repeat_5d"].probe(dml_device).broken                # probes see the raw device


@pytest.mark.emulated_only(reason="turns the defect's emulator rule off (emulation.configure)")
@pytest.mark.parametrize("name", ["upsample_bilinear", "upsample_nearest", "repeat_5d",
                                  "offset_views", "pad_zero", "copy_to_cpu", "out_resize"])
def test_rule_off_probe_passes_and_no_fix(dml_device, shim_off, name, assert_parity):
    emulation.configure(rules=[r for r in rules.default_rules() if not RULES[name](r)])
    dmlshim.activate(fallback="known")
    assert probing.last().status[name] == probing.NOT_DETECTED
    assert probing.last().verdicts[name] == probing.Verdict(False, "equal")
    assert not set(DEFECTS[name].fixes) & set(patches.installed())
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
def test_prelu_aborts_raw_and_is_static(dml_device, shim_off, assert_parity):
    with pytest.raises(emulation.FatalDirectMLError, match="rank <= DML_TENSOR_DIMENSION_COUNT_MAX"):
        torch.nn.PReLU(8).to(dml_device)(_image(1, 8, 3, 3).to(dml_device))
    with pytest.raises(RuntimeError, match=r"size of tensor a \(8\) must match the size of tensor b \(2\)"):
        torch.nn.PReLU(8).to(dml_device)(_image(2, 8, 3).to(dml_device))
    emulation.configure(rules=[])
    dmlshim.activate(fallback="known")
    assert probing.last().status["prelu_channels"] == probing.STATIC        # never probed
    assert "prelu" in patches.installed()
    assert_parity(REPROS["prelu_channels"](dml_device), REPROS["prelu_channels"](CPU))


@pytest.mark.emulated_only(reason="counts aten::_prelu_kernel calls in emulation.records()")
def test_prelu_fix_keeps_other_calls_on_their_route(dml_device, shim_off, assert_parity):
    """One weight, a 2-D input, bad arguments: aten::prelu's own decomposition and errors."""
    dmlshim.activate(fallback="known")
    emulation.reset_records()
    x = _image(2, 3, 4, 4).to(dml_device)
    assert_parity(F.prelu(x, torch.tensor([0.25]).to(dml_device)), F.prelu(x.cpu(), torch.tensor([0.25])))
    assert emulation.records()["_prelu_kernel"]["reached"] == 1
    dmlshim.trace.reset()
    F.prelu(x, torch.rand(3).to(dml_device))                                # the fix: no kernel call
    assert emulation.records()["_prelu_kernel"]["reached"] == 1
    assert [r["actions"] for r in dmlshim.report().rows if r["op"] == "aten::prelu"] == [{"coerce": 1}]
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        F.prelu(x, torch.rand(5).to(dml_device))


@pytest.mark.parametrize("shape, weight", [((1, 0, 3), ()), ((0, 4, 2, 2), (4,)), ((0, 2), (1,))])
def test_prelu_of_an_empty_input_with_the_shim(dml_device, shim_off, shape, weight, assert_parity):
    """The real binary raises "cannot reshape tensor of 0 elements into shape [1, 0, -1]"
    for an empty input (OpInfo's prelu sample 1; the emulator does not model it): with the
    shim, the CPU's empty result and the weight's (zero) gradient, on the device."""
    dmlshim.activate(fallback="known")
    w_cpu = torch.full(weight, 0.25, requires_grad=True)
    w_dev = w_cpu.detach().to(dml_device).requires_grad_()
    got = F.prelu(torch.zeros(shape, device=dml_device), w_dev)
    ref = F.prelu(torch.zeros(shape), w_cpu)
    got.sum().backward()
    ref.sum().backward()
    assert got.device == dml_device
    assert_parity((got.detach(), w_dev.grad), (ref.detach(), w_cpu.grad))


@pytest.mark.parametrize("overload", ["out", "empty out", "channels_last", "uint8", "float16"])
def test_upsample_fix_forms(dml_device, shim_off, overload, assert_parity, assert_same):
    """``out=`` (of the result's size, and empty: grown, which the real binary does not do in
    place), a channels-last input, uint8 images (nearest) and float16 (bilinear)."""
    dmlshim.activate(fallback="known")
    x = _image(1, 3, 17, 23)
    aten = torch.ops.aten
    if overload in ("out", "empty out"):
        sizes = {"out": ((1, 3, 28, 39), (1, 3, 34, 46)), "empty out": ((0,), (0,))}[overload]
        out = torch.empty(sizes[0]).to(dml_device)
        got = aten.upsample_nearest2d.out(x.to(dml_device), [28, 39], 1.7, 1.7, out=out)
        assert got is out
        assert_same(out, aten.upsample_nearest2d(x, [28, 39], 1.7, 1.7))        # pixels moved
        out = torch.empty(sizes[1]).to(dml_device)
        aten.upsample_bilinear2d.out(x.to(dml_device), [34, 46], False, None, None, out=out)
        assert_parity(out, aten.upsample_bilinear2d(x, [34, 46], False, None, None), profile="device")
    elif overload == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        assert_parity(F.interpolate(x.to(dml_device), scale_factor=2, mode="bilinear"),
                      F.interpolate(x, scale_factor=2, mode="bilinear"), profile="device")
    elif overload == "uint8":
        x = (x * 40 + 128).clamp(0, 255).to(torch.uint8)
        assert_same(F.interpolate(x.to(dml_device), scale_factor=1.7, mode="nearest"),
                    F.interpolate(x, scale_factor=1.7, mode="nearest"))
    else:
        x = x.half()
        assert_parity(F.interpolate(x.to(dml_device), scale_factor=2, mode="bilinear"),
                      F.interpolate(x, scale_factor=2, mode="bilinear"), profile="device")


def test_tables_follow_pytorch(assert_same, assert_parity):
    """The fix's tables: nearest indices from the CPU kernel (its special cases included),
    bilinear source coordinates as ATen's, within float32 rounding."""
    for in_size, out_size, scale in [(17, 28, 1.7), (17, 28, None), (4, 4, 1.3), (5, 10, 2.0), (8, 3, None)]:
        want = torch.ops.aten.upsample_nearest2d(torch.arange(float(in_size)).view(1, 1, 1, -1),
                                                 [1, out_size], None, scale).view(-1).long()
        assert_same(_resample.torch_nearest_index(in_size, out_size, scale), want)
    ramp = torch.arange(17.0).view(1, 1, 1, 17)
    for align_corners, scale in [(False, 1.7), (False, None), (True, None)]:
        table = _resample.table(CPU, "linear", 17, 28, align_corners, scale)
        got = _resample.resample(ramp, -1, table).view(-1)
        want = torch.ops.aten.upsample_bilinear2d(ramp, [1, 28], align_corners, None, scale).view(-1)
        assert_parity(got, want, profile="device")           # CPU tables, other kernels


def test_scatter_family_in_place_and_functional_with_the_shim(dml_device, shim_off, assert_same):
    """gather/scatter/scatter_add, functional and in place, dims 1 and -1 (#43), into a view
    too: the CPU's values.  On the real binary a Python kernel at scatter_add_'s BackendSelect
    key made DirectML's in-place scatter_add_ leave ``self`` zero; the gather patch computes it
    as scatter_add + copy_."""
    def cases(d):
        index, ones = torch.tensor([[0, 1], [1, 0]]).to(d), torch.ones(2, 2).to(d)
        out = []
        for dim in (1, -1):
            z = torch.zeros(2, 3).to(d)
            z.scatter_add_(dim, index, ones)
            s = torch.zeros(2, 3).to(d)
            s.scatter_(dim, index, ones * 3)
            out += [z, s, torch.zeros(2, 3).to(d).scatter_add(dim, index, ones),
                    torch.arange(6.0).view(2, 3).to(d).gather(dim, index)]
        base = torch.zeros(2, 3).to(d)
        base[:, 1:].scatter_add_(1, index, ones)
        return out + [base]
    dmlshim.activate(fallback="known")
    for got, want in zip(cases(dml_device), cases(CPU)):
        assert_same(got, want)
