"""Run every benchmark script and print one table (``make bench``).

Each ``benchmarks/<name>.py`` that takes ``--json PATH`` and ``--quick`` (``timing.arg_parser``,
or options of its own) and writes timing.py's CONTRACT schema (``timing.finish`` or
``timing.write_json``) runs in its own subprocess, so a crash or a leftover patch in one
cannot spoil the others. Their rows are merged with the machine,
date and torch version into one JSON file, written before the summary table is printed
(default ``benchmarks/results/latest-torch<version>.json``, one per torch lane). Exit
status 1 if any script failed or the summary could not be made.

``--quick`` (CI: ``make bench BENCH_ARGS=--quick``) passes ``--quick`` to every script:
fewer repeats, smaller models, a few minutes in all; its JSON goes to
``<temp dir>/dmlshim-bench/quick-torch<version>.json`` unless ``--json`` says otherwise,
never over the committed full results in ``benchmarks/results/``.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import timing

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"run", "timing"}
OPT_IN = {"gpu"}  # needs CUDA: runs only when named with --only
# A script's own --json option (realdml_conformance.py only passes --json to a command it runs)
JSON_OPTION = re.compile(r"""timing\.arg_parser\(|add_argument\(\s*["']--json["']""")
# ... whose file is timing's CONTRACT schema, the one this merges (not rank_sweep.py's sweep)
WRITES_CONTRACT = re.compile(r"timing\.(finish|write_json)\(")


def is_benchmark(path):
    """Whether the script takes ``--json PATH`` and writes its rows there through timing.py
    (the CONTRACT schema); run.py also passes it ``--quick`` in a quick run."""
    text = path.read_text(encoding="utf-8")
    return bool(JSON_OPTION.search(text) and WRITES_CONTRACT.search(text))


def scripts(only):
    """Benchmark scripts by name: those in ``only`` (all but OPT_IN if empty) that
    :func:`is_benchmark`."""
    found = {p.stem: p for p in sorted(HERE.glob("*.py"))
             if p.stem not in NOT_BENCHMARKS and not p.stem.startswith("_") and is_benchmark(p)}
    unknown = set(only) - set(found)
    if unknown:
        sys.exit(f"run.py: unknown benchmark(s) {sorted(unknown)}; available: {sorted(found)}")
    return {n: p for n, p in found.items() if n in only or (not only and n not in OPT_IN)}


def run_one(name, path, quick, timeout):
    """Run one script; returns its JSON dict plus wall_s, or a failure dict with the output tail."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.json"
        cmd = [sys.executable, str(path), "--json", str(out)] + (["--quick"] if quick else [])
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, log = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
            log = log.decode(errors="replace") if isinstance(log, bytes) else log
        wall = time.perf_counter() - start
        if rc == 0 and out.exists():
            return {"benchmark": name, **json.loads(out.read_text(encoding="utf-8")), "wall_s": wall}
    reason = f"exit {rc}" if rc != 0 else "no JSON written"
    return {"benchmark": name, "error": reason, "output_tail": log[-3000:], "wall_s": wall}


def merged_rows(results):
    """Every benchmark's rows, each with its ``"benchmark"`` name."""
    return [dict(row, benchmark=r["benchmark"]) for r in results for row in r.get("rows", [])]


def markdown(rows):
    """Rows as GitHub Markdown (for the README): the timing rows as one table, then each
    benchmark's records of another shape (``timing.is_timing_row``) as a table with their
    own columns."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
    timed = [r for r in rows if timing.is_timing_row(r)]
    parts = [[line(timing.COLUMNS), "|---" * len(timing.COLUMNS) + "|",
              *(line(timing.cells(r)) for r in timed)]] if timed else []
    records = {}
    for r in rows:
        if not timing.is_timing_row(r):
            records.setdefault(r.get("benchmark", ""), []).append(r)
    for name, group in records.items():
        columns = list(dict.fromkeys(k for r in group for k in r if k != "benchmark"))
        parts.append([f"**{name}**", "", line(columns), "|---" * len(columns) + "|",
                      *(line([r.get(c, "") for c in columns]) for r in group)])
    return "\n\n".join("\n".join(p) for p in parts)


def summary(results, with_markdown=False):
    """The text ``make bench`` prints after its runs: every benchmark's rows."""
    rows = merged_rows(results)
    if not rows:
        return "no rows"
    return timing.format_table(rows) + ("\n\n" + markdown(rows) if with_markdown else "")


def save(path, info, quick, results):
    """Write the merged results file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"machine": info, "quick": quick, "results": results}, f, indent=2)


def default_json(info, quick):
    """``benchmarks/results/latest-torch<version>.json``; for ``--quick`` a file in the
    temporary directory, so that a quick run never replaces the committed full figures."""
    lane = info["torch"].split("+")[0]
    if quick:
        return str(Path(tempfile.gettempdir()) / "dmlshim-bench" / f"quick-torch{lane}.json")
    return str(HERE / "results" / f"latest-torch{lane}.json")


def finish(path, info, quick, results, with_markdown=False):
    """Save the results first, then print the summary; returns the exit message (None: all
    ran and were summarised). A summary that fails is reported, the file already written."""
    save(path, info, quick, results)
    print(f"\nsaved {path}")
    problems = [f"failed: {', '.join(r['benchmark'] for r in results if 'error' in r)}"] \
        if any("error" in r for r in results) else []
    try:
        print("\n" + summary(results, with_markdown))
    except Exception:  # noqa: BLE001 - the results are saved; say what broke, exit 1
        traceback.print_exc()
        problems.append(f"the summary failed (the results are in {path})")
    return "; ".join(problems) or None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this benchmark (repeatable; 'gpu' must be named)")
    parser.add_argument("--json", metavar="PATH",
                        help="default: benchmarks/results/latest-torch<version>.json, one per torch "
                             "lane; with --quick <temp dir>/dmlshim-bench/quick-torch<version>.json")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per script (default 1800; 300 with --quick)")
    args = parser.parse_args()

    selected, info, results = scripts(args.only), timing.machine(), []
    args.json = args.json or default_json(info, args.quick)
    args.timeout = args.timeout or (300 if args.quick else 1800)
    start = time.perf_counter()
    print(f"{info['cpu']}, {info['cores']} cores | torch {info['torch']} | {info['date']}")
    for name, path in selected.items():
        print(f"{name} ...", end=" ", flush=True)
        result = run_one(name, path, args.quick, args.timeout)
        print(f"{'FAILED (' + result['error'] + ')' if 'error' in result else 'ok'} "
              f"{result['wall_s']:.1f} s", flush=True)
        if "error" in result:
            print("    " + result["output_tail"].strip().replace("\n", "\n    "), file=sys.stderr)
        results.append(result)

    print(f"{len(results)} benchmarks in {time.perf_counter() - start:.0f} s")
    problem = finish(args.json, info, args.quick, results, args.markdown)
    if problem:
        sys.exit(problem)


if __name__ == "__main__":
    main()
