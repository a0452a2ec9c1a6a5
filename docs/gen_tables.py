"""Tables for the docs, made from benchmarks/results/*.json (an mkdocs hook).

A page asks for a table with a marker line; ``mkdocs build`` replaces it:

    <!-- results: conformance -->             the OpInfo conformance summary, one row per torch lane
    <!-- results: conformance groups -->      matches per dtype group and mode, rows per lane
    <!-- results: bench FILE.json -->         every row of one benchmark results file
    <!-- results: headline -->                the figures a user asks for first, per lane
                                              (``headline readme``: README.md's, without the LSTM's)
    <!-- results: no_device -->               CPU calls before/after activate() with no device
    <!-- results: bench FILE.json REGEX -->   its rows whose "BENCHMARK: CASE" matches REGEX (re.search)
    <!-- results: zoo FILE.json -->           the model table of examples/zoo.py --json
    <!-- results: syncs FILE.json -->         syncs and added time per model (benchmarks/model_syncs.py)
    <!-- results: fidelity defects -->        emulator vs real binary, per defect (benchmarks/fidelity.py)
    <!-- results: fidelity routing -->        per aten overload OpInfo reaches (benchmarks/fidelity_routing.py)
    <!-- results: doctor FILE.json [FILE.json ...] --> `dmlshim doctor --json` reports, side by side
    <!-- results: integers FILE.json FILE.json ... --> benchmarks/realdml_gpu/integers.py runs, side by side

Every table says where its figures come from: the file, the date, the machine and the
torch lane of the run (a file without a ``machine`` record: its commit date).

Run alone, ``python docs/gen_tables.py PAGE.md`` prints the page with its tables filled in.
A marker naming a missing file, or an unknown marker, stops the build (ValueError).
README.md, which GitHub shows as it is, holds its tables between ``<!-- generated: KIND -->``
and ``<!-- end generated -->``; ``python docs/gen_tables.py --write README.md`` refills
them (tests/test_docs.py checks that they are current).
"""
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
# The classes at parity with the CPU (dmlshim.conformance.PARITY; the hook imports no dmlshim)
PARITY = ("match", "close")
MARKER = re.compile(r"^<!-- results: (\w+)(?: (\S+))?(?: (.+?))? -->$", re.M)
REGION = re.compile(r"^(<!-- generated: (\w+)(?: (\S+))? -->\n).*?^(<!-- end generated -->)$", re.M | re.S)


def on_page_markdown(markdown, page=None, config=None, files=None):
    """mkdocs hook: fill in every results marker of a page."""
    return MARKER.sub(lambda m: _table(*m.groups()), markdown)


def refresh(text):
    """``text`` with every generated region filled in again from the results files."""
    return REGION.sub(lambda m: f"{m.group(1)}\n{_table(m.group(2), m.group(3))}\n\n{m.group(4)}", text)


def _table(kind, arg, pattern=None):
    if kind == "conformance" and arg is None:
        return conformance_table()
    if kind == "conformance" and arg == "groups" and pattern is None:
        return conformance_groups_table()
    if kind == "bench" and arg:
        return bench_table(arg, pattern)
    if kind == "zoo" and arg and pattern is None:
        return zoo_table(arg)
    if kind == "syncs" and arg and pattern is None:
        return syncs_table(arg)
    if kind == "fidelity" and arg == "defects" and pattern is None:
        return fidelity_defects_table()
    if kind == "fidelity" and arg == "routing" and pattern is None:
        return fidelity_routing_table()
    if kind == "doctor" and arg:
        return doctor_table([arg] + (pattern.split() if pattern else []))
    if kind == "repro" and arg and pattern:
        return repro_table([arg] + pattern.split())
    if kind == "integers" and arg:
        return integers_table([arg] + (pattern.split() if pattern else []))
    if kind in _NAMED and arg is None:
        return _NAMED[kind]()
    if kind == "headline" and arg == "readme" and pattern is None:
        return headline_table(readme=True)
    raise ValueError(f"docs: unknown results marker {kind!r} {arg or ''} {pattern or ''}: "
                     "allowed: 'conformance', 'conformance groups', 'bench FILE.json [REGEX]', "
                     "'zoo FILE.json', 'syncs FILE.json', 'doctor FILE.json [FILE.json ...]', 'headline', 'no_device', 'device_present', "
                     "'fidelity defects', 'fidelity routing', 'repro FILE.json FILE.json ...', "
                     "'integers FILE.json ...'")


def _load(name):
    path = os.path.join(RESULTS, name)
    if not os.path.isfile(path):
        raise ValueError(f"docs: results file {path} not found "
                         f"(have: {', '.join(sorted(os.listdir(RESULTS)))})")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _committed(name):
    """The date the results file was last committed (the JSON may not hold one)."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", f"benchmarks/results/{name}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "not committed yet"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def conformance_table():
    """One row per ``conformance-torch*.json``: samples, matches raw and with dmlshim."""
    lines = ["| torch | samples compared (raw / shim) | raw: at parity with the CPU | with dmlshim "
             "| of which `close` with dmlshim | what still differs with dmlshim "
             "| raw misses by class | file (committed) |",
             "|---|---|---|---|---|---|---|---|"]
    for path in _conformance_files():
        name = os.path.basename(path)
        d = _load(name)
        raw, shim = d["modes"]["raw"], d["modes"]["shim"]
        differs, close = {}, {}
        for r in d["records"]:
            if r.get("shim") == "close":
                close[r["op"]] = close.get(r["op"], 0) + 1
            elif r.get("shim") not in ("match", "nondeterministic", None):
                differs[r["op"]] = differs.get(r["op"], 0) + 1
        misses = {k: v for k, v in raw["classes"].items() if k not in PARITY + ("nondeterministic",)}
        lines.append("| " + " | ".join(_cell(x) for x in (
            _lane_name(d),
            f"{raw['compared']:,} / {shim['compared']:,}",
            f"{_parity(raw):,} ({100 * raw['rate']:.2f}%)",
            f"{_parity(shim):,} ({100 * shim['rate']:.2f}%)",
            _ops(close),
            _ops(differs),
            ", ".join(f"{k} {v}" for k, v in sorted(misses.items(), key=lambda x: -x[1])),
            f"`{name}` ({_committed(name)}, commit {d.get('commit', '?')}, Python {d.get('python', '?')}, "
            f"{d.get('binding', '?')} binding, {d.get('numerics', '?')} numerics, machine not recorded)"))
            + " |")
    return "\n".join(lines)


def _conformance_files(reverse=False):
    """The emulator's lanes (``conformance-torch*.json``), then the real binary's file."""
    lanes = sorted(glob.glob(os.path.join(RESULTS, "conformance-torch*.json")), reverse=reverse)
    return lanes + sorted(glob.glob(os.path.join(RESULTS, "conformance-realdml*.json")))


def _lane_name(d):
    """``2.4.1`` for an emulator lane; the real binary's run says so, with its sample count."""
    torch = d["torch"].split("+")[0]
    samples = d["options"]["samples"]
    if "criterion" not in d:
        return torch if samples != "all" else f"{torch}, every sample"
    c = d["criterion"]
    samples = "every sample" if samples == "all" else f"first {samples} samples"
    return (f"{torch}, real torch-directml 0.2.5 (realdml stack, {samples} per OpInfo and dtype; with "
            f"dmlshim {100 * c['real_rate']:.2f} % vs the emulator's {100 * c['emulator_rate']:.2f} % over "
            f"the {c['samples']:,} samples both ran and the stack translated, from `{c['emulator_file']}`)")


def _parity(c):
    """Samples at parity with the CPU: exact ``match`` and ``close`` (docs/conformance.md)."""
    return sum(c.get(cls, 0) for cls in PARITY)


def _ops(counts):
    return ", ".join(f"`{op}` {n}" for op, n in sorted(counts.items(), key=lambda x: -x[1])) or "nothing"


def _counts(c):
    if not c:
        return "-"
    close = f", {c['close']} close" if c.get("close") else ""
    return f"{_parity(c):,} / {c['compared']:,} ({100 * c['rate']:.2f} %{close})"


def _opinfo_only(mode):
    """The transparency mode's counts over the OpInfo groups only (it also counts modules)."""
    groups = [c for g, c in mode.get("groups", {}).items() if g != "modules"]
    match, compared = sum(_parity(c) for c in groups), sum(c["compared"] for c in groups)
    return {"match": match, "compared": compared, "rate": match / compared if compared else 0.0}


def conformance_groups_table():
    """Rows per lane and dtype group (float32, float16, int64, bool, modules): matches per mode."""
    lines = ["| torch | commit | group | raw: at parity | with dmlshim | transparency |",
             "|---|---|---|---|---|---|"]
    seconds = []
    for path in _conformance_files(reverse=True):
        d = _load(os.path.basename(path))
        modes = d["modes"]
        groups = sorted({g for m in modes.values() for g in m.get("groups", {})},
                        key=lambda g: (g == "modules", g))
        for group in ["all OpInfo"] + groups:
            cells = []
            for mode in ("raw", "shim", "transparency"):
                m = modes.get(mode)
                if m is None:
                    cells.append(_counts(None))
                elif group != "all OpInfo":
                    cells.append(_counts(m.get("groups", {}).get(group)))
                else:
                    cells.append(_counts(_opinfo_only(m) if mode == "transparency" else m))
            lines.append(f"| {_lane_name(d)} | {d.get('commit') or '?'} | {group} | "
                         + " | ".join(cells) + " |")
        seconds.append(f"{_lane_name(d)}: " + " + ".join(f"{k} {v} s" for k, v in d["seconds"].items()))
    return "\n".join(lines) + f"\n\nSeconds per phase, machine not recorded ({'; '.join(seconds)})."


def _time(seconds):
    if seconds is None:
        return ""
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _rows_table(rows):
    lines = ["| case | variant | median | min | ratio | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r.get("ratio")
        lines.append("| " + " | ".join(_cell(x) for x in (
            r.get("case", ""), r.get("variant", ""), _time(r.get("median_s")), _time(r.get("min_s")),
            f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "", r.get("note", ""))) + " |")
    return "\n".join(lines)


def bench_table(name, pattern=None):
    """The rows of a results file (one benchmark, or a ``make bench`` run of several), all
    or those whose ``"BENCHMARK: CASE"`` matches ``pattern``, under a line naming the run."""
    d = _load(name)
    runs = d["results"] if "results" in d else [d]      # benchmarks/run.py: several benchmarks
    out = [_source(name, d) + (", --quick" if d.get("quick") else "") + "."]
    for b in runs:
        rows = [r for r in b["rows"] if pattern is None
                or re.search(pattern, f"{b['benchmark']}: {r.get('case', '')}")]
        if rows:
            out += ["", f"**{b['benchmark']}**" + (f" ({b['wall_s']:.0f} s)" if "wall_s" in b else ""),
                    "", _rows_table(rows)]
    if len(out) == 1:
        raise ValueError(f"docs: no row of {name} matches {pattern!r}")
    return "\n".join(out)


def _file_table(name, caption):
    """A file's rows as a table, its columns in the file's order, under ``caption(extra)``."""
    d = _load(name)
    extra, rows = d.get("extra", {}), d["rows"]
    columns = list(rows[0]) if rows else []
    return "\n".join([f"{_source(name, d)}; {caption(extra)}", "",
                      "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                     + ["| " + " | ".join(_cell(str(r.get(c, ""))) for c in columns) + " |" for r in rows])


def zoo_table(name):
    """examples/zoo.py's model table: a row per family."""
    return _file_table(name, lambda e: f"{e.get('device', '')}, {e.get('numerics', '?')} numerics, "
                                       f"parity profile '{e.get('profile', '?')}'.")


def syncs_table(name):
    """benchmarks/model_syncs.py's table: a row per reference model."""
    return _file_table(name, lambda e: f"{e.get('device', '')}, median of {e.get('repeat', '?')} "
                                       f"runs each side" + (f"; gate: {e['gate']}." if "gate" in e else "."))


def doctor_table(names):
    """``python -m dmlshim doctor --json`` reports side by side: each defect's verdict and
    figure per report, then each report's short conformance pass."""
    reports = [(name, _load(name)) for name in names]
    head = ["| defect | row | " + " | ".join(f"`{n}`" for n, _ in reports) + " |",
            "|---|---|" + "---|" * len(reports)]
    rows = {}
    for i, (_, d) in enumerate(reports):
        for defect in d["probes"]["defects"]:
            row = rows.setdefault(defect["name"], [defect["row"]] + [""] * len(reports))
            figure = f": {defect['figure'][:70]}" if defect.get("figure") else ""
            row[1 + i] = f"{defect['status']}{figure}"
    lines = head + ["| " + " | ".join(_cell(x) for x in [name] + cells) + " |" for name, cells in rows.items()]
    notes = []
    for name, d in reports:
        c, v = d.get("conformance") or {}, d["versions"]
        classes = ", ".join(f"{k} {n}" for k, n in c.get("classes", {}).items())
        notes.append(f"`{name}` ({d.get('date', '?')}, committed {_committed(name)}): adapter "
                     f"{_cell(d['adapter'].strip())}, float64 {'yes' if d['float64'] else 'no'}, "
                     f"torch {v['torch']}, dmlshim {v['dmlshim']}; probes {d['probes']['seconds']:.1f} s "
                     f"(cache {d['probes']['cache']}); conformance pass {c.get('ran', 0)} samples in "
                     f"{c.get('seconds', 0):.1f} s: {classes or '-'}"
                     + "".join(f"; {f['class']} `{f['op']}{'.' + f['variant'] if f['variant'] else ''}`"
                               f"[{f['index']}]" for f in c.get("failures", [])) + ".")
    return "\n".join(lines + [""] + ["- " + n for n in notes])


def repro_table(names):
    """``benchmarks/realdml_gpu/repro.py`` runs side by side: per row, raw torch-directml's
    difference from the CPU on each adapter (max |Δ| for floats, differing elements for
    integers and bools, or the error)."""
    runs = [(name, _load(name)) for name in names]
    head = ["| row | " + " | ".join(f"{_cell(d['adapter'].strip())} (`{n}`)" for n, d in runs) + " |",
            "|---|" + "---|" * len(runs)]

    def cell(value):
        if isinstance(value, list):
            return ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in value)
        if isinstance(value, dict):
            return f"exit {value['rc']}" + (f": {value['err'].splitlines()[-1][-90:]}" if value.get("err") else "")
        return str(value)[:90]
    rows = [f"| `{row}` | " + " | ".join(_cell(cell(d["rows"].get(row, "-"))) for _, d in runs) + " |"
            for row in runs[0][1]["rows"]]
    return "\n".join(head + rows)


def integers_table(names):
    """``benchmarks/realdml_gpu/integers.py`` runs side by side: per call and value set, whether
    the device's answer equals the CPU's on each adapter, raw or with dmlshim."""
    runs = [(name, _load(name)) for name in names]
    head = ["| call / values | " + " | ".join(
        f"{_cell(d['adapter'].strip())}, {'dmlshim' if d.get('shim') else 'raw'} (`{n}`)" for n, d in runs) + " |",
        "|---|" + "---|" * len(runs)]

    def cell(value):
        if value is None:
            return "-"
        if "error" in value:
            return "error: " + value["error"][:60]
        return "right" if value["equal"] else "**wrong**"
    rows = [f"| `{row}` | " + " | ".join(_cell(cell(d["rows"].get(row))) for _, d in runs) + " |"
            for row in runs[0][1]["rows"]]
    totals = "| equal to the CPU | " + " | ".join(
        f"{sum(bool(v.get('equal')) for v in d['rows'].values())} of {len(d['rows'])}" for _, d in runs) + " |"
    return "\n".join(head + [totals] + rows)


def _source(name, d):
    """``FILE``: date, torch lane, machine, from the file's ``machine`` record (benchmarks/
    timing.py writes one) or, in an older file, its commit date and ``extra``'s torch."""
    m = d.get("machine")
    if m:
        return (f"`{name}`: {m['date']}, torch {m['torch']}, Python {m['python']}, "
                f"{m['cpu']} ({m['cores']} cores), {m['os']}")
    return f"`{name}`: committed {_committed(name)}, torch {_lane(d)}, machine not recorded"


# ------------------------------------------------------------------ the headline figures
# Variant names of the scripts read here (benchmarks/no_device.py, shim_overhead.py,
# rnn_routes.py, funasr_bench.py, gfpgan_bench.py).
NO_ACTIVATE, ACTIVATE = "no activate()", "activate()"


def _lanes(prefix):
    """``[(file name, data)]`` for ``benchmarks/results/<prefix>-torch<version>.json``,
    newest torch first; ValueError when there is none."""
    names = [os.path.basename(p) for p in glob.glob(os.path.join(RESULTS, f"{prefix}-torch*.json"))]
    if not names:
        raise ValueError(f"docs: no results file {prefix}-torch<version>.json in {RESULTS}")
    names.sort(key=lambda n: [int(x) for x in re.search(r"torch([\d.]+)\.json$", n).group(1).split(".")],
               reverse=True)
    return [(n, _load(n)) for n in names]


def _cite(name, d):
    """A figure's file, with its date and machine (the commit date for older files)."""
    m = d.get("machine")
    if m:
        return f"`{name}`, {m['date'][:10]}, {m['cpu']} ({m['cores']} cores)"
    return f"`{name}`, committed {_committed(name)}, machine not recorded"


def _lane(d):
    return (d.get("machine") or {}).get("torch") or d.get("extra", {}).get("torch", "not recorded")


def _rows(d):
    """``{(case, variant): row}`` of one results file."""
    return {(r["case"], r["variant"]): r for r in d["rows"]}


def _cases(d, keep=lambda case: True):
    return list(dict.fromkeys(r["case"] for r in d["rows"] if keep(r["case"])))


def _span(values, fmt):
    """``fmt`` of the smallest and largest value, or of one when they read the same."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low} to {high}"


def _ratio(x):
    return f"{x:.2f}x"


def _us(x):
    return f"{x:+.2f} µs".replace("-0.00", "+0.00")


def _min_ratios(d, variant, baseline, keep=lambda case: True):
    """``{case: (min ratio, µs added per call)}`` of ``variant`` against ``baseline``."""
    rows = _rows(d)
    return {c: (rows[c, variant]["min_s"] / rows[c, baseline]["min_s"],
                (rows[c, variant]["min_s"] - rows[c, baseline]["min_s"]) * 1e6) for c in _cases(d, keep)}


def _no_device_figure(d):
    found = _min_ratios(d, ACTIVATE, NO_ACTIVATE).values()
    installed = ", ".join(d["extra"]["installed"]) or "nothing"
    return (f"{_span([r for r, _ in found], _ratio)} ({_span([a for _, a in found], _us)} per call, "
            f"minimum of {d['rows'][0]['repeats']} × {d['extra']['number']:,}); installed: {installed}")


# benchmarks/device_present.py's variants
BEFORE, GATE_PYTHON, GATE_COMPILED = "no activate()", "activate(), gate: python", "activate(), gate: compiled"


def _gates(d):
    """The activate() variants of a device_present file: the compiled gate's first, if run."""
    return [v for v in (GATE_COMPILED, GATE_PYTHON) if (_cases(d)[0], v) in _rows(d)]


def _present_figure(where):
    """The span of µs added and min ratios over ``where``'s cases: the compiled gate's, then
    the Python gate's (no compiler and no prebuilt gate for the platform and torch)."""
    def figure(d):
        parts = []
        for gate in _gates(d):
            found = _min_ratios(d, gate, BEFORE, lambda c: c.startswith(where + ":")).values()
            parts.append(("" if gate == GATE_COMPILED else "Python gate: ")
                         + f"{_span([a for _, a in found], _us)} ({_span([r for r, _ in found], _ratio)})")
        return "; ".join(parts)
    return figure


def _lstm_figure(d):
    found = _min_ratios(d, "aten kernel", "cpu", lambda c: c.startswith("LSTM("))
    return "; ".join(f"{case}: {_ratio(r)}" for case, (r, _) in found.items())


def _model_figure(d, cases=None):
    rows, extra = _rows(d), d["extra"]
    same = all(c["identical_to_cpu"] for c in extra["cases"].values()) if "cases" in extra \
        else extra["identical_to_cpu"]
    return "; ".join(f"{case}: " + _both_gates(rows, case, "emulated+shim", lambda v: _ratio(rows[case, v]["ratio"]))
                     for case in cases or _cases(d)) \
        + "; " + _output_figure(same, extra) + _split_figure(extra, cases)


def _both_gates(rows, case, variant, figure):
    """``figure(variant)``, then `` (Python gate: ...)`` with ``figure`` of its Python-gate
    twin (``"..., gate: python"``: benchmarks/timing.activated) where the file has one."""
    twin = variant + ", gate: python"
    return figure(variant) + (f" (Python gate: {figure(twin)})" if (case, twin) in rows else "")


def _output_figure(same, extra):
    """The output against the CPU's: identical, or within the tolerance profile it is held
    to (gfpgan_bench: bilinear upsampling runs on the device with other kernels)."""
    if same:
        return "output identical to the CPU's"
    if extra.get("within_device_profile"):
        return f"output within the `device` profile (max abs {extra['max_abs']:.2g})"
    return "OUTPUT DIFFERS from the CPU's"


def _split_figure(extra, cases=None):
    """The traced pass's dmlshim overhead and substitute work as shares of the device run's
    wall time (benchmarks/timing.py ``shim_totals``), or "" for a file from before the split."""
    traced = [extra["cases"][c] for c in cases or extra["cases"]] if "cases" in extra else [extra]
    if not traced or any("overhead_share" not in t for t in traced):
        return ""
    def pct(key):
        low, high = (f"{100 * x:.1f}" for x in (min(t[key] for t in traced), max(t[key] for t in traced)))
        return f"{low}%" if low == high else f"{low}-{high}%"
    return f"; dmlshim: overhead {pct('overhead_share')}, substitute {pct('substitute_share')} of device time"


def _model_cpu_figure(d):
    """Each case's median ratio and, both variants running the same CPU code, its minimum's
    (this machine's medians move by about 5% between runs of one script)."""
    rows = _rows(d)

    def ratios(case, variant):
        row = rows[case, variant]
        return f"{_ratio(row['ratio'])}/{_ratio(row['min_s'] / rows[case, 'cpu']['min_s'])}"
    return "; ".join(f"{case}: " + _both_gates(rows, case, "cpu+shim", lambda v: ratios(case, v))
                     for case in _cases(d))


# (what, where it comes from, figure(data)), in the order a user asks
HEADLINE = (
    ("No DirectML device: CPU `mul`, `add`, `cat`, `relu`, `matmul`, `linear` (64 floats) after "
     "`activate()` against before", "no_device", _no_device_figure),
    ("A DirectML device present: CPU `mul`, `add`, `view`, slicing, `cat`, `conv1d`, `linear`, "
     "`matmul`, `to`, int64 after `activate()` against before (minimum, per call)", "device_present",
     _present_figure("cpu")),
    ("The same calls on the device, nothing to fix", "device_present", _present_figure("device")),
    ("LSTM on the device (a CPU round trip, cached weights) against the CPU (minimum)", "rnn_routes",
     _lstm_figure),
    ("FunASR paraformer-zh size (247M), device + shim against the CPU (median)", "funasr_bench",
     lambda d: _model_figure(d, ("5s", "11s"))),
    ("GFPGANv1Clean 512×512, device + shim against the CPU (median)", "gfpgan_bench", _model_figure),
    ("FunASR on the CPU with a DirectML device present, `activate()` against before (median/minimum)",
     "funasr_bench", _model_cpu_figure),
)


def headline_table(readme: bool = False):
    """The figures a user asks for first, one row per torch lane, each with its results file,
    date and machine; ``readme``: without the LSTM's (README.md stays within 12 KB)."""
    lines = ["| figure | torch | value | from |", "|---|---|---|---|"]
    for what, prefix, figure in HEADLINE:
        if readme and prefix == "rnn_routes":
            continue
        lanes = _present_lanes(prebuilt=False) if prefix == "device_present" else _lanes(prefix)
        for i, (name, d) in enumerate(lanes):
            lines.append("| " + " | ".join(_cell(x) for x in (
                what if i == 0 else "", _present_lane(name, d), figure(d), _cite(name, d))) + " |")
    return "\n".join(lines)


def no_device_table():
    """``benchmarks/no_device.py`` per op and lane: minimum before and after ``activate()``."""
    lanes = _lanes("no_device")
    lines = ["| call (CPU, 64 floats) | " + " | ".join(f"torch {_lane(d)}" for _, d in lanes) + " |",
             "|---" * (1 + len(lanes)) + "|"]
    for case in _cases(lanes[0][1]):
        cells = []
        for _, d in lanes:
            rows = _rows(d)
            before, after = rows[case, NO_ACTIVATE]["min_s"], rows[case, ACTIVATE]["min_s"]
            cells.append(f"{_time(before)} → {_time(after)} ({_ratio(after / before)}, "
                         f"{_us((after - before) * 1e6)})")
        lines.append("| " + " | ".join(_cell(x) for x in [f"`{case}`", *cells]) + " |")
    installed = "; ".join(f"{_lane(d)}: {', '.join(d['extra']['installed']) or 'nothing'}" for _, d in lanes)
    return "\n".join(lines) + (f"\n\nInstalled by `activate()` ({installed}). From "
                               + "; ".join(_cite(n, d) for n, d in lanes) + ".")


def _present_lanes(prebuilt: bool = True):
    """device_present's files: each torch lane's on the emulated device, then the real
    binary's (``device_present-realdml.json``) where it was run; then (``prebuilt``) the same
    with the installed wheel's prebuilt gate and no compiler (``--installed``) where run."""
    def present(name):
        return [(name, _load(name))] if os.path.isfile(os.path.join(RESULTS, name)) else []
    lanes = _lanes("device_present") + present("device_present-realdml.json")
    if not prebuilt:
        return lanes
    installed = glob.glob(os.path.join(RESULTS, "device_present-prebuilt-*"))
    installed = _lanes("device_present-prebuilt") if installed else []
    return lanes + installed + present("device_present-realdml-prebuilt.json")


def _present_lane(name, d):
    return (_lane(d) + (", real torch-directml (lavapipe)" if "realdml" in name else "")
            + (", the wheel's prebuilt gate, no compiler" if d["extra"].get("gate_origin") == "prebuilt" else ""))


def device_present_table():
    """``benchmarks/device_present.py`` per call and lane: minimum before ``activate()``,
    and after it with each gate."""
    lanes = _present_lanes()
    lines = ["| call | torch | before | " + " | ".join(f"after, gate {g.rsplit(' ', 1)[-1]}"
                                                      for g in _gates(lanes[0][1])) + " |",
             "|---" * (3 + len(_gates(lanes[0][1]))) + "|"]
    for case in _cases(lanes[0][1]):
        for i, (name, d) in enumerate(lanes):
            rows = _rows(d)
            before = rows[case, BEFORE]["min_s"]
            cells = [f"{_time(rows[case, g]['min_s'])} ({_ratio(rows[case, g]['min_s'] / before)}, "
                     f"{_us((rows[case, g]['min_s'] - before) * 1e6)})" for g in _gates(d)]
            lines.append("| " + " | ".join(_cell(x) for x in [f"`{case}`" if i == 0 else "",
                                                              _present_lane(name, d), _time(before), *cells]) + " |")
    return "\n".join(lines) + "\n\nFrom " + "; ".join(_cite(n, d) for n, d in lanes) + "."


# ------------------------------------------------------------------ fidelity (benchmarks/fidelity.py)
_FIDELITY_COLUMNS = (("emulated", "emulated"), ("real", "real, FP64 off"),
                     ("emulated-fp64", "emulated, FP64"), ("real-fp64", "real, FP64 on"))


def _outcome_cell(v):
    if v is None:
        return "not run"
    if v["class"] == "equal":
        return "equal"
    figure = v["figure"] if len(v["figure"]) <= 90 else v["figure"][:87] + "..."
    return _cell(f"**{v['class']}**: {figure}")


def fidelity_agreement(d):
    """(agreeing rows, rows, {class: agreeing rows}) of a fidelity-defects.json: a row's
    class is the real binary's, FP64 off."""
    rows = [r for r in d["rows"] if r["agree"]]
    by_class = {}
    for r in rows:
        kind = r["outcomes"]["real"]["class"]
        by_class[kind] = by_class.get(kind, 0) + 1
    return len(rows), len(d["rows"]), by_class


def fidelity_defects_table():
    """Per defect: the outcome class on the emulated device and on the real binary (FP64
    off, on), whether they agree, and for a row that may differ, why; then the inference_mode
    sweep (raw failures, and with dmlshim: on the device, extra CPU calls)."""
    name = "fidelity-defects.json"
    d = _load(name)
    agreeing, total, by_class = fidelity_agreement(d)
    classes = ", ".join(f"{k} {n}" for k, n in sorted(by_class.items(), key=lambda kv: -kv[1]))
    lines = [f"{agreeing} of {total} rows agree ({classes}); {total - agreeing} differ.", "",
             "| defect | row | " + " | ".join(h for _, h in _FIDELITY_COLUMNS) + " | agree |",
             "|---" * (len(_FIDELITY_COLUMNS) + 3) + "|"]
    for r in d["rows"]:
        agree = "yes" if r["agree"] else ("no: " + r["specific"] if r["specific"] else "**no**")
        lines.append(f"| `{r['name']}` | {_cell(r['row'])} | "
                     + " | ".join(_outcome_cell(r["outcomes"].get(k)) for k, _ in _FIDELITY_COLUMNS)
                     + f" | {_cell(agree)} |")
    sweep = d["inference_mode"]
    lines += ["", "`torch.inference_mode()` sweep (tensors moved to the device before, called inside it):", "",
              "| case | emulated, raw | real, raw | emulated, dmlshim | real, dmlshim |", "|---|---|---|---|---|"]
    for case in sweep["real"]:
        cells = []
        for mode in ("raw", "activated"):
            for kind in ("emulated", "real"):
                v = sweep[kind][case][mode]
                text = "ok" if v["ok"] else _cell(v["figure"][:70])
                if mode == "activated" and v.get("extra_cpu_calls"):
                    text += f" ({v['extra_cpu_calls']} CPU retries)"
                cells.append(text)
        lines.append(f"| {_cell(case)} | " + " | ".join(cells) + " |")
    stack = d["stack"]
    versions = ", ".join(f"{k} {v}" for k, v in stack["versions"].items())
    lines += ["", f"Source: {_source(name, d)}, torch-directml {d['machine']['torch_directml']}; "
              f"stack: {versions}; patches: {', '.join(stack['patches'])}; {d['seconds']} s."]
    return "\n".join(lines)


# benchmarks/fidelity_routing.py's outcomes, in the order the table lists them
_ROUTING_OUTCOMES = ("device", "fallback", "NotImplementedError", "error", "stack", "float64", "abort")


def fidelity_routing_table():
    """Per outcome on the real binary: the overloads OpInfo samples reached, how many of
    them the routing table and the emulator agree on; then every overload where either
    does not, with its evidence, the aborts, and the live dispatcher's check of the table."""
    name = "fidelity-routing.json"
    d = _load(name)
    rows = d["rows"]
    real = [r for r in rows if r["real"]]
    lines = ["| on the real binary | overloads | routing table agrees | emulator agrees |", "|---|---|---|---|"]
    for outcome in _ROUTING_OUTCOMES:
        group = [r for r in real if r["real"]["outcome"] == outcome]
        if not group:
            continue
        table = "n/a (the table routes, kernels fail)" if outcome not in ("device", "fallback", "NotImplementedError") \
            else sum(r["table_agrees"] for r in group)
        lines.append(f"| {outcome} | {len(group)} | {table} | {sum(r['emulator_agrees'] for r in group)} |")
    only = [r["op"] for r in rows if not r["real"]]
    lines.append(f"| reached on the emulated device only | {len(only)} | | |")
    differ = [r for r in rows if not (r["table_agrees"] and r["emulator_agrees"])]
    lines += ["", "| overload | table | real binary | emulated | why |", "|---|---|---|---|---|"]
    for r in differ:
        lines.append(f"| `{r['op']}` | {r['table'] or 'not in it'} | {_routing_cell(r['real'])} | "
                     f"{_routing_cell(r['emulated'])} | {_cell(r['specific'] or '**unexplained**')} |")
    aborts = [f"`{a['sample']}` in `{a['error']['op'] or 'moving its inputs'}` ({a['error']['message']})"
              for a in d["aborts"]["real"]]
    check = d["table_check"]
    lines += ["", f"Samples: {d['samples']} per OpInfo and dtype ({', '.join(d['dtypes'])}), float64 off; "
              f"{d['sample_counts']['real']} on the real binary, {d['sample_counts']['emulated']} on the "
              f"emulated device. Reached on the emulated device only: {', '.join(f'`{o}`' for o in only) or 'none'}. "
              f"Process aborts on the real binary (a new process went on after each): {'; '.join(aborts) or 'none'}.",
              "", f"The table itself: the live dispatcher's PrivateUse1 entry of {check['checked']} overloads "
              f"re-read on the real binary; differing: "
              + (", ".join(f"`{k}` ({_cell(v)})" for k, v in check["differ"].items()) or "none") + ".",
              "", f"Source: {_source(name, d)}, torch-directml {d['machine']['torch_directml']}; "
              f"{d['seconds']['real']} s on the real binary, {d['seconds']['emulated']} s emulated."]
    return "\n".join(lines)


def _routing_cell(v):
    if v is None:
        return "not reached"
    counts = ", ".join(f"{k} {n}" for k, n in v["counts"].items())
    example = next(iter(v["examples"].values()), "")
    return _cell(f"{v['outcome']} ({counts})" + (f": {example[:100]}" if example else ""))


_NAMED = {"headline": headline_table, "no_device": no_device_table,     # markers without a file
          "device_present": device_present_table}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        with open(sys.argv[2], encoding="utf-8") as f:
            text = f.read()
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            f.write(refresh(text))
    elif len(sys.argv) == 2:
        with open(sys.argv[1], encoding="utf-8") as f:
            print(on_page_markdown(f.read()))
    else:
        sys.exit("usage: python docs/gen_tables.py PAGE.md | --write README.md")
