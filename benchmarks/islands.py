"""CPU islands (dmlshim.islands): what an audio front end and the float64 policy cost.

Cases, on the emulated DirectML device with the shim active (one intra-op thread):

* ``log-mel``: Whisper's front end (stft -> |.|^2 -> mel matmul -> log10) on 5 s of
  16 kHz audio. Variants: all on the CPU (baseline), on the device with the stft
  as a CPU island (the magnitudes come back to the device).
* ``float64 chain``: FunASR CIF's ``torch.cumsum(alphas, 1, dtype=torch.float64)``
  followed by float64 math and a cast back to float32, over 2,000 frames. Variants:
  the island policy (the float64 values stay on the CPU until the cast) and the
  0.1 policy (compute float64 on the CPU, return float32 to the device at once,
  ``fallback.run_on_cpu(dtype_map=...)``). The note gives each policy's largest
  difference from the CPU result: the reason computed float64 values are islands.

    python benchmarks/islands.py [--quick] [--json PATH]
"""
import sys
import warnings
from pathlib import Path

import torch

import timing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dmlshim  # noqa: E402
from dmlshim import emulation, fallback  # noqa: E402


def log_mel(audio, window, filters):
    stft = torch.stft(audio, 400, 160, window=window, return_complex=True)
    mel = filters @ (stft[..., :-1].abs() ** 2)
    return torch.clamp(mel, min=1e-10).log10()


def chain_island(alphas, scale):
    return (torch.cumsum(alphas, 1, dtype=torch.float64) * scale - 0.5).to(torch.float32)


def chain_cast(alphas, scale):
    # dmlshim 0.1: float64 computed on the CPU, float32 on the device right away
    prefix = fallback.run_on_cpu(torch.cumsum, (alphas, 1), {"dtype": torch.float64},
                                 dtype_map={torch.float64: torch.float32})
    return (prefix * scale - 0.5).to(torch.float32)


def main():
    args = timing.arg_parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dev = emulation.install()
    dmlshim.activate()
    g = torch.Generator().manual_seed(0)
    repeats = 5 if args.quick else 15

    audio, window, filters = torch.randn(1, 80000, generator=g), torch.hann_window(400), torch.rand(80, 201, generator=g)
    on_dev = [t.to(dev) for t in (audio, window, filters)]
    t = timing.measure({"cpu": lambda: log_mel(audio, window, filters),
                        "device + island": lambda: log_mel(*on_dev)}, repeats=repeats)
    result = timing.rows("log-mel 5 s", t, baseline="cpu")

    alphas = torch.rand(1, 2000, generator=g) * 0.3
    scale = torch.tensor(1.0 + 1e-7)
    expected = chain_island(alphas, scale.double())           # the CPU computes in float64
    errors = {}
    for name, fn in (("island", chain_island), ("cast (0.1)", chain_cast)):
        got = fn(alphas.to(dev), scale.to(dev)).cpu()
        errors[name] = (got - expected).abs().max().item()
    t = timing.measure({"island": lambda: chain_island(alphas.to(dev), scale.to(dev)),
                        "cast (0.1)": lambda: chain_cast(alphas.to(dev), scale.to(dev))},
                       repeats=repeats, number=5)
    note = "max |device - CPU|: " + ", ".join(f"{k} {v:.2e}" for k, v in errors.items())
    result += timing.rows("float64 chain 2000 frames", t, baseline="island", note=note)
    timing.finish(args, "islands", result, {"max_abs_error": errors})


if __name__ == "__main__":
    main()
