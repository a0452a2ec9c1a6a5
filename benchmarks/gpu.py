"""GPU benchmark: the shim's device round trips measured over a real PCIe bus.

``dmlshim.activate(target="cuda")`` makes the DirectML-coverage patches act on
CUDA tensors: the LSTM runs on the CPU (cached weights), empty inputs are dropped
from cat, float x bool muls are coerced. On an NVIDIA GPU that prices what the
shim does on DirectML. Compared side by side, interleaved, in one process:

* LSTM at FunASR's size (512 -> 512, bidirectional, batch 1, 750 and 80 steps):
  native cuDNN, the shim's CPU fallback (cached weights), the usual hand fix
  (``module.cpu()`` and back on every call), the LSTM kept on the device
  decomposed into DirectML-native ops (``lstm_strategies.py``), and a CPU LSTM.
* Paraformer at paraformer-zh size (SeacoParaformer, random weights from
  ``examples/funasr_models.py``) through ``funasr.AutoModel.generate``: latency on
  5 s and 11 s of audio, and throughput (utterances/s) on a list of 5 s
  utterances at batch 1 and ``--batch N`` (default 8), for pure CUDA, CUDA +
  shim, CUDA + shim with the LSTM decomposed, and the CPU. The goal is >= 0.8x
  pure-CUDA throughput with the shim. float64 is priced as on most DirectML
  GPUs: the shim is told the GPU has none (failure_modes.md #7).

Not part of CI (``benchmarks/run.py`` runs it only when named: ``--only gpu``).
Without a GPU, ``--dry-run`` runs the same code on the emulated DirectML device
(``dmlshim.emulation``, target "privateuseone") with tiny sizes: it proves the
code path, its timings mean nothing. There "native" variants fail, as they do
on DirectML, and are listed under ``extra["failed"]``.

    python benchmarks/gpu.py [--quick] [--batch N] [--json PATH]   # CUDA machine
    python benchmarks/gpu.py --dry-run --batch 2                     # anywhere

The JSON goes to ``benchmarks/results/gpu.json`` (``gpu-dry-run.json``) unless
``--json`` says otherwise; ``extra`` holds the GPU's name, CPU-parity of the LSTM
strategies, whether transcripts agree across variants, and ``dmlshim.report()``
for one shim run (ops, actions, bytes moved) with the shim's share of the time.
"""
import copy
import os
import sys
import wave
from pathlib import Path

import numpy as np
import torch

import timing
from lstm_strategies import decomposed_lstms, lstm_forward

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import dmlshim  # noqa: E402


class Bench:
    """Device under test, sizes and the shim switch for one run."""

    def __init__(self, dry_run, quick, batch):
        from funasr_models import build

        self.dry_run, self.quick, self.batch = dry_run, quick, batch
        if not dry_run and not torch.cuda.is_available():
            sys.exit("gpu.py: CUDA is not available; --dry-run checks the code path "
                     "on the emulated DirectML device instead")
        # built before the emulator is installed: torch.random.fork_rng in build()
        # would look for the emulated device's RNG state
        self.model_dir = str(build("seaco", "tiny" if dry_run else "real"))
        if dry_run:
            from dmlshim import emulation
            self.device, self.target = emulation.install(), "privateuseone"
        else:
            self.device, self.target = torch.device("cuda"), "cuda"
            # price float64 as on most DirectML GPUs (failure_modes.md #7): the dtypes
            # patch asks devices.has_float64_support at call time, so CUDA answers False
            dmlshim.devices.has_float64_support = lambda device=None: False
        self.dev = "cuda" if self.target == "cuda" else "dml"  # variant name prefix
        self.repeats = 2 if dry_run else 5 if quick else 15
        self.failed = {}

    def shim(self, on):
        """activate()/deactivate() the shim for the device under test (untimed setup).

        The switch returns True when it has just activated the shim.
        """
        def switch():
            if on and not dmlshim.is_active():
                # CUDA has none of DirectML's defects: probing would switch every fix
                # off, and this prices them, so they all go on (DMLSHIM_PROBE=off)
                os.environ["DMLSHIM_PROBE"] = "off"
                dmlshim.activate(target=self.target)
                return True
            if not on and dmlshim.is_active():
                dmlshim.deactivate()
            return False
        return switch

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def runnable(self, case, variants, setup):
        """Run each variant once (with its setup); drop those that raise, noting why."""
        ok = {}
        for name, fn in variants.items():
            setup[name]()
            try:
                fn()
                ok[name] = fn
            except Exception as exc:  # e.g. the native LSTM on (emulated) DirectML
                first_line = (str(exc).strip().splitlines() or [""])[0]
                self.failed[f"{case}: {name}"] = f"{type(exc).__name__}: {first_line}"[:300]
        return ok

    def measure(self, case, variants, setup, baseline, note=""):
        """Rows for the variants that run; ratio against ``baseline``, else against "cpu"."""
        variants = self.runnable(case, variants, setup)
        # deactivate() frees the shim's CPU weight cache, so after switching the shim
        # on, one untimed call refills it: the timed call sees the steady state
        warm = {name: (lambda name=name: setup[name]() and variants[name]()) for name in variants}
        t = timing.measure(variants, repeats=self.repeats, warmup=1, setup=warm)
        base = baseline if baseline in t else "cpu"
        return timing.rows(case, t, base, note)


def lstm_rows(b):
    """One LSTM forward at 750 and 80 steps (15 s and ~5 s of Paraformer audio)."""
    size = 16 if b.dry_run else 512
    rows, parity = [], {}
    for steps in ([20] if b.dry_run else [750, 80]):
        case_rows, case_parity = lstm_case(b, size, steps)
        rows += case_rows
        parity[f"{steps} steps"] = case_parity
    return rows, {"lstm_max_abs_diff_vs_cpu": parity}


def lstm_case(b, size, steps):
    """Native, shim CPU fallback, module.cpu() per call, decomposed on device, plain CPU."""
    lstm_cpu = torch.nn.LSTM(size, size, batch_first=True, bidirectional=True).eval()
    lstm_dev, lstm_naive = (copy.deepcopy(lstm_cpu).to(b.device) for _ in range(2))
    x_cpu = torch.randn(1, steps, size)
    x_dev = x_cpu.to(b.device)

    def naive():  # the usual hand fix: module to the CPU and back on every call
        lstm_naive.cpu()
        out = lstm_naive(x_dev.cpu())[0].to(b.device)
        lstm_naive.to(b.device)
        return out

    def on_device(fn):
        def run():
            with torch.inference_mode():
                out = fn()
            b.sync()
            return out
        return run

    variants = {
        "cpu": on_device(lambda: lstm_cpu(x_cpu)[0]),
        f"{b.dev} native": on_device(lambda: lstm_dev(x_dev)[0]),
        f"{b.dev}+shim: LSTM on CPU": on_device(lambda: lstm_dev(x_dev)[0]),
        f"{b.dev}: module.cpu() per call": on_device(naive),
        f"{b.dev}: LSTM decomposed": on_device(lambda: lstm_forward(lstm_dev, x_dev)[0]),
    }
    setup = {name: b.shim("shim" in name) for name in variants}
    rows = b.measure(f"LSTM {size}->{size} bi, {steps} steps", variants, setup,
                     baseline=f"{b.dev} native")
    ref = variants["cpu"]()
    parity = {}
    for row in rows:
        setup[row["variant"]]()
        parity[row["variant"]] = (variants[row["variant"]]().cpu() - ref).abs().max().item()
    b.shim(False)()
    return rows, parity


def audio(seconds):
    """examples/data/zh.wav (16 kHz) repeated or cut to ``seconds``: float32 array."""
    with wave.open(str(ROOT / "examples" / "data" / "zh.wav")) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    n = int(seconds * 16000)
    return (np.tile(pcm, -(-n // len(pcm)))[:n] / 32768.0).astype(np.float32)


def paraformer_rows(b):
    """AutoModel.generate latency and throughput: CPU, native, shim, shim + decomposed LSTM."""
    from funasr_models import auto_model

    size = "tiny" if b.dry_run else "real"
    ncpu = os.cpu_count()

    def load(device):
        return auto_model(b.model_dir, device, ncpu, disable_log=True)

    models = {"cpu": load("cpu"), "dev": load(b.device), "decomposed": load(b.device)}
    names = {"cpu": "cpu", "native": f"{b.dev} native", "shim": f"{b.dev}+shim",
             "decomposed": f"{b.dev}+shim, LSTM decomposed"}
    setup = {names["cpu"]: b.shim(False), names["native"]: b.shim(False),
             names["shim"]: b.shim(True), names["decomposed"]: b.shim(True)}

    def variants(inputs, batch_size):
        def gen(model):
            return lambda: model.generate(input=inputs, batch_size=batch_size)
        return {names["cpu"]: gen(models["cpu"]), names["native"]: gen(models["dev"]),
                names["shim"]: gen(models["dev"]), names["decomposed"]: gen(models["decomposed"])}

    rows, texts = [], {}
    lengths = [2] if b.dry_run else [5] if b.quick else [5, 11]
    with decomposed_lstms(models["decomposed"].model) as swapped:
        for seconds in lengths:
            v = variants(audio(seconds), 1)
            case_rows = b.measure(f"paraformer-{size} latency, {seconds} s audio", v, setup,
                                  baseline=names["native"])
            texts[seconds] = {}
            for row in case_rows:
                setup[row["variant"]]()
                texts[seconds][row["variant"]] = v[row["variant"]]()[0]["text"]
            rows += case_rows
        shim_share = shim_report(b, v[names["shim"]], case_rows)
        n, seconds = (2, 2) if b.dry_run else (8, 5) if b.quick else (32, 5)
        throughput = {}
        for batch in sorted({1, b.batch}):
            case = f"paraformer-{size} throughput, {n} x {seconds} s, batch {batch}"
            case_rows = b.measure(case, variants([audio(seconds)] * n, batch), setup,
                                  baseline=names["native"])
            native = next((r for r in case_rows if r["variant"] == names["native"]), None)
            for row in case_rows:
                row["note"] = f"{n / row['median_s']:.2f} utt/s"
                if native:  # the goal: the shim keeps >= 0.8x of pure-device throughput
                    share = native["median_s"] / row["median_s"]
                    row["note"] += f", {share:.2f}x native throughput"
                    throughput[f"batch {batch}: {row['variant']}"] = share
            rows += case_rows
    b.shim(False)()
    same = {s: len(set(t.values())) == 1 for s, t in texts.items()}
    return rows, {"paraformer_size": size, "lstms_decomposed": swapped,
                  "transcripts_identical_across_variants": same,
                  "throughput_vs_native": throughput, **shim_share}


def shim_report(b, run_shim, case_rows):
    """dmlshim.report() for one shim run of the last latency case, and the shim's share of it."""
    b.shim(True)()
    run_shim()  # fills the CPU weight cache: the report shows the steady state
    wall, report, _ = timing.traced(run_shim)
    b.shim(False)()
    median = next((r["median_s"] for r in case_rows if r["variant"].endswith("+shim")), None)
    inside = timing.shim_totals(wall, report.rows)["shim_seconds"]
    return {"shim_report_one_run": report.to_dict(),
            "shim_seconds_one_run": inside,
            "shim_share_of_median": inside / median if median else None}


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: emulated DirectML device, tiny sizes (checks the code path)")
    parser.add_argument("--batch", type=int, default=8, metavar="N",
                        help="throughput is measured at batch 1 and batch N (default 8)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch {args.batch}: must be a positive number of utterances")
    if args.json is None:  # results are the point of a GPU run: always keep them
        args.json = str(ROOT / "benchmarks" / "results" /
                        ("gpu-dry-run.json" if args.dry_run else "gpu.json"))
    b = Bench(args.dry_run, args.quick, args.batch)
    rows, extra = [], {"device": str(b.device), "target": b.target, "dry_run": b.dry_run}
    if b.device.type == "cuda":
        extra["gpu"] = torch.cuda.get_device_name()
    for part in (lstm_rows, paraformer_rows):
        part_rows, part_extra = part(b)
        rows += part_rows
        extra.update(part_extra)
    extra["failed"] = b.failed
    timing.finish(args, "gpu", rows, extra)
    if b.failed:
        print("\nfailed variants (not timed):", *(f"  {k}: {v}" for k, v in b.failed.items()),
              sep="\n")


if __name__ == "__main__":
    main()
