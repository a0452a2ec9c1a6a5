"""Shared timing helper for the scripts in benchmarks/.

Variants are timed interleaved (A B C A B C ...), so drift on a busy machine hits
them all alike: compare ratios, not absolute times. Times are seconds per call.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import time
import timeit
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    min_s: float
    median_s: float
    repeats: int

    @classmethod
    def of(cls, samples):
        """The timing of a list of per-call times (seconds)."""
        return cls(min(samples), statistics.median(samples), len(samples))


def measure(funcs, *, repeats=15, warmup=2, number=1, setup=None):
    """Time zero-argument callables ``{variant: fn}``, interleaved.

    Each of ``repeats`` rounds runs every fn ``number`` times in a row (use
    number > 1 for microsecond calls); ``warmup`` untimed rounds come first.
    ``setup`` ``{variant: fn}`` runs untimed before each of that variant's turns
    (e.g. ``dmlshim.activate``/``deactivate``). Garbage collection is off while
    timing (timeit's default). Returns ``{variant: Timing}`` in the order given.
    """
    setup = setup or {}
    timers = {name: timeit.Timer(fn, setup.get(name, "pass")) for name, fn in funcs.items()}
    for _ in range(warmup):
        for name, fn in funcs.items():
            setup.get(name, lambda: None)()
            fn()
    samples = {name: [] for name in funcs}
    for _ in range(repeats):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(number) / number)
    return {name: Timing.of(s) for name, s in samples.items()}


def activated(gate):
    """A ``setup`` fn: dmlshim active with gate ``gate`` (``DMLSHIM_GATE``: ``"auto"``, the
    compiled gate where it is built; ``"python"``, a machine without a C++ compiler), so one
    process times both side by side; ``"auto"`` puts the default back."""
    def setup():
        import dmlshim
        dmlshim.deactivate()
        os.environ["DMLSHIM_GATE"] = gate
        dmlshim.activate()
    return setup


def traced(fn):
    """Run ``fn()`` once with fresh dmlshim stats: ``(wall_s, dmlshim.report(), fn's result)``.

    The shim must already be active; dmlshim is imported here so that scripts which
    never trace need not import it.
    """
    import dmlshim

    dmlshim.trace.reset()
    start = time.perf_counter()
    result = fn()
    wall_s = time.perf_counter() - start
    return wall_s, dmlshim.report(), result


def shim_totals(wall_s, rows, passed=None):
    """JSON ``extra`` totals of one traced run: ``rows`` from ``dmlshim.report().rows``.

    ``shim_seconds`` is the time inside shim wrappers (including the CPU work of
    what they send to the CPU and the copies), ``shim_share`` its fraction of
    ``wall_s``; its parts (``dmlshim.trace``) ``own_seconds`` (the intercepted ops' own
    device work), ``substitute_seconds`` (CPU islands and copies, ops recomputed on the
    device) and ``overhead_seconds`` (dmlshim's Python, checks, host reads), each with its
    ``*_share`` of ``wall_s`` (issue 38: overhead at most 5% of the device run); bytes
    copied host->device and device->host; intercepted calls.  ``passed``:
    ``report().passed``, the Python kernels' passed-through calls, whose time is overhead
    in no row (``passed_seconds``, in ``shim_seconds`` and ``overhead_seconds`` too).
    """
    from dmlshim import trace

    t = trace.totals(rows, passed)
    parts = {p: t[p] for p in trace.PARTS}
    return {"traced_wall_s": wall_s, "shim_seconds": t["seconds"], "shim_share": t["seconds"] / wall_s,
            **{f"{p}_seconds": s for p, s in parts.items()},
            **{f"{p}_share": s / wall_s for p, s in parts.items()}, "passed_seconds": t["passed_seconds"],
            "bytes_h2d": t["h2d"], "bytes_d2h": t["d2h"], "intercepted_calls": t["calls"]}


def top_passed(passed, n=8):
    """The ``n`` ops of ``report().passed`` (Python kernels that passed device calls through:
    overhead in no row) with the most seconds, as ``{op: {"calls", "seconds"}}``."""
    return dict(sorted(passed.items(), key=lambda item: -item[1]["seconds"])[:n])


def passed_text(passed, n=4):
    """:func:`top_passed` as text: ``aten::mul 120x 1.2 ms, ...``, or ``none``."""
    return ", ".join(f"{op} {p['calls']}x {p['seconds'] * 1e3:.1f} ms"
                     for op, p in top_passed(passed, n).items()) or "none"


def split_note(totals):
    """``overhead X%, substitute Y%`` of a traced run's wall time, from :func:`shim_totals`."""
    return (f"overhead {100 * totals['overhead_share']:.1f}%, "
            f"substitute {100 * totals['substitute_share']:.1f}%")


def rows(case, timings, baseline=None, note=""):
    """CONTRACT rows for one case; ratio = median / the ``baseline`` variant's median."""
    base = timings[baseline].median_s if baseline else None
    return [{"case": case, "variant": name, "min_s": t.min_s, "median_s": t.median_s,
             "repeats": t.repeats, "ratio": t.median_s / base if base else None, "note": note}
            for name, t in timings.items()]


def write_json(path, benchmark, rows, extra=None):
    """Write the CONTRACT schema: {"benchmark", "rows": [...], "extra": {...}, "machine":
    machine()}."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"benchmark": benchmark, "rows": rows, "extra": extra or {}, "machine": machine()},
                  f, indent=2)


def machine():
    """CPU model, core count, OS, Python and torch versions, and the UTC date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch
    return {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def seconds(s):
    """Human-readable duration: '1.23 µs', '4.56 ms', '7.89 s'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale * 0.9995 or unit == "ns":  # 0.9995: 999.96 ns reads '1 µs'
            return f"{s / scale:.3g} {unit}"


COLUMNS = ("benchmark", "case", "variant", "min", "median", "ratio", "note")
# The keys of a timing row (:func:`rows`, the CONTRACT schema). A benchmark may write rows of
# another shape, records with columns of their own: benchmarks/model_syncs.py writes one per
# model ("model", "device ops", "syncs: ...", docs/gen_tables.py's ``syncs`` table).
TIMING_KEYS = ("case", "variant", "min_s", "median_s")


def is_timing_row(row):
    """Whether ``row`` is a timing row (:func:`rows`), not a record of another shape."""
    return all(key in row for key in TIMING_KEYS)


def _duration(s):
    return "" if s is None else seconds(s)


def cells(row):
    """One row's table cells, in COLUMNS order: times as ``seconds()``, ratio as '1.23x'.

    A record of another shape (:func:`is_timing_row` false) reads: its first column's value
    as the case, the others as ``column: value`` pairs in the note."""
    if not is_timing_row(row):
        record = [(k, v) for k, v in row.items() if k != "benchmark"]
        return [row.get("benchmark", ""), str(record[0][1]) if record else "", "", "", "", "",
                "; ".join(f"{k}: {v}" for k, v in record[1:])]
    ratio = row.get("ratio")
    return [row.get("benchmark", ""), row["case"], row["variant"], _duration(row["min_s"]),
            _duration(row["median_s"]), "" if ratio is None else f"{ratio:.2f}x", row.get("note", "")]


def format_table(rows):
    """Rows (with an optional "benchmark" key) as text: the timing rows as one aligned table,
    then each record of another shape (:func:`is_timing_row`) as a block of ``column: value``
    lines under its benchmark and first column's value."""
    timed = [r for r in rows if is_timing_row(r)]
    parts = []
    if timed:
        cols = list(COLUMNS if any("benchmark" in r for r in timed) else COLUMNS[1:])
        table = [cells(r)[-len(cols):] for r in timed]
        widths = [max(len(str(c)) for c in col) for col in zip(cols, *table)]
        parts.append("\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
                               for line in [cols, ["-" * w for w in widths], *table]))
    for r in rows:
        if not is_timing_row(r):
            record = [(k, v) for k, v in r.items() if k != "benchmark"]
            head = ": ".join(str(x) for x in (r.get("benchmark"), record[0][1] if record else None)
                             if x is not None)
            parts.append("\n".join([head] + [f"    {k}: {v}" for k, v in record[1:]]))
    return "\n\n".join(parts)


def results_path(name):
    """``benchmarks/results/<name>`` (where docs/gen_tables.py reads), the folder made if
    missing: the default ``--json`` of a benchmark whose figures the docs quote."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, name)


def default_json(args, name):
    """``args.json`` unless given: ``benchmarks/results/<name>-torch<version>.json``, one
    results file per torch lane; none for a ``--quick`` run (it would replace the figures)."""
    import torch
    if args.json is None and not args.quick:
        args.json = results_path(f"{name}-torch{torch.__version__.split('+')[0]}.json")


def emulated_extra():
    """The JSON ``extra`` of a run on the emulated device: device, torch version, threads."""
    import torch
    return {"device": "emulated privateuseone", "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def arg_parser(description):
    """The common command line: ``--quick`` and ``--json PATH``; add your own, then parse."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")
    parser.add_argument("--json", metavar="PATH", help="write rows as JSON (CONTRACT schema)")
    return parser


def finish(args, benchmark, rows, extra=None):
    """Print the table and, with ``--json PATH``, write the JSON file."""
    print(format_table(rows))
    if args.json:
        write_json(args.json, benchmark, rows, extra)
