"""Silent wrong values and refusals measured on the real torch-directml 0.2.5 binary with
OpInfo's samples, both ways: ``adaptive_avg_pool`` off DirectML's window grid
(patches/adaptive_pool.py), ``masked_select`` with an input that broadcasts to the mask
(patches/masked_select.py), negative padding (patches/pad_negative.py), ``torch.combinations``
(patches/combinations.py), integer division and powers of operands of different ranks
(patches/int_broadcast.py), ``max()``/``min()`` of bool tensors (patches/bool_minmax.py).

Each repro calls the op through a reference bound before ``activate()``, as OpInfo does,
and through the composites that reach it (``F.interpolate(mode="area")``, ``F.pad``).
Without dmlshim the emulator's rule (``emulation/rules_refused.py``) gives the real
binary's answer; with it the result equals the CPU's.  The tests without the marker run on
the real device too (``DMLSHIM_TEST_DEVICE=directml``).
"""
import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.emulation import rules, rules_refused
from dmlshim.laws import broadcast
from dmlshim.laws.pooling import dml_windows_agree
from dmlshim.patches.pad_negative import crop

CPU = torch.device("cpu")
OBSERVED = [d for d in catalogue.DEFECTS if d.found == catalogue.MEASURED]
DEFECTS = {d.name: d for d in OBSERVED}
_adaptive_avg_pool1d, _adaptive_avg_pool2d, _torch_masked_select = (
    F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, torch.masked_select)
_conv_transpose1d, _conv_transpose2d, _softplus, _avg_pool1d = (
    F.conv_transpose1d, F.conv_transpose2d, F.softplus, F.avg_pool1d)


def _ramp(*shape):
    return (torch.arange(float(torch.Size(shape).numel())) ** 2 % 17).view(shape)


def _adaptive_pool(d):
    """Off the grid (8 -> 3, 6 -> 4, an upsampling 3 -> 5, area 6x6 -> 4x3) and on it (7 -> 3,
    8 -> 4), float32 and float16."""
    line, image = _ramp(2, 3, 8).to(d), _ramp(1, 2, 6, 6).to(d)
    return (_adaptive_avg_pool1d(line, 3), _adaptive_avg_pool1d(line[..., :6], 4),
            _adaptive_avg_pool1d(line[..., :3], 5), _adaptive_avg_pool1d(line[..., :7], 3),
            _adaptive_avg_pool1d(line, 4), _adaptive_avg_pool2d(image, (4, 3)),
            F.interpolate(image, size=(4, 3), mode="area"), _adaptive_avg_pool1d(line.half(), 3))


def _masked_select(d):
    """Inputs that broadcast to the mask (a row, a column, 0-dim, more dims) and a mask that
    broadcasts to the input."""
    mask = torch.tensor([[True, False, True], [False, True, True]]).to(d)
    return (_torch_masked_select(torch.arange(3.0).to(d), mask), _torch_masked_select(torch.tensor(7.0).to(d), mask),
            _torch_masked_select(_ramp(2, 1).to(d), mask[:1]), _torch_masked_select(_ramp(4, 1, 3).to(d), mask),
            _torch_masked_select(_ramp(2, 3).to(d), mask[1]))


def _pad_negative(d):
    """Replicate pads with a negative begin (1-D, 2-D), a negative end, and a constant pad of
    mixed signs."""
    line, image = _ramp(1, 2, 6).to(d), _ramp(1, 2, 5, 6).to(d)
    return (F.pad(line, (-1, 1), mode="replicate"), F.pad(line, (-2, -1), mode="replicate"),
            F.pad(image, (0, 0, -1, 2), mode="replicate"), F.pad(image, (-1, 0, -1, 0), mode="replicate"),
            F.pad(line, (2, -1), mode="replicate"), F.pad(line, (-1, 2), value=3.0),
            F.pad(image[:, :, :4, :4], (-4, 5, 0, 0), mode="replicate"),       # OpInfo's: a crop past
            F.pad(image[:, :, :4, :4], (5, -4, -4, 3), mode="replicate"),      # the whole input
            F.pad(image, (1, -2, -1, 0)))


def _combinations(d):
    """Pairs, with replacement, ``r > n``, one element, ``r = 0``, and the gradient."""
    x = torch.arange(1.0, 5.0).to(d).requires_grad_()
    pairs = torch.combinations(x, 2)
    pairs.backward(torch.linspace(-1, 1, pairs.numel()).view(pairs.shape).to(d))
    one = torch.tensor([5.0]).to(d)
    return (pairs.detach(), x.grad, torch.combinations(x.detach()[:3], 2, with_replacement=True),
            torch.combinations(x.detach()[:3], 4), torch.combinations(one, 1), torch.combinations(one, 0),
            torch.combinations(torch.arange(4).to(d), 3))


def _int_broadcast(d):
    """OpInfo's (5, 1) by (5,) int64 operands through each op, a row under a matrix, in place;
    and what stays on the device's own route: a 0-dim divisor, equal ranks."""
    a, b = (torch.arange(-8, 2, 2).view(5, 1)).to(d), torch.tensor([-8, -3, 1, 4, 7]).to(d)
    m, row = (torch.arange(1, 7) * 10).view(2, 3).to(d), torch.tensor([1, 2, 3]).to(d)
    inplace = m.clone()
    inplace.floor_divide_(row)
    return (torch.div(a, b), torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
            torch.true_divide(a, b), torch.remainder(a, b), torch.floor_divide(m, row),
            torch.pow(a.abs(), row[:2].view(1, 2)[0]), inplace, m // 3, torch.floor_divide(m, row.view(1, 3)),
            torch.atan2(a, b), torch.atan2(torch.tensor([[True], [False]]).to(d), torch.tensor([True, False]).to(d)),
            _mixed_dtypes(d))


def _mixed_dtypes(d):
    """Operands of different dtypes and ranks: float with int64, float16 and bool, int64 with
    int32, in place, and ``__rdiv__``'s ``reciprocal(int64) * int64``."""
    f, i = _ramp(5, 1).to(d) - 4, torch.tensor([-8, -3, 1, 4, 7]).to(d)
    inplace = _ramp(5, 5).to(d)
    inplace.add_(i)
    return (f + i, i - f, f * i, i * f, torch.maximum(f, i), f < i, f >= i, f * i.half(), f + (i > 0),
            f.long() * i.int(), inplace, 7 / i.view(5, 1) * i)


def _bool_minmax(d):
    """max()/min() of a 3-D mask and of 0-dim ones; max(dim) and an int tensor stay as they are."""
    mask = (_ramp(3, 4, 5) > 8).to(d)
    return (mask.max(), mask.min(), torch.tensor(True).to(d).max(), torch.tensor(False).to(d).min(),
            mask.max(dim=1).values, _ramp(3, 4).long().to(d).max())


def _var_correction(d):
    """var()/std_mean() with no dim or correction, dim=[], keepdim, float16, a 0-dim input; with a
    dim and a correction (the device's own route)."""
    x = (_ramp(5, 5, 5) - 8).to(d)
    return (x.var(), torch.std_mean(x), torch.var(x, dim=[], correction=1), torch.var(x, keepdim=True),
            x.half().var(), torch.var(x, dim=1, correction=2), torch.std_mean(x, dim=(0, 2)),
            torch.var(x, unbiased=False), torch.tensor(3.0).to(d).var(correction=0))


def _dropout_backward(d):
    """dropout's gradient of float32, float16 and int64 gradients (OpInfo's dtypes), scale 1 and
    2, and through autograd: dropout with p=0 in training mode keeps every value."""
    grad, mask = (_ramp(3, 4, 5) - 8).to(d), (_ramp(3, 4, 5) > 6).to(d)
    x = _ramp(2, 3).to(d).requires_grad_()
    F.dropout(x, 0.0, training=True).mul(_ramp(2, 3).to(d)).sum().backward()
    return tuple(torch.ops.aten.native_dropout_backward(g, mask, s) for g in (grad, grad.half(), grad.long())
                 for s in (1.0, 2.0)) + (x.grad,)


def _int_addmm(d):
    """OpInfo's int64 addmm/baddbmm with alpha 0.6, beta 0.2; 1.5 and 2.5; negative; in place;
    integral scalars and float tensors (the device's own route)."""
    a, m1, m2 = (_ramp(3, 4) - 8).long().to(d), (_ramp(3, 5) - 8).long().to(d), (_ramp(5, 4) - 8).long().to(d)
    inplace = a.clone()
    inplace.addmm_(m1, m2, alpha=1.5, beta=2.5)
    return (torch.addmm(a, m1, m2, alpha=0.6, beta=0.2), torch.addmm(a, m1, m2, alpha=-1.5),
            torch.baddbmm(a[None], m1[None], m2[None], beta=0.2, alpha=0.6), inplace,
            torch.addmm(a, m1, m2, alpha=2, beta=3), torch.addmm(a.float(), m1.float(), m2.float(), alpha=0.6))


def _vector_norm(d):
    """OpInfo's F.normalize with p 0.5, 3, -1; vector_norm, norm and the input after them (ord 3,
    inf, -1.5), out=, autograd; float16 dist(p=4) past 65504, dtype=float32; keepdim over every
    dimension; ord 1, 2 and 0 (the device's own route)."""
    x, y = (_ramp(2, 3, 4) - 8).to(d), (_ramp(2, 3, 4).flip(0) - 8).to(d)
    normalized = tuple(F.normalize(x, p=p, dim=dim) for p, dim in ((0.5, 0), (3.0, 1), (-1.0, 2)))
    after = x.clone()
    norms = (torch.linalg.vector_norm(after, 3, 1), torch.norm(after, float("inf"), 2), torch.norm(after, -1.5), after)
    out = torch.empty(0).to(d)
    torch.linalg.vector_norm(x, 3.0, (0, 2), out=out)
    grad = x.clone().requires_grad_()
    torch.linalg.vector_norm(grad, 3, 1).sum().backward()
    half = (x.half(), y.half())
    return (normalized, norms, out, grad.grad, torch.dist(*half, 4), torch.dist(*half, 3),
            torch.linalg.vector_norm(half[0], 3, dtype=torch.float32), torch.linalg.vector_norm(half[0], 2.5, 2),
            torch.linalg.vector_norm(x, 2, keepdim=True), torch.linalg.vector_norm(x, 3, [], keepdim=True),
            torch.linalg.vector_norm(x, 1, 1), torch.linalg.vector_norm(x, 0, 1), F.normalize(x, dim=1), x)


def _cdist(d):
    """OpInfo's 2-D cdist with p 0 and others (a [3, 5] result for [3, 3]), pairs of other
    sizes, a 2-D with a 3-D input, 4-D inputs, an empty one, out=, autograd; 3-D (the device's
    own route)."""
    a, b, c = _ramp(3, 5).to(d), (_ramp(3, 5).flip(0) - 4).to(d), _ramp(4, 5).to(d)
    grad = a.clone().requires_grad_()
    torch.cdist(grad, c, p=1).sum().backward()
    out = torch.empty(0).to(d)
    torch.ops.aten._cdist_forward.out(a, c, 3.0, None, out=out)
    return (tuple(torch.cdist(a, b, p=p) for p in (0.0, 1.0, 3.0, float("inf"))), torch.cdist(a, c, p=1),
            torch.cdist(a[:1], c, p=0.5), torch.cdist(a, c.expand(2, 4, 5), p=1),
            torch.cdist(a.view(1, 3, 1, 5).expand(2, 3, 2, 5), c.view(1, 1, 4, 5), p=1),
            torch.cdist(a[:0], c, p=1), torch.cdist(a, b, p=2, compute_mode="donot_use_mm_for_euclid_dist"),
            out, grad.grad, torch.cdist(a[None], b[None], p=1))


def _conv_transpose_padding(d):
    """OpInfo's stride 2, padding 2, output_padding 1 (batched, unbatched), an output_padding past
    the padding, no bias, 2-D; the gradients through autograd; no output_padding (the device's own
    route)."""
    x, w, b = (_ramp(2, 3, 4) / 8 - 1).to(d), (_ramp(3, 2, 3) / 8 - 1).to(d), torch.tensor([0.5, -1.0]).to(d)
    image, kernel = (_ramp(1, 3, 4, 5) / 8 - 1).to(d), (_ramp(3, 2, 3, 2) / 8 - 1).to(d)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    _conv_transpose1d(*leaves, stride=2, padding=1, output_padding=1).mul(_ramp(2, 2, 8).to(d)).sum().backward()
    return (_conv_transpose1d(x, w, b, stride=2, padding=2, output_padding=1),
            _conv_transpose1d(x[0], w, b, stride=2, padding=2, output_padding=1),
            _conv_transpose1d(x, w, None, stride=3, output_padding=2),
            _conv_transpose2d(image, kernel, b, stride=(2, 3), padding=(2, 0), output_padding=(1, 2)),
            *(leaf.grad for leaf in leaves), _conv_transpose1d(x, w, b, stride=2))


def _batch_norm_stats(d):
    """native_batch_norm's outputs in eval mode, of one channel in training, without running
    statistics; F.batch_norm's gradients of one channel (training, eval)."""
    x, x1, aten = (_ramp(3, 2, 4) / 8).to(d), (_ramp(3, 1, 4) / 8).to(d), torch.ops.aten

    def stats(c):
        return torch.linspace(-1, 1, c).to(d), torch.linspace(0.5, 2, c).to(d)
    grads = []
    for training in (True, False):
        leaves = [t.clone().requires_grad_() for t in (x1, torch.full((1,), 2.0).to(d), torch.zeros(1).to(d))]
        F.batch_norm(leaves[0], *stats(1), *leaves[1:], training=training).mul(_ramp(3, 1, 4).to(d)).sum().backward()
        grads += [leaf.grad for leaf in leaves]
    return (*aten.native_batch_norm(x, None, None, *stats(2), False, -1.2, 1e-5),
            *aten.native_batch_norm(x1, None, None, *stats(1), True, 0.0, 1e-5),
            *aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5), *grads)


def _softplus_beta(d):
    """OpInfo's beta=3, threshold=0.2; beta below 1; float16; the gradients past the threshold
    (beta 3, and 1); beta 1 (the device's own forward)."""
    x = torch.linspace(-3, 3, 25).to(d)
    leaves = [x.clone().requires_grad_() for _ in range(2)]
    _softplus(leaves[0], beta=3, threshold=0.2).mul(_ramp(25).to(d)).sum().backward()
    _softplus(leaves[1], threshold=2).mul(_ramp(25).to(d)).sum().backward()
    return (_softplus(x, beta=3, threshold=0.2), _softplus(x, beta=0.5, threshold=1),
            _softplus(x.half(), beta=3, threshold=0.2), _softplus(x, beta=2), F.softplus(x),
            leaves[0].grad, leaves[1].grad)


def _avg_pool_ceil(d):
    """OpInfo's kernel 6, stride 3, padding 2 of 9 values with ceil_mode; no padding; 2-D; float16;
    the gradient; count_include_pad=False and no ceil_mode (the device's own route)."""
    line, image = _ramp(1, 3, 9).to(d), _ramp(2, 2, 7, 8).to(d)
    leaf = line.clone().requires_grad_()
    _avg_pool1d(leaf, 6, 3, 2, ceil_mode=True).mul(_ramp(1, 3, 4).to(d)).sum().backward()
    return (_avg_pool1d(line, 6, 3, 2, ceil_mode=True), _avg_pool1d(line[..., :8], 3, 2, 0, ceil_mode=True),
            F.avg_pool2d(image, 3, 2, 1, ceil_mode=True), F.avg_pool2d(image, (3, 2), (3, 2), (1, 0), ceil_mode=True),
            _avg_pool1d(line.half(), 3, 3, 1, ceil_mode=True), leaf.grad,
            _avg_pool1d(line, 6, 3, 2, ceil_mode=True, count_include_pad=False), _avg_pool1d(line, 3, 2, 1))


def _empty_unary(d):
    """OpInfo's empty (1, 0, 3) samples: log2/log10 of float16, sinc of int64 and bool, square
    (pow) of int64 and bool, bitwise_not of bool; the other pow overloads, in place, out=;
    non-empty inputs (the device's own route)."""
    e = torch.empty(1, 0, 3)
    half, long, flag = e.half().to(d), e.long().to(d), e.bool().to(d)
    in_place = half.clone()
    returned = in_place.log2_()
    out = torch.empty(0, dtype=torch.float16).to(d)
    torch.log10(half, out=out)
    return (torch.log2(half), torch.log10(half), torch.sinc(long), torch.sinc(flag), torch.square(long),
            torch.square(flag), torch.bitwise_not(flag), torch.bitwise_not(flag[0]), torch.pow(long, 3),
            torch.pow(2, long), torch.pow(long, long), returned, in_place, out,
            torch.log2(_ramp(2, 3).half().to(d) + 1), torch.square(_ramp(2, 3).long().to(d)),
            torch.bitwise_not(_ramp(2, 3).to(d) > 4))


def _bool_exp2(d):
    """OpInfo's exp2 and ldexp of bool (and 2.4.1's ldexp of a float by a bool exponent, its
    composite, with its gradient: 2.13's CPU refuses it), pow of a number to a bool exponent,
    out=; exp2 of int64 and float (the device's own route)."""
    flags = (_ramp(4, 5) > 6).to(d)
    x = (_ramp(4, 5) - 8).to(d).requires_grad_()
    ldexp = x * torch.pow(2.0, flags)
    ldexp.sum().backward()
    out = torch.empty(4, 5).to(d)            # sized: the real binary's out= kernels grow no empty out
    torch.exp2(flags, out=out)
    return (torch.exp2(flags), torch.ldexp(flags, flags[0]), torch.ldexp(flags[:, :1], flags[0]), ldexp.detach(),
            x.grad, torch.pow(2, flags), torch.pow(2.5, flags), 2 ** flags, out, torch.exp2(_ramp(4, 5).long().to(d)),
            torch.exp2(_ramp(4, 5).to(d) / 4))


def _int_pow_zero(d):
    """OpInfo's __rpow__ of int64 (a 0-dim zero base), pow of a zero tensor base and of the number 0
    to negative exponents, in place, of different ranks, int32; other bases and float (the
    device's own route)."""
    base, exponent = (_ramp(5) % 3 - 1).long().to(d), (_ramp(5) - 8).long().to(d)
    zero = torch.tensor(0).to(d)
    in_place = base.clone()
    in_place.pow_(exponent)
    return (exponent.__rpow__(zero), torch.pow(base, exponent), torch.pow(0, exponent), in_place,
            torch.pow(base[:, None], exponent), torch.pow(base.int(), exponent.int()),
            torch.pow(base + 2, exponent.abs()), torch.pow(base.float(), exponent))


def _linspace_int(d):
    """OpInfo's int64 and bool (Scalar and tensor overloads) linspace; int32, uint8, int8 ramps,
    out=; float32 (the device's own route)."""
    out = torch.empty(0, dtype=torch.int64).to(d)
    torch.linspace(3, -7, 9, out=out)
    return (torch.linspace(-2.0, -3, 50, dtype=torch.int64, device=d), torch.linspace(0, 10, 7, dtype=torch.int64, device=d),
            torch.linspace(-2.0, -3, 1, dtype=torch.bool, device=d),
            torch.linspace(torch.tensor(-2.0).to(d), torch.tensor(-3).to(d), 1, dtype=torch.bool, device=d),
            torch.linspace(-5, 6, 11, dtype=torch.int32, device=d), torch.linspace(0, 255, 7, dtype=torch.uint8, device=d),
            torch.linspace(1, 3, 4, dtype=torch.int8, device=d), out, torch.linspace(-3, 7, 9, device=d))


def _unique_bytes(d):
    """OpInfo's unique of a 0-dim bool (sorted=False); bool, uint8 and int8 with zeros; a 2-D
    input (its abort on the real binary); int64 (the device's own route)."""
    flags, small = (_ramp(7) > 6).to(d), (_ramp(7) % 3).to(torch.uint8).to(d)
    return (torch.unique(torch.tensor(False).to(d), sorted=False), torch.unique(torch.tensor(True).to(d)),
            torch.unique(flags), torch.unique(flags, sorted=False), torch.unique(small), torch.unique(small.to(torch.int8)),
            torch.unique(small.view(1, 7)), torch.unique(_ramp(2, 3).to(d)), torch.unique(_ramp(7).long().to(d)))


def _batched_tril_triu(d):
    """3-D and 4-D inputs wider than tall (-inf above a causal mask's diagonal), k inside and
    outside the matrix, 5-D (refused raw), in place, out=, bool and int64, the gradient; a 2-D
    one (the device's own route)."""
    x, wide = _ramp(2, 3, 4).to(d), _ramp(1, 2, 3, 5).to(d)
    causal = torch.full((2, 4, 4), float("-inf")).to(d)
    in_place, out = wide.clone(), torch.empty(0).to(d)
    in_place.tril_(1)
    torch.triu(x, -1, out=out)
    w = _ramp(2, 3, 4).to(d).requires_grad_()
    w.tril().mul(_ramp(2, 3, 4).to(d) + 1).sum().backward()
    return (x.triu(), x.tril(), wide.triu(2), wide.tril(-1), x.triu(7), x.tril(-5), causal.triu(1),
            _ramp(1, 1, 2, 3, 4).to(d).triu(), in_place, out, (x > 20).tril(), x.long().triu(1),
            w.grad, x[0].triu(1))


def _scatter_repeated(d):
    """Repeated indices along dim 0, 1 and -1 (1-D to 3-D), in place, out=, int64, an index
    longer than self along dim, a source larger than the index, scatter(reduce="add"/"multiply")
    of a tensor and of a number, the gradients; an index without repeats."""
    index = (_ramp(4, 5) % 3).long().to(d)
    base, src = _ramp(3, 5).to(d), (_ramp(6, 5) - 4).to(d)
    in_place, out = base.clone(), torch.empty(0).to(d)
    in_place.scatter_add_(0, index, src)
    torch.scatter_add(base, 0, index, src, out=out)
    s = src[:4].clone().requires_grad_()
    base.clone().requires_grad_().scatter_add(0, index, s).mul(base + 1).sum().backward()
    cube = (_ramp(2, 3, 7) % 4).long().to(d)
    return (base.scatter_add(0, index, src), base.t().scatter_add(1, index.t()[:, :2], src.t()[:, :2]),
            _ramp(2, 3, 4).to(d).scatter_add(-1, cube, _ramp(2, 3, 7).to(d)), in_place, out,
            base.long().scatter_add(0, index, src.long()),
            base.scatter(0, index, src[:4], reduce="add"), base.scatter(0, index, src[:4], reduce="multiply"),
            base.scatter(0, index, 2.5, reduce="add"), s.grad,
            torch.zeros(5).to(d).scatter_add(0, torch.tensor([4, 0, 2]).to(d), _ramp(3).to(d)))


BIG = [2 ** 40 + 5, -(2 ** 35) + 7, 3, 2 ** 31, -(2 ** 31) - 1]       # past 32 bits
MID = [2 ** 24 + 1, -(2 ** 24) - 3, 3, 5, -7]                       # past float32's 24 bits


def _int_range(d):
    """int64 past 32 and 24 bits through each law's ops (with a number, neg, pow, // and %, mm;
    clone, a transposed copy, copy_, sub, maximum, clamp, sort, topk, comparisons), in place,
    int32 and uint8 results that overflow; values within 2**24 (the device's own route)."""
    big, mid = torch.tensor(BIG).to(d), torch.tensor(MID).to(d)
    in_place, copied = mid.clone(), torch.zeros(5, dtype=torch.int64).to(d)
    in_place.mul_(3).add_(1)
    copied.copy_(big)
    small = torch.arange(-3, 4).to(d)
    return (big + 1, mid + 1, big - 1, 1 - mid, big * 2, mid * 2, mid * 2 ** 33, -big, -mid, big ** 2,
            torch.tensor([3]).to(d) ** 30, big // 3, mid // 3, big % 1000, mid % 7, torch.arange(-50, 50).to(d) // 7,
            mid.view(5, 1) @ torch.ones(1, 2, dtype=torch.int64).to(d), big.clone(),
            torch.stack([big, big.flip(0)]).t().contiguous(), copied, big - torch.ones(5, dtype=torch.int64).to(d),
            torch.maximum(big, torch.zeros(5, dtype=torch.int64).to(d)), big.clamp(-4, 4), big.clamp_min(0),
            big.sort(), big.topk(2), big > 2 ** 31 - 1, big.unique(), in_place,
            torch.tensor([2 ** 30, 7], dtype=torch.int32).to(d) * 4, torch.tensor([200, 7], dtype=torch.uint8).to(d) * 2,
            small + 1, small * 5, -small, small ** 2, small // small.abs().clamp_min(1), small.clone())


def _arange_float32(d):
    """Lengths from float32 (2**24 + 5 values, past 2**31, fractional steps), an int64 ``out=``
    grown from empty, a float ``out=`` view, and ranges the device computes right."""
    out, view = torch.empty(0, dtype=torch.int64).to(d), torch.zeros(7).to(d)
    torch.arange(2 ** 33, 2 ** 33 + 3, out=out)
    torch.arange(0, 10, 3, out=view[2:6])
    return (torch.arange(2 ** 24, 2 ** 24 + 5, device=d), torch.arange(2 ** 31 - 2, 2 ** 31 + 3, device=d),
            torch.arange(2 ** 31 + 10, 2 ** 31, -3, device=d), torch.arange(14.7, 19.7, 0.05, device=d),
            torch.arange(-31.208, -28.408, 0.7, device=d), torch.arange(2 ** 24 + 1, 2 ** 24 + 9, 2.0, device=d),
            out, view, torch.arange(10, device=d), torch.arange(5, -3, -1, device=d), torch.arange(0, 1, 0.125, device=d))


REPROS = {"adaptive_pool": _adaptive_pool, "masked_select_broadcast": _masked_select,
          "pad_negative": _pad_negative, "combinations": _combinations, "int_broadcast": _int_broadcast,
          "bool_minmax": _bool_minmax, "var_correction": _var_correction,
          "conv_transpose_padding": _conv_transpose_padding, "batch_norm_stats": _batch_norm_stats,
          "softplus_beta": _softplus_beta, "avg_pool_ceil": _avg_pool_ceil,
          "dropout_backward": _dropout_backward, "int_addmm": _int_addmm, "vector_norm": _vector_norm, "cdist": _cdist,
          "empty_unary": _empty_unary, "bool_exp2": _bool_exp2, "int_pow_zero": _int_pow_zero,
          "linspace_int": _linspace_int, "unique_bytes": _unique_bytes, "batched_tril_triu": _batched_tril_triu,
          "scatter_repeated": _scatter_repeated, "int_range": _int_range, "arange_float32": _arange_float32}
PATCH = {"adaptive_pool": "adaptive_pool", "masked_select_broadcast": "masked_select",
         "pad_negative": "pad_negative", "combinations": "combinations", "int_broadcast": "int_broadcast",
         "bool_minmax": "bool_minmax", "var_correction": "var_correction",
         "conv_transpose_padding": "conv_transpose_padding", "batch_norm_stats": "batch_norm_stats",
         "softplus_beta": "softplus_beta", "avg_pool_ceil": "avg_pool_ceil",
         "dropout_backward": "dropout_backward", "int_addmm": "int_addmm", "vector_norm": "vector_norm", "cdist": "cdist",
         "empty_unary": "empty_unary", "bool_exp2": "bool_exp2", "int_pow_zero": "int_pow_zero",
         "linspace_int": "linspace_int", "unique_bytes": "unique_bytes", "batched_tril_triu": "batched_tril_triu",
         "scatter_repeated": "scatter_repeated", "int_range": "int_range", "arange_float32": "arange_float32"}
RULE_OPS = {"adaptive_pool": ("_adaptive_avg_pool2d",), "masked_select_broadcast": ("masked_select",),
            "pad_negative": (("replication_pad1d", "replication_pad2d"), "constant_pad_nd"),
            "combinations": ("combinations",),
            "int_broadcast": tuple(op.name().split("::", 1)[1] for op in broadcast.OPS),
            "bool_minmax": ("max", "min"), "var_correction": ("var.correction", "std_mean.correction"),
            "dropout_backward": ("native_dropout_backward",),
            "conv_transpose_padding": ("convolution_overrideable", "convolution_backward_overrideable"),
            "batch_norm_stats": ("native_batch_norm", "native_batch_norm_backward"),
            "softplus_beta": ("softplus", "softplus_backward"), "avg_pool_ceil": ("avg_pool2d",),
            "int_addmm": ("addmm", "addmm_", "baddbmm", "baddbmm_"),
            "vector_norm": (("linalg_vector_norm", "norm.ScalarOpt_dim", "norm.out"),), "cdist": ("_cdist_forward",),
            "empty_unary": ("log2", "log10", "sinc", "bitwise_not", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
                            "pow.Scalar"),
            "bool_exp2": ("exp2", "pow.Scalar"), "int_pow_zero": ("pow.Tensor_Tensor", "pow.Scalar"),
            "linspace_int": ("linspace.out",), "unique_bytes": ("_unique2",),
            "batched_tril_triu": (("triu", "tril", "triu_", "tril_"),), "scatter_repeated": (rules_refused.SCATTER_ADDS,),
            "int_range": (rules_refused._int_range_ops(), "copy_"), "arange_float32": ("arange.start_out",)}


# the defects whose ops other defects' rules watch too (conv_refused's, avg_pool_refused's)
RULE_TEXT = {"conv_transpose_padding": "output_padding", "avg_pool_ceil": "last window",
             # pow's rules: int_broadcast's, empty_unary's, bool_exp2's, int_pow_zero's
             "int_broadcast": "different ranks", "empty_unary": "of an empty input", "bool_exp2": "gives ones",
             "int_pow_zero": "int32 maximum", "int_range": "32 bits",
             # constant_pad_nd's: pad_negative's and pad_value's (test_conformance_all.py)
             "pad_negative": "pad with"}


def _rules_of(name):
    return [r for r in rules.observed_rules() if r.op in RULE_OPS[name]
            and r.source.startswith("measured on the real torch-directml 0.2.5 binary")
            and "empty batch" not in r.source and RULE_TEXT.get(name, "") in r.source]


@pytest.mark.parametrize("name", sorted(REPROS))
def test_with_the_shim_equals_cpu(dml_device, shim_off, name, assert_parity):
    dmlshim.activate(fallback="known")
    assert probing.last().status[name] == probing.DETECTED
    assert PATCH[name] in patches.installed()
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


def test_probes_pass_on_the_cpu():
    assert not any(DEFECTS[n].probe(CPU).broken for n in REPROS)


@pytest.mark.emulated_only(reason="injects the rules of one defect with emulation.configure()")
@pytest.mark.parametrize("name", sorted(REPROS))
def test_rule_on_differs_raw_and_is_fixed(dml_device, shim_off, name, assert_parity, assert_differs):
    emulation.configure(rules=_rules_of(name))
    assert DEFECTS[name].probe(dml_device).broken
    probe_case = DEFECTS[name].probe.case                    # the probe's case
    if name == "combinations":
        with pytest.raises(RuntimeError, match="must match the size of tensor b"):
            probe_case(dml_device)
    else:
        assert_differs(probe_case(dml_device), probe_case(CPU))          # silent
    dmlshim.activate(fallback="known")
    assert [d for d, s in probing.last().status.items() if s == probing.DETECTED] == [name]
    assert PATCH[name] in patches.installed()
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


@pytest.mark.emulated_only(reason="removes one defect's rules with emulation.configure()")
@pytest.mark.parametrize("name", sorted(REPROS))
def test_rule_off_probe_passes_and_no_fix(dml_device, shim_off, name, assert_parity):
    emulation.configure(rules=[r for r in rules.default_rules() if r not in _rules_of(name)])
    dmlshim.activate(fallback="known")
    assert probing.last().status[name] == probing.NOT_DETECTED
    assert PATCH[name] not in patches.installed()
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


@pytest.mark.emulated_only(reason="injects the constant_pad_nd rule with emulation.configure()")
def test_mixed_sign_constant_pad_is_refused_raw(dml_device, shim_off):
    emulation.configure(rules=_rules_of("pad_negative"))
    with pytest.raises(RuntimeError, match="mix of positive and negative padding"):
        F.pad(_ramp(1, 2, 6).to(dml_device), (-1, 2))


def test_calls_on_the_grid_stay_on_the_device(dml_device, shim_off, host_reads, assert_parity):
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    x = _ramp(1, 2, 8).to(dml_device)
    pooled, padded = _adaptive_avg_pool1d(x, 4), F.pad(x, (-1, 1), mode="replicate")
    assert host_reads() == {}
    assert_parity(pooled, _adaptive_avg_pool1d(_ramp(1, 2, 8), 4))
    assert_parity(padded, F.pad(_ramp(1, 2, 8), (-1, 1), mode="replicate"))


@pytest.mark.emulated_only(reason="counts native calls with emulation.records()")
def test_calls_on_the_grid_run_the_devices_kernels(dml_device, shim_off):
    dmlshim.activate(fallback="known")
    emulation.reset_records()
    x = _ramp(1, 2, 8).to(dml_device)
    _adaptive_avg_pool1d(x, 4), F.pad(x, (-1, 1), mode="replicate")
    assert emulation.records()["_adaptive_avg_pool2d"]["native"] == 1
    assert emulation.records()["index_select"]["native"] == 1          # the replicate pad's map


@pytest.mark.parametrize("size, out, agree", [(8, 4, True), (7, 3, True), (5, 2, True), (9, 1, True),
                                              (8, 3, False), (6, 4, False), (3, 5, False), (1, 3, False)])
def test_window_grid_as_measured(size, out, agree):
    """The grid cases measured on the real binary (docs/defects.md)."""
    assert dml_windows_agree(size, out) is agree


def test_crop_takes_negative_pads_as_slices(assert_same):
    x = _ramp(2, 5, 6)
    cropped, pad = crop(x, (-1, 2, 0, -3))
    assert_same(cropped, x[:, :2, 1:])
    assert pad == [0, 2, 0, 0]


# ------------------------------------------------- the real binary's answers, as measured
MEASURED_MASKS = {  # (shape, op, k) -> rows of the mask measured on the real 0.2.5 binary
    ((1, 3, 4), "triu", 0): ["111.", ".111", "..11"],
    ((1, 3, 4), "tril", 0): ["1..1", "11..", "111."],
    ((1, 3, 4), "tril", 2): ["....", "....", "...."],
    ((1, 1, 3, 3), "triu", 2): ["1.1", "11.", "111"],
    ((1, 1, 3, 3), "tril", 0): ["...", "...", "..."],
    ((1, 1, 3, 4), "tril", 2): [".11.", "..11", "...1"],
    ((3, 2, 5), "tril", 3): ["...1.", "....1"],
    ((3, 2, 5), "triu", 4): ["111.1", "1111."],
    ((2, 2, 3, 4), "tril", 1): ["....", "....", "...."],
}


@pytest.mark.parametrize("case", sorted(MEASURED_MASKS))
def test_triangle_law_gives_the_measured_masks(case):
    shape, op, k = case
    mask = rules_refused.dml_triangle_mask(shape, k, op == "triu")
    assert ["".join("1" if v else "." for v in row) for row in mask.tolist()] == MEASURED_MASKS[case]


@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (1, 3, 3), (2, 3, 4), (3, 2, 5), (1, 1, 3, 4), (2, 2, 3, 4)])
def test_raw_batched_tril_triu_follow_the_law(dml_device, shim_off, shape, assert_same):
    """Without dmlshim the device's masks are the law's (the real binary's, measured; the
    emulator's rule), 2-D and tall 3-D inputs right (the values are the input's, copied)."""
    x = torch.arange(1.0, torch.Size(shape).numel() + 1).view(shape)
    for k in range(-4, 6):
        for upper in (True, False):
            y = x.to(dml_device).triu(k) if upper else x.to(dml_device).tril(k)
            law = rules_refused.dml_triangle_mask(shape, k, upper).expand(shape)
            assert_same(y, torch.where(law, x, 0.0), f"{shape} k={k} upper={upper}: ")
            if len(shape) == 2 or shape == (1, 3, 3):
                assert_same(y, x.triu(k) if upper else x.tril(k))


def test_raw_scatter_add_writes_a_repeated_place_once(dml_device, shim_off):
    """Without dmlshim: self plus the last value (the real binary, measured; the emulator's rule);
    an index without repeats is right."""
    index, src = torch.tensor([0, 1, 1]).to(dml_device), torch.arange(1.0, 4.0).to(dml_device)
    base = torch.full((3,), 10.0).to(dml_device)
    assert base.scatter_add(0, index, src).cpu().tolist() == [11.0, 13.0, 10.0]
    assert base.scatter_add(0, torch.tensor([2, 0, 1]).to(dml_device), src).cpu().tolist() == [12.0, 13.0, 11.0]


def test_fix_kernels_write_the_out_they_pass_through(dml_device, shim_off, assert_parity):
    """A fix kernel at scatter_add.out standing aside (a probe's view) leaves the composite's
    own ``out`` written: scatter_add, scatter_add_ and out= without repeats equal the CPU."""
    from dmlshim.patches import _select
    dmlshim.activate(fallback="known")
    index, src = torch.tensor([[2, 0, 1]]), torch.arange(1.0, 4.0).view(1, 3)
    expected = torch.zeros(1, 3).scatter_add(1, index, src)
    with _select.standing_aside():
        x = torch.zeros(1, 3).to(dml_device)
        out = torch.zeros(1, 3).to(dml_device)
        torch.scatter_add(x, 1, index.to(dml_device), src.to(dml_device), out=out)
        functional = torch.scatter_add(x, 1, index.to(dml_device), src.to(dml_device))
        x.scatter_add_(1, index.to(dml_device), src.to(dml_device))
    for result in (functional, x, out):
        assert_parity(result, expected)


# ------------------------------------------------------------ flip: a static defect (abort)
def _flips(d):
    """Negative dims (1-D to 3-D, several at once), a 0-dim tensor, positive dims, the
    aten out= overload, the gradient."""
    x = _ramp(2, 3, 4).to(d)
    w = _ramp(2, 3, 4).to(d).requires_grad_()
    w.flip(-1).mul(_ramp(2, 3, 4).to(d) + 1).sum().backward()
    out = torch.empty(2, 3, 4).to(d)
    torch.ops.aten.flip.out(x, [-2], out=out)
    return (x.flip(-1), x.flip(-1, -3), x[0].flip(-1), x[0, 0].flip(-1), torch.tensor(3.0).to(d).flip(0),
            torch.tensor(3.0).to(d).flip(-1), x.flip(0, 2), out, w.grad)


def test_flip_with_the_shim_equals_cpu(dml_device, shim_off, assert_same):
    dmlshim.activate(fallback="known")
    assert probing.last().status["flip_dims"] == probing.STATIC          # never probed
    assert "flip_dims" in patches.installed()
    assert_same(_flips(dml_device), _flips(CPU))
    with pytest.raises(IndexError, match="Dimension out of range"):
        _ramp(2, 3).to(dml_device).flip(-3)


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary ends the process")
def test_flip_ends_the_process_raw(dml_device, shim_off, assert_same):
    for call in (lambda: _ramp(2, 3).to(dml_device).flip(-1), lambda: torch.tensor(3.0).to(dml_device).flip(0)):
        with pytest.raises(emulation.FatalDirectMLError, match="signal 11"):
            call()
    assert_same(_ramp(2, 3).to(dml_device).flip(1), _ramp(2, 3).flip(1))


# ------------------------------------------- bmm with a CPU operand: a static defect (abort)
def test_bmm_with_a_cpu_operand_raises_torchs_error_with_the_shim(dml_device, shim_off, assert_parity):
    dmlshim.activate()                                      # auto: torch's error is not retried
    assert probing.last().status["bmm_cpu_operand"] == probing.STATIC
    assert "bmm_cpu_operand" in patches.installed()
    a, b = _ramp(2, 3, 4), _ramp(2, 4, 5)
    for call in (lambda: torch.bmm(a.to(dml_device), b), lambda: torch.matmul(a.to(dml_device), b),
                 lambda: torch.baddbmm(torch.zeros(2, 3, 5).to(dml_device), a, b.to(dml_device))):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call()
    assert_parity(torch.bmm(a.to(dml_device), b.to(dml_device)), torch.bmm(a, b))


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary ends the process")
def test_bmm_with_a_cpu_operand_ends_the_process_raw(dml_device, shim_off):
    with pytest.raises(emulation.FatalDirectMLError, match="terminate called"):
        torch.bmm(_ramp(2, 3, 4).to(dml_device), _ramp(2, 4, 5))


def test_aranges_the_device_computes_right_stay_there(dml_device, shim_off, host_reads, assert_parity):
    dmlshim.activate(fallback="known")

    def work(d):
        out = torch.empty(0).to(d)
        torch.arange(0, 10, 3, out=out)
        return torch.arange(10, device=d), torch.arange(5, -3, -1, device=d), torch.arange(0, 1, 0.125, device=d), out

    device_results = work(dml_device)
    assert host_reads() == {}
    assert_parity(device_results, work(CPU))
