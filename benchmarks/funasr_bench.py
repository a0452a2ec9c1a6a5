"""FunASR paraformer-zh on DirectML: plain CPU vs the emulated DirectML device + dmlshim.

The model is a SeacoParaformer with paraformer-zh's real dimensions (~247M
parameters) and random weights, built offline by examples/funasr_models.py and
loaded through ``AutoModel``; the audio is the bundled speech cut to 5 s and 11 s.

Variants, timed interleaved (benchmarks/timing.py), seconds per utterance:

* ``cpu``            AutoModel on the CPU, dmlshim inactive (the baseline)
* ``cpu+shim``       the same with dmlshim active: the cost of the wrappers' fast path
                     (they see no DirectML tensor and step aside)
* ``emulated+shim``  AutoModel on the emulated DirectML device with dmlshim active.
                     The emulator computes on this CPU, so the ratio is the emulator's
                     and the shim's overhead, not a GPU speed-up.

The two ``+shim`` variants run with the compiled gate where it is built, and again with
``DMLSHIM_GATE=python`` (``..., gate: python``): the fixes' kernels in Python, what a user
without a C++ compiler gets (issue 48).

One extra traced pass per case reads ``dmlshim.report()``: the share of the
utterance's wall time spent inside shim wrappers (this includes the CPU work of the
ops they send to the CPU, e.g. the LSTMs, and the copies), split into dmlshim's
**overhead** (its Python, checks, host reads) and **substitute** work (the CPU islands
with their copies, ops recomputed on the device), each as a share of the device run's
wall time (issue 38: overhead at most 5%), and the bytes copied host->device and
device->host per utterance. It also checks that the device's text
equals the CPU's. ``--quick`` (make bench's CI form): the tiny model, one timed round, the
5 s clip and the 11 s one with hotwords.
"""
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

import timing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
HOTWORDS = "天气 公园"


def clips(seconds):
    """{"5s": float32 array, ...}: the bundled Mandarin + English speech, cut to length."""
    zh, rate = sf.read(ROOT / "examples" / "data" / "zh.wav", dtype="float32")
    en, _ = sf.read(ROOT / "examples" / "data" / "en.wav", dtype="float32")
    speech = np.concatenate([zh, en])
    return {f"{s}s": speech[: s * rate] for s in seconds}


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5; 1 with --quick)")
    parser.add_argument("--size", choices=("real", "tiny"), default=None,
                        help="model size (default: real; tiny with --quick)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="model cache (default: ~/.cache/dmlshim/funasr)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch CPU threads for every variant (default %(default)s; 1 is "
                             "steadier on a shared machine)")
    args = parser.parse_args()
    timing.default_json(args, "funasr_bench")
    size = args.size or ("tiny" if args.quick else "real")
    repeats = 1 if args.quick else args.repeats
    ncpu = args.threads

    import dmlshim
    from dmlshim import emulation
    from funasr_models import auto_model, build

    device = emulation.install()
    t0 = time.perf_counter()
    model_dir = build("seaco", size=size, cache_dir=args.cache_dir)
    build_s = time.perf_counter() - t0
    cpu_model, dev_model = auto_model(model_dir, "cpu", ncpu), auto_model(model_dir, device, ncpu)
    params = sum(p.numel() for p in cpu_model.model.parameters())
    print(f"SeacoParaformer ({size}): {params / 1e6:.1f}M parameters, random weights, "
          f"{ncpu} threads; model dir ready in {build_s:.1f} s", flush=True)

    cases = [(name, audio, None) for name, audio in clips((5, 11)).items()]
    cases.append(("11s+hotwords", cases[-1][1], HOTWORDS))
    if args.quick:                  # the short clip and the hotwords
        cases = [cases[0], cases[-1]]
    all_rows, extra = [], {"model": f"SeacoParaformer {size}", "parameters": params,
                           "threads": ncpu, "cases": {}}
    for case, audio, hotword in cases:
        def run(model):
            return lambda: model.generate(audio, hotword=hotword)

        compiled, python = timing.activated("auto"), timing.activated("python")
        timings = timing.measure(
            {"cpu": run(cpu_model), "cpu+shim": run(cpu_model), "cpu+shim, gate: python": run(cpu_model),
             "emulated+shim": run(dev_model), "emulated+shim, gate: python": run(dev_model)},
            setup={"cpu": dmlshim.deactivate, "cpu+shim": compiled, "cpu+shim, gate: python": python,
                   "emulated+shim": compiled, "emulated+shim, gate: python": python},
            repeats=repeats, warmup=1)
        compiled()
        wall, report, result = timing.traced(run(dev_model))
        dmlshim.deactivate()
        reference = cpu_model.generate(audio, hotword=hotword)
        same = [r["text"] for r in result] == [r["text"] for r in reference] and \
            [r.get("timestamp") for r in result] == [r.get("timestamp") for r in reference]
        totals = timing.shim_totals(wall, report.rows, report.passed)
        note = (f"shim {100 * totals['shim_share']:.0f}% of {wall:.2f} s ({timing.split_note(totals)}), "
                f"{(totals['bytes_h2d'] + totals['bytes_d2h']) / 2**20:.2f} MiB moved, "
                f"{'identical' if same else 'DIFFERENT'}")
        all_rows += timing.rows(case, timings, baseline="cpu", note=note)
        top = sorted(report.rows, key=lambda r: r["seconds"], reverse=True)[:8]
        extra["cases"][case] = {
            "audio_s": len(audio) / 16000, "hotwords": hotword, "identical_to_cpu": same,
            **totals, "top_ops": top, "passed": timing.top_passed(report.passed)}
        print(f"{case}: {note}; top ops: "
              + ", ".join(f"{r['op']} {r['calls']}x {r['seconds'] * 1e3:.1f} ms (overhead "
                          f"{r['overhead'] * 1e3:.1f})" for r in top[:4])
              + "; passed through: " + timing.passed_text(report.passed),
              flush=True)
    timing.finish(args, "funasr", all_rows, extra)
    if not all(c["identical_to_cpu"] for c in extra["cases"].values()):
        sys.exit("funasr_bench: the emulated DirectML transcription differs from the CPU's")


if __name__ == "__main__":
    main()
