"""Raw torch-directml (no dmlshim) against the CPU: the rows lavapipe showed, on this adapter."""
import json, os, subprocess, sys, time
import torch, torch_directml as tdml
import torch.nn.functional as F

d = tdml.device()
R = {"adapter": tdml.device_name(0), "float64": bool(tdml.has_float64_support(0)),
     "fp64_env": os.environ.get("DMLSHIM_REALDML_FP64"), "rows": {}}


def row(name, f, *shapes):
    try:
        torch.manual_seed(0)
        cpu, dev = f("cpu"), f(d)
        cpu = cpu if isinstance(cpu, tuple) else (cpu,)
        dev = dev if isinstance(dev, tuple) else (dev,)
        out = []
        for c, g in zip(cpu, dev):
            g = g.cpu()
            if c.shape != g.shape or c.dtype != g.dtype:
                out.append(f"shape/dtype {list(g.shape)} {g.dtype} vs {list(c.shape)} {c.dtype}")
            elif c.dtype.is_floating_point:
                out.append(float((c.double() - g.double()).abs().max()) if c.numel() else 0.0)
            else:
                out.append(int((c != g).sum()))
        R["rows"][name] = out
    except Exception as e:  # noqa
        R["rows"][name] = "error: " + str(e).splitlines()[0][:200]
    print(name, R["rows"][name], flush=True)


def seeded(shape, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


for n in (16380, 16384, 40000, 61600, 1 << 20):
    for op in ("add", "mul", "div", "maximum", "minimum"):
        row(f"ew_{op}_{n}", lambda dev, n=n, op=op: getattr(torch, op)(seeded(n).to(dev), seeded(n, seed=2).to(dev)))
    row(f"ew_lt_{n}", lambda dev, n=n: torch.lt(seeded(n).to(dev), seeded(n, seed=2).to(dev)))
    row(f"ew_add_f16_{n * 2}", lambda dev, n=n: seeded(2 * n, torch.float16).to(dev) + seeded(2 * n, torch.float16, 2).to(dev))
# FunASR's SinusoidalPositionEncoder: x * sqrt(d) + pe (broadcast), then an add of 61 600 elements
def posenc(dev):
    x = seeded((1, 110, 560)).to(dev)
    pe = seeded((1, 110, 560), seed=3).to(dev)
    y = x * 23.66 + pe
    return y, y.view(-1)[:61600] + seeded(61600, seed=4).to(dev)
row("funasr_posenc", posenc)
for scale in (2.0, 0.5, 1.7):
    for ac in (False, True):
        row(f"bilinear_{scale}_{ac}", lambda dev, s=scale, a=ac: F.interpolate(seeded((1, 3, 17, 23)).to(dev), scale_factor=s, mode="bilinear", align_corners=a))
row("bilinear_ramp_2x", lambda dev: F.interpolate(torch.arange(15.0).view(1, 1, 3, 5).to(dev), scale_factor=2, mode="bilinear"))
for scale in (2.0, 0.5, 1.7):
    row(f"nearest_{scale}", lambda dev, s=scale: F.interpolate(seeded((1, 3, 17, 23)).to(dev), scale_factor=s, mode="nearest"))
row("prelu_1", lambda dev: torch.nn.PReLU().to(dev)(seeded((1, 8, 5, 5)).to(dev)))
row("float64_sum", lambda dev: torch.tensor([1.5, 2.0, 2.5, 3.0, 4.5], dtype=torch.float64).to(dev).sum())
row("float64_to", lambda dev: torch.tensor([1.5, 2.25], dtype=torch.float64).to(dev) * 2)
row("sum_arange9", lambda dev: torch.arange(9.0).to(dev).sum())
row("softmax_2_5_103", lambda dev: seeded((2, 5, 103)).to(dev).softmax(-1))
row("layer_norm", lambda dev: F.layer_norm(seeded((4, 103, 64)).to(dev), (64,)))
row("matmul_256", lambda dev: seeded((256, 256)).to(dev) @ seeded((256, 256), seed=2).to(dev))
row("conv2d_3x3", lambda dev: F.conv2d(seeded((1, 16, 32, 32)).to(dev), seeded((32, 16, 3, 3), seed=2).to(dev), padding=1))
row("conv_transpose2d", lambda dev: F.conv_transpose2d(seeded((1, 4, 5, 5)).to(dev), seeded((4, 3, 3, 3), seed=2).to(dev), stride=2))
row("conv_transpose1d", lambda dev: F.conv_transpose1d(seeded((2, 4, 7)).to(dev), seeded((4, 3, 3), seed=2).to(dev), stride=2))
row("uint8_add", lambda dev: torch.arange(4, dtype=torch.uint8).to(dev) + 1)
row("eq_self", lambda dev: (lambda x: x == x)(seeded(8).to(dev)))
row("addmm_int64", lambda dev: torch.addmm(torch.arange(6).view(2, 3).to(dev), torch.arange(8).view(2, 4).to(dev), torch.arange(12).view(4, 3).to(dev)))
row("topk_int64", lambda dev: torch.topk(torch.tensor([3, 1, 3, 2, 1, 3]).to(dev), 3))
row("sort_f16_ties", lambda dev: torch.sort(torch.tensor([1.0, 0.5, 1.0, 0.5, 2.0] * 4, dtype=torch.float16).to(dev)))
row("avg_pool1d", lambda dev: F.avg_pool1d(seeded((2, 3, 9)).to(dev), 3, 2, 1, ceil_mode=True, count_include_pad=False))
row("softplus", lambda dev: F.softplus(seeded((5, 5)).to(dev) * 30, beta=2, threshold=5))
row("normalize", lambda dev: F.normalize(seeded((3, 4, 5)).to(dev), p=1.5, dim=1))
row("var", lambda dev: seeded((5, 7)).to(dev).var(1, correction=0))
row("adaptive_avg_pool_7_3", lambda dev: F.adaptive_avg_pool1d(seeded((1, 2, 7)).to(dev), 3))
row("lstm_cpu_fallback", lambda dev: torch.nn.LSTM(4, 5).to(dev)(seeded((3, 2, 4)).to(dev))[0])
# PReLU with 64 parameters aborted the process on lavapipe (dml_tensor_desc.cc): a child process
code = ("import torch, torch_directml as t; d=t.device(); m=torch.nn.PReLU(64).to(d); "
        "x=torch.randn(1,64,8,8); print(float((m(x.to(d)).cpu()-torch.nn.PReLU(64)(x)).abs().max()))")
p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
R["rows"]["prelu_64_child"] = {"rc": p.returncode, "out": p.stdout.strip()[-200:], "err": p.stderr.strip()[-300:]}
print("prelu_64_child", R["rows"]["prelu_64_child"], flush=True)
json.dump(R, open(sys.argv[1], "w"), indent=1)
