"""What the first probing of a device costs in a child process (dmlshim.probe_child) against
in this process, on the emulated device, every probe of dmlshim.catalogue.

``in-process first``: the first pass of this process (probing.verdict_of per probe);
``in-process``: later passes; ``child``: ``probe_in_children`` (a fresh interpreter that
imports torch and dmlshim, installs the emulated device and runs every probe), timed
interleaved with ``in-process`` (benchmarks/timing.py).  Seconds per full pass.
Run: ``python benchmarks/probe_child_cost.py [--repeats 5]``.
"""
import argparse
import time
import warnings

import timing
from dmlshim import emulation, probe_child, probing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = emulation.install()
    probes = [d for d in probing.all_defects() if not d.static]
    warnings.simplefilter("ignore")

    def in_process():
        return {d.name: probing.verdict_of(d.probe, device) for d in probes}

    def child():
        return probe_child.probe_in_children([d.name for d in probes], "emulated", probing.TIMEOUT)

    start = time.perf_counter()
    first = in_process()
    print(f"{len(probes)} probes; in-process first: {time.perf_counter() - start:.3f} s")
    assert child() == first, "the child's verdicts differ from this process's"
    for name, t in timing.measure({"in-process": in_process, "child": child},
                                  repeats=args.repeats, warmup=0).items():
        print(f"{name}: median {t.median_s:.3f} s, min {t.min_s:.3f} s ({t.repeats} runs)")


if __name__ == "__main__":
    main()
