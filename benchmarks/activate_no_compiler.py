"""What ``activate()`` costs on a machine with no C++ compiler (issue 48): ``DMLSHIM_GATE=auto``
against ``python``.

Each round starts two fresh processes, one per variant, interleaved: PATH holds only the
interpreter's folder (no compiler), the torch extensions folder holds only the emulated
device's build (copied; torch 2.4.1's emulator needs it) and dmlshim's cache is empty. Each
process installs the emulated device, then times its first ``activate()`` (which probes the
device) and a second one after ``deactivate()``; ``auto`` also tries to get the compiled gate,
once, and warns. Rows: seconds of the first and the second ``activate()``, minimum and median
over ``--repeats`` rounds; ratio = median / the ``python`` gate's median.

Run: ``python benchmarks/activate_no_compiler.py [--quick] [--json PATH]`` (default
``benchmarks/results/activate_no_compiler-torch<version>.json``).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # this checkout's dmlshim

CHILD = """
import json, time, dmlshim
from dmlshim import emulation
emulation.install()
t = time.perf_counter(); dmlshim.activate(); first = time.perf_counter() - t
dmlshim.deactivate()
t = time.perf_counter(); dmlshim.activate(); again = time.perf_counter() - t
print(json.dumps({"first": first, "again": again}))
"""
VARIANTS = ("python", "auto")


def environment(folder: str) -> dict:
    """A child's environment with no compiler, an empty dmlshim cache and only the emulated
    device's build among the extensions."""
    from dmlshim import cpp_build
    from dmlshim.emulation import _compiled
    name = cpp_build.module_name("dmlshim_emulation", _compiled.SOURCE)
    built = cpp_build._built(name, load=False) or (_compiled.extension() and cpp_build._built(name, load=False))
    shutil.copytree(os.path.dirname(built), os.path.join(folder, "ext", name))
    return {"PATH": os.path.dirname(sys.executable), "HOME": folder, "TORCH_EXTENSIONS_DIR": os.path.join(folder, "ext"),
            "PYTHONPATH": os.pathsep.join(sys.path)}


def once(env: dict, gate: str, cache: str) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-c", CHILD], env={**env, "DMLSHIM_GATE": gate, "XDG_CACHE_HOME": cache},
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="rounds of one process per variant (default 9)")
    args = parser.parse_args()
    timing.default_json(args, "activate_no_compiler")
    import torch
    repeats = 2 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as folder:
        env = environment(folder)
        samples = {(gate, which): [] for gate in VARIANTS for which in ("first", "again")}
        for _ in range(repeats):
            for gate in VARIANTS:
                for which, seconds in once(env, gate, os.path.join(folder, "cache")).items():
                    samples[(gate, which)].append(seconds)
    rows = []
    for which in ("first", "again"):
        t = {f"DMLSHIM_GATE={gate}": timing.Timing.of(samples[(gate, which)]) for gate in VARIANTS}
        rows += timing.rows(f"{which} activate()", t, baseline="DMLSHIM_GATE=python",
                            note="no C++ compiler on PATH; seconds per activate()")
    timing.finish(args, "activate_no_compiler", rows,
                  {"torch": torch.__version__, "device": "emulated privateuseone", "repeats": repeats})


if __name__ == "__main__":
    main()
