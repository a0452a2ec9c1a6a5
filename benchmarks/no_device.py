"""What ``activate()`` costs on a machine with no DirectML device: CPU calls before and after.

One process with no target device (no torch-directml, no ``dmlshim.emulation``): each op
on 64-float CPU tensors is timed in two variants, interleaved round by round
(benchmarks/timing.py): ``no activate()`` (``deactivate()`` before each of its turns) and
``activate()`` (``activate()`` before each of its turns). Each figure is the minimum and
median of 25 rounds of 2,000 calls (``--repeats``: on a shared machine the minimum needs
many rounds to find a quiet one); ``ratio`` is median / median, the note gives min / min
and the time added per call (min). The JSON also records what ``activate()`` installed
(``patches.installed()``). Goal: <= 1.02x (issue 26).

Run: ``python benchmarks/no_device.py [--quick] [--json PATH]`` (default
``benchmarks/results/no_device-torch<version>.json``).
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # this checkout's dmlshim

BEFORE, AFTER = "no activate()", "activate()"
NUMBER = 2000               # calls per round


def cases():
    """``{name: zero-argument call}``: the ops of issue 26 on 64-float CPU tensors."""
    a, b = torch.rand(64), torch.rand(64)
    m, w, bias = torch.rand(8, 8), torch.rand(8, 8), torch.rand(8)
    return {"torch.mul(a, b)": lambda: torch.mul(a, b), "a * b": lambda: a * b,
            "torch.add(a, b)": lambda: torch.add(a, b), "torch.cat([a, b])": lambda: torch.cat([a, b]),
            "torch.relu(a)": lambda: torch.relu(a), "torch.matmul(m, m) 8x8": lambda: torch.matmul(m, m),
            "F.linear(m, w, bias) 8x8": lambda: F.linear(m, w, bias)}


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=25, help="rounds of 2,000 calls (default 25)")
    args = parser.parse_args()
    timing.default_json(args, "no_device")
    import dmlshim
    from dmlshim import patches, probing

    dmlshim.activate()
    installed, device = patches.installed(), probing.last().device
    dmlshim.deactivate()
    if device is not None:
        sys.exit(f"no_device.py: activate() found a device ({device}); run it where there is none")
    torch.set_num_threads(1)
    setup = {BEFORE: dmlshim.deactivate, AFTER: dmlshim.activate}
    rows, repeats = [], 3 if args.quick else args.repeats
    for case, call in cases().items():
        t = timing.measure({BEFORE: call, AFTER: call}, setup=setup, repeats=repeats, number=NUMBER)
        added = (t[AFTER].min_s - t[BEFORE].min_s) * 1e6
        rows += timing.rows(case, t, baseline=BEFORE,
                            note=f"min ratio {t[AFTER].min_s / t[BEFORE].min_s:.3f}x, "
                                 f"added {added:+.3f} us/call (min)")
    dmlshim.deactivate()
    timing.finish(args, "no_device", rows, {"torch": torch.__version__, "device": None,
                                            "installed": installed, "threads": 1, "number": NUMBER})


if __name__ == "__main__":
    main()
