"""Trace overhead: ``DMLSHIM_TRACE`` off vs on, on the emulated DirectML device.

The workload is FunASR-like steps that each go through a shim wrapper: 10 times
``x * bool_mask`` (coerce), depthwise ``conv1d``, ``cat`` with an empty tensor
(drop-empty), then a bidirectional LSTM (CPU fallback). Variants: the
shim with tracing off (baseline), to the ``dmlshim`` logger (a handler writing to
os.devnull, so formatting is paid but no terminal), and to a JSON Lines file.
For the small case the note gives the added cost per intercepted call (from the
min times, the least noisy on a shared machine); at FunASR's width only the ratio
is meaningful. One intra-op thread: tracing is per-call
Python work, and a single thread keeps a loaded machine's thread contention out
of the comparison.

    python benchmarks/trace_overhead.py [--quick] [--json PATH]
"""
import logging
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import timing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dmlshim  # noqa: E402
from dmlshim import emulation  # noqa: E402


def workload(dev, channels, steps):
    """A zero-argument callable running the block once on ``dev``; all shapes (1, C, T)."""
    x = torch.randn(1, channels, steps).to(dev)
    mask = (torch.arange(steps) < steps - 2).expand(1, channels, steps).to(dev)
    weight = torch.randn(channels, 1, 11).to(dev)
    empty = torch.zeros(1, channels, 0).to(dev)
    lstm = torch.nn.LSTM(channels, channels, batch_first=True, bidirectional=True).to(dev)

    def run():
        with torch.no_grad():
            y = x
            for _ in range(10):
                y = F.conv1d(y * mask, weight, padding=5, groups=channels)
                y = torch.cat([y, empty], dim=2)
            out, _ = lstm(y.transpose(1, 2))
            return out
    return run


def activate(trace):
    def switch():
        dmlshim.deactivate()
        dmlshim.activate(trace=trace)
    return switch


def main():
    args = timing.arg_parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    dev = emulation.install()
    log = logging.getLogger("dmlshim")
    log.setLevel(logging.INFO)
    log.propagate = False
    devnull = open(os.devnull, "w", encoding="utf-8")
    log.addHandler(logging.StreamHandler(devnull))
    sizes = [(8, 16)] if args.quick else [(8, 16), (512, 100)]
    rows, extra = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "trace.jsonl")
        variants = {"trace off": False, "trace=1 (logger)": True, "trace=file (JSON Lines)": jsonl}
        setup = {name: activate(trace) for name, trace in variants.items()}
        for channels, steps in sizes:
            run = workload(dev, channels, steps)
            setup["trace=file (JSON Lines)"]()
            before = os.path.getsize(jsonl) if os.path.exists(jsonl) else 0
            run()
            dmlshim.deactivate()  # flushes and closes the trace file
            with open(jsonl, encoding="utf-8") as f:
                f.seek(before)
                calls = sum(1 for _ in f)
            # activate() after deactivate() starts with an empty LSTM weight cache:
            # one untimed run refills it, so the timed runs see the steady state
            warm = {name: (lambda name=name: (setup[name](), run())) for name in variants}
            t = timing.measure({name: run for name in variants}, setup=warm,
                               repeats=10 if args.quick else 30, number=5)
            case_rows = timing.rows(f"C={channels}, T={steps}", t, baseline="trace off")
            base = t["trace off"].min_s
            for row in case_rows:  # per call only where the calls, not the math, dominate
                per_call = f", {(row['min_s'] - base) / calls * 1e6:+.1f} µs/call" if channels <= 64 else ""
                row["note"] = f"{calls} calls/run{per_call}"
            rows += case_rows
            extra[f"C={channels}, T={steps}"] = {"intercepted_calls_per_run": calls}
    dmlshim.deactivate()
    devnull.close()
    timing.finish(args, "trace_overhead", rows, extra)


if __name__ == "__main__":
    main()
