"""Merge conformance JSON files of disjoint ``--ops`` chunks into one, counts recomputed.

The real binary ends the process on some samples (an abort or a segfault, see
docs/conformance.md), so the real-stack pass runs in chunks of OpInfos; this joins them:

    python benchmarks/merge_conformance.py OUT.json CHUNK.json... [--emulator FILE.json]

``--emulator``: also record the issue-25 criterion, the emulator's parity rate with
dmlshim over the same samples (op, variant, dtype, index) that the stack could run
(classes other than ``stack`` and the not-run ``abort``), beside the real one.
``--differing``: keep only the records some mode does not ``match`` (a run of every
sample has ~48 000, ~10 MB); counts are made before, and ``records_kept`` says so; the
CPU's rejects become their count (``cpu_rejects_count``).
"""
import argparse
import json
from collections import Counter, defaultdict

from dmlshim.conformance import CLASSES, PARITY, write_json


def counts(classes):
    c = Counter(classes)
    compared = sum(c.values()) - c["nondeterministic"]
    parity = sum(c[k] for k in PARITY)
    return {"compared": compared, "match": c["match"], "close": c["close"],
            "rate": parity / compared if compared else 0.0,
            "exact_rate": c["match"] / compared if compared else 0.0,
            "classes": {k: c[k] for k in CLASSES if c[k]}}


def merge(chunks):
    out = dict(chunks[0])
    out["records"] = [r for d in chunks for r in d["records"]]
    out["cpu_rejects"] = [r for d in chunks for r in d["cpu_rejects"]]
    out["sample_errors"] = [r for d in chunks for r in d["sample_errors"]]
    keys = dict.fromkeys(k for d in chunks for k in d["seconds"])     # "modules cpu" in one chunk
    out["seconds"] = {k: round(sum(d["seconds"].get(k, 0) for d in chunks), 1) for k in keys}
    out["options"] = dict(chunks[0]["options"], ops=[d["options"]["ops"] for d in chunks],
                          modules=[d["options"].get("modules", "") for d in chunks])
    # samples skipped because they ended the process (benchmarks/realdml_conformance.py)
    out["process_ends"] = [s for d in chunks for s in d.get("process_ends", [])]
    out["total"] = sum(r.get("kind", "op") == "op" for r in out["records"])
    modes = {}
    for mode in chunks[0]["modes"]:
        rs = [r for r in out["records"] if mode in r]
        modes[mode] = counts(r[mode] for r in rs)
        groups = defaultdict(list)
        for r in rs:     # ModuleInfo samples in their own group, as summarize() does
            groups[r["dtype"] if r.get("kind", "op") == "op" else "modules"].append(r[mode])
        modes[mode]["groups"] = {g: {k: v for k, v in counts(cs).items() if k != "classes"}
                                 for g, cs in groups.items()}
    out["modes"] = modes
    return out


def criterion(real, emulator):
    """Parity with dmlshim, real vs emulator, over the samples both ran and the stack translated."""
    emu = {(r["op"], r["variant"], r["dtype"], r["index"]): r.get("shim") for r in emulator["records"]}
    pairs = [(r["shim"], emu[key]) for r in real["records"]
             for key in [(r["op"], r["variant"], r["dtype"], r["index"])]
             if key in emu and emu[key] and r.get("shim") not in ("stack", "nondeterministic")
             and not r.get("shim_message", "").startswith("not run")
             and emu[key] != "nondeterministic"]
    real_ok = sum(a in PARITY for a, _ in pairs)
    emu_ok = sum(b in PARITY for _, b in pairs)
    return {"samples": len(pairs), "real_parity": real_ok, "emulator_parity": emu_ok,
            "real_rate": real_ok / len(pairs) if pairs else 0.0,
            "emulator_rate": emu_ok / len(pairs) if pairs else 0.0,
            "emulator_file": emulator.get("_name"), "met": real_ok >= emu_ok}


def differing(records):
    """The records some mode classes other than ``match``, each mode's message kept on the
    first record of its op, variant, dtype and class only (the rest repeat it with other
    numbers)."""
    seen, kept = set(), []
    for r in records:
        if all(r.get(m) in (None, "match") for m in ("raw", "shim", "transparency")):
            continue
        r = dict(r)
        for m in ("raw", "shim", "transparency"):
            key = (r["op"], r["variant"], r["dtype"], m, r.get(m))
            if key in seen:
                r.pop(f"{m}_message", None)
            seen.add(key)
        kept.append(r)
    return kept


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("chunks", nargs="+")
    p.add_argument("--emulator")
    p.add_argument("--differing", action="store_true", help="keep only records some mode does not match")
    a = p.parse_args()
    chunks = [json.load(open(f, encoding="utf-8")) for f in a.chunks]
    out = merge(chunks)
    if a.emulator:
        emulator = json.load(open(a.emulator, encoding="utf-8"))
        emulator["_name"] = a.emulator.rsplit("/", 1)[-1]
        out["criterion"] = criterion(out, emulator)
    if a.differing:
        out["records"] = differing(out["records"])
        out["records_kept"] = ("differing: only records some mode does not match (counts over all); a mode's "
                               "message on the first record of its op, variant, dtype and class")
        out["cpu_rejects_count"], out["cpu_rejects"] = len(out["cpu_rejects"]), []
    write_json(out, a.out)


if __name__ == "__main__":
    main()
