"""Run every benchmark script and print one table (``make bench``).

Each ``benchmarks/<name>.py`` that takes ``--json`` runs in its own subprocess, so a
crash or a leftover patch in one cannot spoil the others. Their rows are merged
with the machine, date and torch version into one JSON file (default
``benchmarks/results/latest-torch<version>.json``, one per torch lane). Exit status 1
if any script failed.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import timing

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"run", "timing"}
OPT_IN = {"gpu"}  # needs CUDA: runs only when named with --only


def accepts_json(path):
    text = path.read_text(encoding="utf-8")
    return "--json" in text or "timing.arg_parser(" in text


def scripts(only):
    """Benchmark scripts by name: those in ``only`` (all but OPT_IN if empty) that accept --json."""
    found = {p.stem: p for p in sorted(HERE.glob("*.py"))
             if p.stem not in NOT_BENCHMARKS and not p.stem.startswith("_") and accepts_json(p)}
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
            return dict(json.loads(out.read_text(encoding="utf-8")), wall_s=wall)
    reason = f"exit {rc}" if rc != 0 else "no JSON written"
    return {"benchmark": name, "error": reason, "output_tail": log[-3000:], "wall_s": wall}


def markdown(rows):
    """Rows as a GitHub Markdown table (for the README)."""
    def line(cells):
        return "| " + " | ".join(map(str, cells)) + " |"
    return "\n".join([line(timing.COLUMNS), "|---" * len(timing.COLUMNS) + "|",
                      *(line(timing.cells(r)) for r in rows)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this benchmark (repeatable; 'gpu' must be named)")
    parser.add_argument("--json", metavar="PATH",
                        help="default: benchmarks/results/latest-torch<version>.json, one per torch lane")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per script")
    args = parser.parse_args()

    selected, info, results = scripts(args.only), timing.machine(), []
    args.json = args.json or str(HERE / "results" / f"latest-torch{info['torch'].split('+')[0]}.json")
    print(f"{info['cpu']}, {info['cores']} cores | torch {info['torch']} | {info['date']}")
    for name, path in selected.items():
        print(f"{name} ...", end=" ", flush=True)
        result = run_one(name, path, args.quick, args.timeout)
        print(f"{'FAILED (' + result['error'] + ')' if 'error' in result else 'ok'} "
              f"{result['wall_s']:.1f} s", flush=True)
        if "error" in result:
            print("    " + result["output_tail"].strip().replace("\n", "\n    "), file=sys.stderr)
        results.append(result)

    rows = [dict(row, benchmark=r["benchmark"]) for r in results for row in r.get("rows", [])]
    print("\n" + timing.format_table(rows) if rows else "no rows")
    if args.markdown:
        print("\n" + markdown(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"machine": info, "quick": args.quick, "results": results}, f, indent=2)
    print(f"\nsaved {args.json}")
    failed = [r["benchmark"] for r in results if "error" in r]
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
