"""GFPGANv1Clean 512x512 forward: plain CPU vs the emulated DirectML device + dmlshim.

The model is GFPGANv1Clean with the arguments ``GFPGANer`` uses (87M parameters,
channel_multiplier 2) and random weights (examples/gfpgan_models.py); the input is one
512x512 face crop, scaled to [-1, 1] as GFPGANer feeds it. ``torch.no_grad()``,
random StyleGAN2 noise on every call (GFPGANer's default).

Variants, timed interleaved (benchmarks/timing.py), seconds per forward:

* ``cpu``            the model on the CPU, dmlshim inactive (the baseline)
* ``cpu+shim``       the same with dmlshim active: the cost of the wrappers' fast path
* ``emulated``       the model on the emulated DirectML device, dmlshim inactive
* ``emulated+shim``  the same with dmlshim active (the noise then comes from the CPU
                     generator and is copied over: integrations/gfpgan.py)

The two ``+shim`` variants run with the compiled gate where it is built, and again with
``DMLSHIM_GATE=python`` (``..., gate: python``): what a user without a C++ compiler gets.
The emulator computes on this CPU, so ``emulated / cpu`` is the emulator's overhead, not a
GPU speed-up; ``emulated+shim / emulated`` is what dmlshim adds on a DirectML device.
One extra traced pass reads ``dmlshim.report()``: the share of the forward's wall time
spent inside shim wrappers, split into dmlshim's **overhead** (its Python, checks, host
reads) and **substitute** work (the bilinear upsampling recomputed on the device, the noise
made on the CPU), each as a share of the device run's wall time (issue 38: overhead at
most 5%), and the bytes it copied; it also checks that the device's
output equals the CPU's for the same seed.
"""
import copy
import sys
from pathlib import Path

import torch

import timing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import torchvision_ops  # noqa: E402  (this repo's CI: torchvision's CUDA-only wheel)

torchvision_ops.apply()


def face_crop(size):
    """The bundled photo as GFPGANer prepares a face: RGB, [-1, 1], 1x3xSxS float32."""
    import cv2

    image = cv2.resize(cv2.imread(str(ROOT / "examples" / "data" / "astronaut.jpg")), (size, size))
    x = torch.from_numpy(cv2.cvtColor(image, cv2.COLOR_BGR2RGB)).permute(2, 0, 1).float()
    return (x / 255.0 - 0.5).div(0.5).unsqueeze(0)


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed rounds (default 5; 1 with --quick, without a warm-up round)")
    parser.add_argument("--size", type=int, choices=(128, 256, 512), default=None,
                        help="out_size (default: 512; 128 with --quick)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch CPU threads for every variant (default %(default)s)")
    args = parser.parse_args()
    timing.default_json(args, "gfpgan_bench")
    size = args.size or (128 if args.quick else 512)
    repeats = 1 if args.quick else args.repeats
    torch.set_num_threads(args.threads)

    import dmlshim
    from dmlshim import parity
    from dmlshim import emulation

    device = emulation.install()
    dmlshim.activate()                   # basicsr (imported by gfpgan) needs it at import
    import gfpgan_models
    torch.manual_seed(0)
    cpu_model = gfpgan_models.gfpgan_net(size)
    dev_model = copy.deepcopy(cpu_model).to(device)
    dmlshim.deactivate()
    params = sum(p.numel() for p in cpu_model.parameters())
    x_cpu = face_crop(size)
    x_dev = x_cpu.to(device)
    print(f"GFPGANv1Clean out_size={size}: {params / 1e6:.1f}M parameters, random weights, "
          f"{args.threads} threads", flush=True)

    def forward(model, x):
        def run():
            with torch.no_grad():
                return model(x, return_rgb=False)[0]
        return run

    compiled, python = timing.activated("auto"), timing.activated("python")
    timings = timing.measure(
        {"cpu": forward(cpu_model, x_cpu), "cpu+shim": forward(cpu_model, x_cpu),
         "cpu+shim, gate: python": forward(cpu_model, x_cpu),
         "emulated": forward(dev_model, x_dev), "emulated+shim": forward(dev_model, x_dev),
         "emulated+shim, gate: python": forward(dev_model, x_dev)},
        setup={"cpu": dmlshim.deactivate, "cpu+shim": compiled, "cpu+shim, gate: python": python,
               "emulated": dmlshim.deactivate, "emulated+shim": compiled,
               "emulated+shim, gate: python": python},
        repeats=repeats, warmup=0 if args.quick else 1)
    compiled()                      # the traced pass: the default gate

    torch.manual_seed(1)
    wall, report, out = timing.traced(forward(dev_model, x_dev))
    dmlshim.deactivate()
    torch.manual_seed(1)
    reference = forward(cpu_model, x_cpu)()
    # "device": bilinear F.interpolate is computed on the device with other kernels than the
    # CPU's (upsample_bilinear, failure_modes.md #21), so exact equality cannot hold there
    figures = parity.compare(out.cpu(), reference, "device")
    same, within = torch.equal(out.cpu(), reference), figures.ok
    ops, totals = report.rows, timing.shim_totals(wall, report.rows, report.passed)
    added = timings["emulated+shim"].median_s - timings["emulated"].median_s
    note = (f"shim {100 * totals['shim_share']:.1f}% of {wall:.2f} s (traced; {timing.split_note(totals)}), "
            f"{(totals['bytes_h2d'] + totals['bytes_d2h']) / 2**20:.2f} MiB moved, "
            + ("identical to CPU" if same else f"{'within' if within else 'OUTSIDE'} the device "
               f"profile (max abs {figures.max_abs:.2g})"))
    case = f"forward {size}x{size}"
    rows = timing.rows(case, timings, baseline="cpu", note=note)
    extra = {"model": "GFPGANv1Clean", "out_size": size, "parameters": params, "threads": args.threads,
             "identical_to_cpu": same, "within_device_profile": within, "max_abs": figures.max_abs, **totals, "shim_added_median_s": added,
             "shim_added_share": added / timings["emulated+shim"].median_s, "ops": ops,
             "passed": timing.top_passed(report.passed)}
    print(f"{case}: {note}; emulated+shim - emulated = {added * 1e3:+.1f} ms "
          f"({100 * extra['shim_added_share']:+.1f}% of emulated+shim median); ops: "
          + ", ".join(f"{r['op']} {r['calls']}x {r['seconds'] * 1e3:.1f} ms (overhead "
                      f"{r['overhead'] * 1e3:.1f})" for r in ops[:4])
          + "; passed through: " + timing.passed_text(report.passed),
          flush=True)
    timing.finish(args, "gfpgan", rows, extra)
    if not within:
        sys.exit(f"gfpgan_bench: the emulated DirectML output is outside the device profile: {figures}")


if __name__ == "__main__":
    main()
