"""int64 values beyond 32 bits, and one-byte overflow, on torch-directml against the CPU.

Each row runs one call on values beyond 32 bits (``big``) and on values within 30 bits
(``small``), on the device and on the CPU.  ``--shim`` activates dmlshim first.  Run on
lavapipe and on a GPU's Vulkan driver to tell a DirectML defect from a stack artifact
(docs/realdml.md, "int64 beyond 32 bits").  Usage: integers.py OUT.json [--shim]
"""
import json, sys
import torch, torch_directml as tdml

if "--shim" in sys.argv:
    import dmlshim
    dmlshim.activate()
d = tdml.device()
VALUES = {"big": [2**40 + 5, -(2**35) + 7, 3, 2**31, -(2**31) - 1],
          "small": [2**30 - 1, -(2**30), 3, 5, -7]}
R = {"adapter": tdml.device_name(0), "float64": bool(tdml.has_float64_support(0)),
     "shim": "--shim" in sys.argv, "rows": {}}


def _cpu(t):
    return tuple(map(_cpu, t)) if isinstance(t, (tuple, list)) else t.cpu()


def _same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def row(name, f):
    for kind, values in VALUES.items():
        def x(dev, dtype=torch.int64):
            return torch.tensor(values, dtype=dtype).to(dev)
        try:
            cpu, dev = f(x, "cpu"), _cpu(f(x, d))
            out = {"equal": _same(cpu, dev)}
            if not out["equal"]:
                out.update(device=str(dev)[:160], cpu=str(cpu)[:160])
        except Exception as e:  # noqa: BLE001 - a refusal is a result too
            out = {"error": str(e).splitlines()[0][:160]}
        R["rows"][f"{name}/{kind}"] = out
        print(f"{name}/{kind}", out, flush=True)


ONES = lambda dev: torch.ones(5, dtype=torch.int64).to(dev)  # noqa: E731
I = torch.tensor([4, 0, 2, 0])
row("round_trip", lambda x, dev: x(dev))
row("clone", lambda x, dev: x(dev).clone())
row("contiguous_of_transpose", lambda x, dev: torch.stack([x(dev), x(dev).flip(0)]).t().contiguous())
row("copy_", lambda x, dev: torch.zeros(5, dtype=torch.int64).to(dev).copy_(x(dev)))
row("slice_clone", lambda x, dev: x(dev)[1:4].clone())
row("neg", lambda x, dev: -x(dev))
row("abs", lambda x, dev: x(dev).abs())
row("sign", lambda x, dev: x(dev).sign())
row("add_number", lambda x, dev: x(dev) + 1)
row("sub_number", lambda x, dev: x(dev) - 1)
row("rsub_number", lambda x, dev: 1 - x(dev))
row("mul_number", lambda x, dev: x(dev) * 2)
row("mul_big_number", lambda x, dev: x(dev) * 2**33)
row("add_big_number", lambda x, dev: x(dev) + 2**33)
row("add_tensor", lambda x, dev: x(dev) + x(dev).flip(0))
row("add_alpha", lambda x, dev: torch.add(x(dev), ONES(dev), alpha=3))
row("sub_tensor", lambda x, dev: x(dev) - ONES(dev))
row("mul_tensor", lambda x, dev: x(dev) * (ONES(dev) * 3))
row("square_to_big", lambda x, dev: x(dev) * x(dev))
row("pow_2", lambda x, dev: x(dev) ** 2)
row("pow_3_30", lambda x, dev: torch.tensor([3]).to(dev) ** 30)
row("floor_divide", lambda x, dev: x(dev) // 3)
row("div_trunc", lambda x, dev: torch.div(x(dev), 3, rounding_mode="trunc"))
row("remainder", lambda x, dev: x(dev) % 1000)
row("fmod", lambda x, dev: torch.fmod(x(dev), 1000))
row("bitwise_and", lambda x, dev: x(dev) & 0xFFFFFFFFFF)
row("bitwise_not", lambda x, dev: ~x(dev))
row("shift_left", lambda x, dev: x(dev) << 2)
row("cumsum", lambda x, dev: x(dev).cumsum(0))
row("sum", lambda x, dev: x(dev).sum())
row("prod", lambda x, dev: x(dev)[:3].prod())
row("max", lambda x, dev: x(dev).max())
row("min_dim", lambda x, dev: x(dev).view(1, 5).min(1))
row("argmax", lambda x, dev: x(dev).argmax())
row("sort", lambda x, dev: x(dev).sort())
row("topk", lambda x, dev: x(dev).topk(2))
row("unique", lambda x, dev: x(dev).unique())
row("eq_number", lambda x, dev: x(dev) == 3)
row("eq_tensor", lambda x, dev: x(dev) == x(dev).flip(0))
row("gt_number", lambda x, dev: x(dev) > 2**31 - 1)
row("lt_tensor", lambda x, dev: x(dev) < x(dev).flip(0))
row("maximum", lambda x, dev: torch.maximum(x(dev), torch.zeros(5, dtype=torch.int64).to(dev)))
row("clamp", lambda x, dev: x(dev).clamp(-4, 4))
row("clamp_min", lambda x, dev: x(dev).clamp_min(0))
row("where", lambda x, dev: torch.where(torch.tensor([True, False] * 2 + [True]).to(dev), x(dev), ONES(dev)))
row("masked_fill", lambda x, dev: x(dev).masked_fill(torch.tensor([False, True] * 2 + [False]).to(dev), 2**33))
row("fill_big", lambda x, dev: torch.empty(3, dtype=torch.int64).to(dev).fill_(2**40 + 5))
row("full_big", lambda x, dev: torch.full((3,), 2**40 + 5, device=dev))
row("arange_big", lambda x, dev: torch.arange(2**33, 2**33 + 3, device=dev))
row("index_select", lambda x, dev: x(dev).index_select(0, I.to(dev)))
row("getitem_tensor", lambda x, dev: x(dev)[I.to(dev)])
row("gather", lambda x, dev: x(dev).gather(0, I.to(dev)))
row("index_put", lambda x, dev: torch.zeros(5, dtype=torch.int64).to(dev).index_put_((I[:2].to(dev),), x(dev)[:2]))
row("masked_select", lambda x, dev: x(dev)[x(dev) != 3])
row("cat", lambda x, dev: torch.cat([x(dev), x(dev)]))
row("repeat", lambda x, dev: x(dev).repeat(2))
row("flip", lambda x, dev: x(dev).flip(0))
row("roll", lambda x, dev: x(dev).roll(1))
row("to_int32", lambda x, dev: x(dev).int())
row("to_float64", lambda x, dev: x(dev).double())
row("from_float32", lambda x, dev: torch.tensor([2.0**40, -(2.0**35)]).to(dev).long())
row("mm", lambda x, dev: (x(dev).view(5, 1) @ ONES(dev).view(1, 5)))
row("int32_mul_wrap", lambda x, dev: torch.tensor([2**30, 7], dtype=torch.int32).to(dev) * 4)
row("uint8_mul_wrap", lambda x, dev: torch.tensor([200, 7], dtype=torch.uint8).to(dev) * 2)
row("uint8_add_wrap", lambda x, dev: torch.tensor([200, 7], dtype=torch.uint8).to(dev) + 100)
row("uint8_pow_wrap", lambda x, dev: torch.tensor([20, 3], dtype=torch.uint8).to(dev) ** 2)
row("int8_mul_wrap", lambda x, dev: torch.tensor([100, -100, 7], dtype=torch.int8).to(dev) * 2)
row("int8_add_wrap", lambda x, dev: torch.tensor([100, 7], dtype=torch.int8).to(dev) + torch.tensor([100, 1], dtype=torch.int8).to(dev))
json.dump(R, open(sys.argv[1], "w"), indent=1)
bad = [k for k, v in R["rows"].items() if not v.get("equal")]
print(f"{len(R['rows']) - len(bad)} of {len(R['rows'])} equal the CPU; not: {' '.join(bad)}")
