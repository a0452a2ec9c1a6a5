"""The results tables of docs/conformance.md, generated from the conformance JSON files.

    python benchmarks/conformance_table.py            # print the Markdown
    python benchmarks/conformance_table.py --write    # replace the tables in docs/conformance.md

Reads ``benchmarks/results/conformance-torch*.json`` (written by ``make conformance``)
and rewrites what sits between ``<!-- conformance-table -->`` and
``<!-- /conformance-table -->`` in docs/conformance.md.
"""
import argparse
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "conformance-torch*.json")
DOC = os.path.join(ROOT, "docs", "conformance.md")
START, END = "<!-- conformance-table -->", "<!-- /conformance-table -->"


def _cell(counts):
    if not counts:
        return "-"
    return f"{counts['match']:,} / {counts['compared']:,} ({100 * counts['rate']:.2f} %)"


def table(paths) -> str:
    runs = [json.load(open(p, encoding="utf-8")) for p in paths]
    runs.sort(key=lambda r: [int(x) for x in re.findall(r"\d+", r["torch"].split("+")[0])], reverse=True)
    lines = ["| torch | commit | group | raw match | shim match | transparency |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        modes = run["modes"]
        groups = sorted({g for m in modes.values() for g in m.get("groups", {})},
                        key=lambda g: (g == "modules", g))
        torch_version = run["torch"].split("+")[0]
        for group in ["all OpInfo"] + groups:
            cells = []
            for mode in ("raw", "shim", "transparency"):
                m = modes.get(mode)
                if m is None:
                    counts = None
                elif group != "all OpInfo":
                    counts = m.get("groups", {}).get(group)
                else:                        # the transparency mode also counts modules
                    counts = _ops_only(m) if mode == "transparency" else m
                cells.append(_cell(counts))
            lines.append(f"| {torch_version} | {run.get('commit') or '?'} | {group} | " + " | ".join(cells) + " |")
    seconds = ", ".join(f"{r['torch'].split('+')[0]}: " + " + ".join(
        f"{k} {v} s" for k, v in r["seconds"].items()) for r in runs)
    return "\n".join(lines) + f"\n\nSeconds on 2 cores ({seconds}).\n"


def _ops_only(mode: dict) -> dict:
    """The transparency mode's counts over the OpInfo groups only (no modules)."""
    groups = [c for g, c in mode.get("groups", {}).items() if g != "modules"]
    match, compared = sum(c["match"] for c in groups), sum(c["compared"] for c in groups)
    return {"match": match, "compared": compared, "rate": match / compared if compared else 0.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the tables in {DOC}")
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(RESULTS))
    if not paths:
        print(f"no {RESULTS}: run make conformance first", file=sys.stderr)
        return 1
    text = table(paths)
    if not args.write:
        print(text)
        return 0
    doc = open(DOC, encoding="utf-8").read()
    if START not in doc or END not in doc:
        print(f"{DOC} has no {START} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = doc.split(START, 1)
    doc = head + START + "\n" + text + END + rest.split(END, 1)[1]
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
