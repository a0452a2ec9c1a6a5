"""The routing sweep: where each aten overload OpInfo samples reach goes on the real binary.

For the first OpInfo samples (float32, float16, int64, bool; ``--samples`` each), one child process per
device runs every sample, raw, under a ``TorchDispatchMode`` that records each aten
overload the dispatcher sees below autograd and which one raised.  Per sample it records:

* the CPU fallback: torch-directml warns once per process (``TORCH_WARN_ONCE``), but every
  time under ``torch.set_warn_always(True)``, naming the overload that fell back
  (``aten::erfinv.out``); both Python warnings and C++ warnings on stderr are read;
* an exception, with the overload that raised it: ``NotImplementedError`` (no CPU kernel
  behind the fallback, failure_modes.md #34), a *stack* failure (E_INVALIDARG / E_FAIL
  after a vkd3d ``err:`` line: dxil-spirv could not translate a shader, docs/realdml.md),
  ``float64``, or another error;
* an abort: the child dies; the overload it was in is read from its progress file, and a
  new child goes on after that sample.  Samples whose inputs or outputs hold a dtype
  DirectML aborts on (bf16, complex) are not run (as in the conformance harness).

Devices: ``emulated`` (``dmlshim.emulation``, float64 off) and ``real`` (torch-directml
0.2.5 on ``dmlshim realdml`` with ``--no-fp64``).  Each overload then gets one outcome per
device (``fallback`` > ``NotImplementedError`` > ``device``; a kernel that failed in every
sample reached: ``error``/``stack``/``abort``), compared with the outcome the routing
table (``dmlshim/data/dml_op_routing_torch241.tsv``) predicts and with the emulator's.
The real child also re-reads the live dispatcher's PrivateUse1 entry of every overload of
the table (``torch._C._dispatch_dump_table``) and compares it with the table's route.

Usage (the torch 2.4.1 + torch-directml venv, the stack built)::

    python benchmarks/fidelity_routing.py [--samples 2] [--out benchmarks/results/fidelity-routing.json]

Docs: docs/fidelity.md ("Routing"), its tables generated from the JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ("emulated", "real")
DTYPES = ("float32", "float16", "int64", "bool")      # the conformance harness's
CHILD_TIMEOUT = 900
FALLBACK_TEXT = re.compile(r"The operator 'aten::([\w.]+)' is not currently supported on the DML backend")
NOT_RUN = re.compile(r"Could not run 'aten::([\w.]+)'")
# Outcomes, most telling first: an overload's outcome on a device is the first one seen in
# any sample (``device`` only when nothing else was; errors only when no sample ran it).
ROUTES = ("fallback", "NotImplementedError", "device")
FAILURES = ("stack", "abort", "float64", "error")
# What each route of the table predicts for a call of the overload itself.
EXPECTED = {"DML_KERNEL": "device", "CPU_FALLBACK": "fallback",
            "CPU_FALLBACK_NO_CPU_KERNEL": "NotImplementedError",
            "COMPOSITE_EXPLICIT": "device", "COMPOSITE_IMPLICIT": "device"}
# Rows where the emulator or the table may rightly differ from the real binary, with the
# evidence (filled in from the sweep; an overload not here that disagrees is a finding).
SPECIFIC = {
    "_to_sparse": "not modelled (open): on the real binary `x.to_sparse()` returns a strided "
                  "tensor, silently not sparse (measured); the emulator's sparse result has no "
                  "storage to alias and raises. No model seen needs it.",
    "_to_sparse.sparse_dim": "as `_to_sparse` (the CPU fallback's sparse result)",
    "max_pool2d_with_indices_backward":
        "backward not modelled (emulation/rules_refused.py): the emulator gives `max_pool2d`'s "
        "`ceil_mode` forward the real binary's floor-mode shape (defect max_pool_ceil), so a "
        "backward sample handed the ceil shape's gradient meets the CPU kernel's shape check; "
        "the real backward runs and misplaces the gradients (measured). dmlshim's max_pool_ceil "
        "fix sends forward and backward to the CPU.",
}


# ------------------------------------------------------------------ the child

def _device(kind):
    if kind == "real":
        import torch_directml
        return torch_directml.device()
    from dmlshim import emulation
    device = emulation.install()
    emulation.configure(has_float64_support=False)
    return device


def _recorder(echo):
    """A dispatch mode that lists the aten overloads called and the first that raised."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from dmlshim.emulation.routing import op_name

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen, self.failed = [], None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = op_name(func) if func.namespace == "aten" else str(func)
            if name not in self.seen:
                self.seen.append(name)
            echo(f"O {name}")                 # the parent's clue when this call aborts
            try:
                return func(*args, **(kwargs or {}))
            except Exception:
                self.failed = self.failed or name
                raise
    return Recorder()


def _not_run(case):
    """Why a case is not run (a dtype that aborts torch-directml's process), or None."""
    from dmlshim import conformance as c
    found = c._tensors(case.sample)
    c._tree_map(lambda x: found.append(x) if hasattr(x, "dtype") and hasattr(x, "device") else x,
                case.expected)
    fatal = sorted({str(t.dtype) for t in found if t.dtype in c.NEVER_HELD}
                   | ({"complex (inside the op)"} if case.op.startswith(c.COMPLEX_INSIDE) else set()))
    return f"not run: {', '.join(fatal)} aborts torch-directml's process" if fatal else None


def _outcome(exc, errs):
    """The class of an exception of a device run, and its text."""
    from dmlshim import conformance as c
    from dmlshim.emulation import FatalDirectMLError
    text = c._text(exc)
    chain = c._chain(exc)
    if any(isinstance(e, NotImplementedError) for e in chain):
        return "NotImplementedError", text
    if any(isinstance(e, FatalDirectMLError) for e in chain):
        return "abort", text
    if errs and any(h in text for h in c.STACK_HRESULTS):
        return "stack", c._short(f"{text} after vkd3d {errs[0].strip()}")
    if any("does not support Double" in str(e) for e in chain):
        return "float64", text
    return "error", text


def _cases(ops, samples, after):
    """``(key, case)`` for the OpInfo samples in ``op_db`` order, made one OpInfo at a time
    (a child that resumes after an abort makes only those still to run); ``key`` is
    ``(position in op_db, dtype, sample index)``, and the cases up to ``after`` are skipped."""
    from dmlshim import conformance as c
    pattern = re.compile(ops) if ops else None
    with c._no_test_lookup():
        for pos, opinfo in enumerate(c.op_db()):
            if pos < after[0] or (pattern and not pattern.search(opinfo.name)):
                continue
            for d, dtype in enumerate(DTYPES):
                out = c.Collected()
                c._collect_op(opinfo, dtype, samples, out)
                for case in out.cases:
                    if (pos, d, case.index) > after:
                        yield [pos, d, case.index], case


def child_sweep(kind, after, samples, progress, ops=None):
    """Run the cases after ``after`` on ``kind``'s device; one JSON line per case on stdout."""
    import warnings
    import torch
    from dmlshim import conformance as c

    fd = os.open(progress, os.O_WRONLY | os.O_APPEND)
    echo = lambda line: os.write(fd, (line + "\n").encode())        # noqa: E731
    device = _device(kind)
    torch.set_warn_always(True)           # the fallback warns per call, not once per process
    for key, case in _cases(ops, samples, after):
        record = {"key": key, "sample": f"{case.op}.{case.variant}:{case.dtype}#{case.index}"}
        echo(f"S {':'.join(map(str, key))} {record['sample']}")
        skip = _not_run(case)
        if skip:
            print(json.dumps({**record, "error": {"class": "abort", "op": None, "message": skip}}), flush=True)
            continue
        recorder = _recorder(echo)
        with warnings.catch_warnings(record=True) as caught, _stderr_to(progress + ".err") as log:
            warnings.simplefilter("always")
            error = None
            try:
                inputs, args, kwargs = c._to_device(case, device)
                torch.manual_seed(0)
                with recorder:
                    case.opinfo(inputs, *args, **kwargs)
            except Exception as exc:      # noqa: BLE001 - the failure is the finding
                error = exc
        lines = [str(w.message) for w in caught] + log()
        record["ops"] = recorder.seen
        record["fallbacks"] = sorted({m.group(1) for line in lines for m in FALLBACK_TEXT.finditer(line)})
        if error is not None:
            cls, text = _outcome(error, [line for line in log() if "err:" in line])
            named = NOT_RUN.search(text)
            record["error"] = {"class": cls, "op": named.group(1) if named else recorder.failed,
                               "message": text}
        print(json.dumps(record), flush=True)
    return None


@contextlib.contextmanager
def _stderr_to(path):
    """File descriptor 2 into ``path`` (vkd3d and torch-directml log from C, and an abort's
    last words must outlive the process: the parent reads them); yields a function that
    returns the lines written."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, 2)
    os.close(target)
    try:
        yield lambda: Path(path).read_text(errors="replace").splitlines()
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def child_table():
    """The live dispatcher's PrivateUse1 entry of every overload of the routing table,
    classified as the table's header says it was made; ``{name: route}`` where it differs."""
    import torch
    import torch_directml  # noqa: F401 - registers torch-directml's kernels
    from dmlshim.emulation import routing
    differ, checked = {}, 0
    for name, (route, delegate) in routing.table().items():
        if route == routing.UNKNOWN:
            continue
        try:
            dump = torch._C._dispatch_dump_table(f"aten::{name}")
        except RuntimeError:
            differ[name] = "not an operator here"
            continue
        checked += 1
        live = _live_route(name, dump)
        if live != route:
            differ[name] = live
    return {"checked": checked, "differ": differ}


def _live_route(name, dump):
    entry = next((line for line in dump.splitlines() if line.startswith("PrivateUse1:")), "")
    if "torch_directml" in entry and "[kernel]" in entry:
        return "DML_KERNEL"
    if "dml_cpu_fallback" in entry:
        from dmlshim.emulation import routing
        return "CPU_FALLBACK" if routing.has_cpu_kernel(name) else "CPU_FALLBACK_NO_CPU_KERNEL"
    if "CompositeImplicitAutograd" in entry or "[catch all]" in entry:
        # a catch-all kernel (register_distributed_ops' get_gradients) serves every backend
        # before the fallback, as a math kernel does
        return "COMPOSITE_IMPLICIT"
    if "CompositeExplicitAutogradNonFunctional" in entry:
        # structured: the table names the out= delegate's route instead (routing.table())
        from dmlshim.emulation import routing
        return routing.table()[name][0]
    if "CompositeExplicitAutograd" in entry:
        return "COMPOSITE_EXPLICIT"
    return f"other: {entry[:80]}"


# ------------------------------------------------------------------ the parent

def _env(kind):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if kind == "real":
        from dmlshim.realdml import stack
        # a stack failure is told apart by an err: line of vkd3d or its shader compiler
        env.update(VKD3D_DEBUG="err", VKD3D_SHADER_DEBUG="err")
        env.update(stack.current().environment(fp64=False, base=env))
    return env


def run_device(python, kind, samples, ops=None):
    """Every case on ``kind``'s device, a new child after each abort: ``[record]``."""
    records, after = [], "-1:0:0"
    with tempfile.NamedTemporaryFile("w+", suffix=".progress") as progress:
        while True:
            progress.truncate(0)
            cmd = [python, str(Path(__file__)), "--child", "sweep", "--device", kind, f"--after={after}",
                   "--samples", str(samples), "--progress", progress.name] + (["--ops", ops] if ops else [])
            done = subprocess.run(cmd, env=_env(kind), capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT, cwd=str(ROOT))
            records += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode == 0:
                break
            if not Path(progress.name).read_text().strip():
                raise RuntimeError(f"{kind} child failed before its first case:\n{done.stderr[-2000:]}")
            after = _record_abort(records, done, progress.name)
    Path(progress.name + ".err").unlink(missing_ok=True)
    return records


def _record_abort(records, done, progress):
    """Record the case a dead child was in, with the overload it was calling; its key."""
    steps = Path(progress).read_text().splitlines()
    at = max(i for i, line in enumerate(steps) if line.startswith("S "))
    _, key, sample = steps[at].split(" ", 2)
    ops = [line[2:] for line in steps[at + 1:] if line.startswith("O ")]
    how = (f"signal {signal.Signals(-done.returncode).name}" if done.returncode < 0
           else f"exit {done.returncode}")
    err = Path(progress + ".err")
    said = (err.read_text(errors="replace") if err.is_file() else "") + done.stderr
    fatal = [line for line in said.splitlines()
             if line.startswith(("[F ", "terminate", "Fatal Python", "what():"))]
    records.append({"key": [int(k) for k in key.split(":")], "sample": sample, "died": True, "ops": list(dict.fromkeys(ops)), "fallbacks": [],
                    "error": {"class": "abort", "op": ops[-1] if ops else None,
                              "message": f"process died ({how}) {(fatal or [''])[-1][:160]}".strip()}})
    return key


def outcomes(records):
    """``{overload: {"outcome": ..., "counts": {outcome: samples}, "example": text}}``."""
    from dmlshim.emulation import routing
    per = defaultdict(Counter)
    example = {}
    for r in records:
        error = r.get("error") or {}
        warned = set(r.get("fallbacks", []))
        for name in r.get("ops", []):
            delegate = routing.lookup(name)[1]
            if name == error.get("op"):
                continue
            per[name]["fallback" if name in warned or delegate in warned else "device"] += 1
        for name in warned:
            if name not in r.get("ops", []):
                per[name]["fallback"] += 1   # reached inside a composite the mode does not see
        if error.get("op"):
            per[error["op"]][error["class"]] += 1
            example.setdefault((error["op"], error["class"]), error["message"])
    out = {}
    for name, counts in sorted(per.items()):
        outcome = next((o for o in ROUTES if counts[o]), None) or counts.most_common(1)[0][0]
        out[name] = {"outcome": outcome, "counts": dict(counts),
                     "examples": {cls: example[(name, cls)] for cls in counts if (name, cls) in example}}
    return out


def expected(name):
    """The outcome the routing table predicts for a call of ``name`` itself (None: not in it)."""
    from dmlshim.emulation import routing
    route = routing.route(name)
    return EXPECTED.get(route)


def compare(real, emulated):
    """One row per overload reached on either device."""
    rows = []
    for name in sorted(set(real) | set(emulated)):
        r, e = real.get(name), emulated.get(name)
        row = {"op": name, "table": expected(name), "real": r, "emulated": e}
        row["table_agrees"] = r is None or row["table"] is None or r["outcome"] not in ROUTES \
            or r["outcome"] == row["table"]
        row["emulator_agrees"] = r is None or e is None or r["outcome"] == e["outcome"]
        row["specific"] = SPECIFIC.get(name)
        rows.append(row)
    return rows


def _versions(python):
    code = ("import json, torch, importlib.metadata as m; print(json.dumps({'torch': torch.__version__, "
            "'torch_directml': m.version('torch-directml')}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fidelity-routing.json"))
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter with torch 2.4.1 and torch-directml 0.2.5 (default: this one)")
    parser.add_argument("--samples", type=int, default=4, help="OpInfo samples per op and dtype")
    parser.add_argument("--ops", help="a regular expression on OpInfo names (default: all)")
    parser.add_argument("--child", choices=("sweep", "table"), help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=DEVICES, help=argparse.SUPPRESS)
    parser.add_argument("--after", default="-1:0:0", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "sweep":
        child_sweep(args.device, tuple(int(k) for k in args.after.split(":")), args.samples, args.progress,
                    args.ops)
        return 0
    if args.child == "table":
        print(json.dumps(child_table()), flush=True)
        return 0

    sys.path.insert(0, str(ROOT))
    import timing
    start = time.perf_counter()
    done = subprocess.run([args.python, str(Path(__file__)), "--child", "table"], env=_env("real"),
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT, cwd=str(ROOT), check=True)
    table = json.loads(done.stdout.splitlines()[-1])
    records, seconds = {}, {}
    for kind in DEVICES:
        t0 = time.perf_counter()
        records[kind] = run_device(args.python, kind, args.samples, args.ops)
        seconds[kind] = round(time.perf_counter() - t0, 1)
        print(f"{kind}: {len(records[kind])} samples, {seconds[kind]} s", file=sys.stderr)
    per = {kind: outcomes(records[kind]) for kind in DEVICES}
    rows = compare(per["real"], per["emulated"])
    data = {"benchmark": "fidelity-routing", "samples": args.samples, "dtypes": list(DTYPES),
            "fp64": False, "table_check": table, "rows": rows,
            "aborts": {kind: [r for r in records[kind] if (r.get("error") or {}).get("class") == "abort"
                              and r.get("died")] for kind in DEVICES},
            "sample_counts": {kind: len(records[kind]) for kind in DEVICES},
            "machine": {**timing.machine(), **_versions(args.python)}, "seconds": seconds,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    bad = [r["op"] for r in rows if not (r["table_agrees"] and r["emulator_agrees"]) and not r["specific"]]
    print(f"{len(rows)} overloads, table: {table['checked']} checked, {len(table['differ'])} differ; "
          f"{len(bad)} disagree: {', '.join(bad) or '-'}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
