"""Run ``python -m dmlshim conformance --device directml`` in ``--ops`` chunks under
``realdml run``, each chunk until it ends without the process ending.

The real binary ends the process on some samples (signal 11, an abort: docs/conformance.md).
A chunk runs with ``DMLSHIM_CONFORMANCE_ECHO=1``; when its process ends, the last sample
it named goes into ``DMLSHIM_CONFORMANCE_SKIP`` (that one sample, ``NAME$``) and the chunk
runs again; when a second sample of the same op and mode ends it, that op's remaining
samples in that mode are skipped (``MODE:OP.VARIANT:``: one rerun per crashing sample
would take hours). Each chunk's JSON gets the skip entries (``process_ends``); join the
chunks with ``benchmarks/merge_conformance.py``::

    python benchmarks/realdml_conformance.py OUT_DIR [--chunks R1 R2 ...] -- CONFORMANCE_ARGS...

Run from the checkout whose dmlshim is measured (the working directory is first on sys.path).
"""
import argparse
import json
import os
import subprocess
import sys
import time

# Every OpInfo name once (torch 2.4.1: 619 names; "H" and "T" too): by first letter, nn.functional in three.
CHUNKS = [r"^[a-b]", r"^c", r"^[d-f]", r"^[g-k]", r"^l", r"^m",
          r"^n(?!n\.functional\.)", r"^nn\.functional\.[a-e]", r"^nn\.functional\.[f-o]",
          r"^nn\.functional\.[p-z_]", r"^[o-r]", r"^s", r"^[t-zA-Z_]"]
RETRIES = 40
PY = sys.executable
STACK_ENV = ["VKD3D_DEBUG=err", "VKD3D_SHADER_DEBUG=err"]


def last_sample(err_path):
    """The last sample the run named on stderr (``DMLSHIM_CONFORMANCE_ECHO``), or None."""
    name = None
    with open(err_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("sample "):
                name = line.split(" ", 1)[1].strip()
    return name


def run_chunk(regex, index, out_dir, args):
    """Run one chunk until its JSON is written; returns (seconds, skipped sample names)."""
    out = os.path.join(out_dir, f"chunk{index:02d}.json")
    err = os.path.join(out_dir, f"chunk{index:02d}.err")
    skips, start = [], time.perf_counter()
    for _ in range(RETRIES):
        env = dict(os.environ, DMLSHIM_CONFORMANCE_ECHO="1", DMLSHIM_CONFORMANCE_SKIP=",".join(skips))
        cmd = [PY, "-m", "dmlshim", "realdml", "run", "--", "env", *STACK_ENV, PY, "-m", "dmlshim",
               "conformance", "--device", "directml", "--no-progress", "--ops", regex,
               "--json", out, *args]
        with open(err, "w") as e, open(os.path.join(out_dir, f"chunk{index:02d}.out"), "w") as o:
            rc = subprocess.run(cmd, stdout=o, stderr=e, env=env).returncode
        if rc in (0, 1) and os.path.exists(out):
            break
        ended = last_sample(err)
        if ended is None or ended + "$" in skips:
            raise SystemExit(f"chunk {regex}: exit {rc} with no new sample named (see {err})")
        op = ended.split(":")[0] + ":" + ended.split(":")[1] + ":"      # MODE:OP.VARIANT:
        skip = op if any(s.startswith(op) for s in skips) else ended + "$"
        print(f"chunk {regex}: exit {rc} at {ended}; again without {skip}", flush=True)
        skips.append(skip)
    data = json.load(open(out, encoding="utf-8"))
    data["process_ends"] = skips
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    return time.perf_counter() - start, skips


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--chunks", nargs="+", default=CHUNKS)
    p.add_argument("--reverse", action="store_true",
                   help="last chunk first (a second runner beside one going forward)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="after --: conformance's options")
    a = p.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    os.makedirs(a.out_dir, exist_ok=True)
    order = list(enumerate(a.chunks))
    for i, regex in reversed(order) if a.reverse else order:
        if os.path.exists(os.path.join(a.out_dir, f"chunk{i:02d}.json")):
            continue                  # done in an earlier call: resume after the last one
        seconds, skips = run_chunk(regex, i, a.out_dir, args)
        print(f"chunk {i} {regex}: {seconds:.0f} s, process ends: {skips}", flush=True)


if __name__ == "__main__":
    main()
