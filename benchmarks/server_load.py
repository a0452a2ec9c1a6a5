"""FunASR's funasr-server under load: the emulated DirectML device (dmlshim run) vs the CPU.

Two servers on 127.0.0.1 (free ports, stopped by their PIDs), built by
examples/funasr_server.py: ``dmlshim run --device emulated funasr-server --device
privateuseone:0`` and plain ``funasr-server --device cpu``, both on a tiny
random-weight SeacoParaformer, then both on a tiny Fun-ASR-Nano (``--model
fun-asr-nano``; examples/funasr_models.py; ``ncpu: 1``, the 2-core setting of the tests). Each gets N requests of the bundled speech (zh.wav / en.wav,
about 6.6 s each) from K threads of the official ``openai`` client, bounded in count
and in time (``--budget`` seconds; the run fails past it).

Rows (seconds per request): p50 as ``median_s``, the fastest as ``min_s``; the note
holds p95, throughput and the server's RSS growth from after the warm-up requests to
the end. ``extra`` holds the same per server plus the bad-upload outcomes (HTTP status
of each, and whether the next good request got the right text). Exit status 1 if a
transcript differs from the CPU server's, a bad upload kills a server, or the budget
is exceeded. ``--quick`` (make bench's CI form): 12 requests, the SeacoParaformer servers only.
"""
import concurrent.futures as cf
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import timing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


# (row label, funasr_models kind, funasr-server --model): Fun-ASR-Nano beside Paraformer
MODELS = (("tiny SeacoParaformer", "seaco", None), ("tiny Fun-ASR-Nano", "nano", "fun-asr-nano"))


def model_dir(tmp, kind="seaco"):
    import yaml

    import funasr_models

    src = funasr_models.build(kind)
    dst = Path(tmp) / src.name     # Nano's LLM paths stay absolute, into src
    shutil.copytree(src, dst)
    config = yaml.safe_load((dst / "config.yaml").read_text(encoding="utf-8"))
    (dst / "config.yaml").write_text(yaml.safe_dump(dict(config, ncpu=1), allow_unicode=True),
                                     encoding="utf-8")
    return dst


def load(server, good, requests, threads, budget):
    """Send ``requests`` transcriptions from ``threads`` threads; per-request latencies,
    texts by file, wall time, RSS after the warm-up round and at the end."""
    from funasr_server import transcribe

    client = server.client(max_retries=0)
    names = [list(good)[i % len(good)] for i in range(requests)]
    for name in names[:threads]:                        # warm-up, untimed
        transcribe(client, good[name], name)
    rss_start = server.rss()

    def one(name):
        start = time.perf_counter()
        text = transcribe(client, good[name], name)
        return name, text, time.perf_counter() - start

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, names, timeout=budget))
    wall = time.perf_counter() - start
    texts = {}
    for name, text, _ in results:
        texts.setdefault(name, set()).add(text)
    return {"latencies": sorted(r[2] for r in results), "texts": texts, "wall_s": wall,
            "rss_start": rss_start, "rss_end": server.rss()}


def bad_upload_outcomes(server, good):
    """Each bad upload's HTTP status (200 if answered) and whether the next good request
    still gets the right text."""
    import openai

    from funasr_server import bad_uploads, transcribe

    client = server.client(max_retries=2)
    reference = transcribe(client, good["zh.wav"], "zh.wav")
    out = {}
    for name, data in bad_uploads().items():
        try:
            transcribe(client, data, name)
            status = 200
        except openai.APIStatusError as exc:
            status = exc.status_code
        out[name] = {"status": status,
                     "next_ok": transcribe(client, good["zh.wav"], "zh.wav") == reference}
    return out


def main():
    parser = timing.arg_parser(__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, help="N requests per server (default 48, quick 12; "
                                                     "--quick: the first of MODELS only)")
    parser.add_argument("--threads", type=int, default=3, help="K client threads (default 3)")
    parser.add_argument("--budget", type=float, default=300, help="seconds allowed per server's load")
    args = parser.parse_args()
    requests = args.requests or (12 if args.quick else 48)

    from funasr_server import Server, samples

    good = samples()
    rows, extra, ok = [], {"requests": requests, "threads": args.threads}, True
    for label, kind, server_model in MODELS[:1] if args.quick else MODELS:
        model_rows, model_extra, model_ok = run_model(args, requests, good, label, kind,
                                                      server_model, Server)
        rows += model_rows
        ok &= model_ok
        # Paraformer's keys as before; Nano's under its label
        extra.update(model_extra if kind == "seaco" else {f"{label}: {k}": v
                                                            for k, v in model_extra.items()})
    timing.finish(args, "server_load", rows, extra)
    for key, value in extra.items():
        if isinstance(value, dict) and "bad_uploads" in value:
            print(f"{key}: bad uploads -> " + ", ".join(
                f"{n}: HTTP {o['status']}{'' if o['next_ok'] else ' (NEXT REQUEST FAILED)'}"
                for n, o in value["bad_uploads"].items()))
    return 0 if ok else 1


def run_model(args, requests, good, label, kind, server_model, Server):
    """(rows, extra, ok) of the CPU and the emulated server on one model."""
    rows, extra, ok = [], {}, True
    with tempfile.TemporaryDirectory() as tmp:
        path = model_dir(tmp, kind)
        results = {}
        for variant, device in (("cpu server", "cpu"), ("emulated DirectML server (dmlshim run)", "emulated")):
            with Server(device, path, log_dir=tmp, model=server_model) as server:
                results[variant] = load(server, good, requests, args.threads, args.budget)
                results[variant]["bad_uploads"] = bad_upload_outcomes(server, good)
                results[variant]["alive"] = server.proc.poll() is None
            ok &= results[variant]["wall_s"] < args.budget and results[variant]["alive"]
            ok &= all(o["next_ok"] for o in results[variant]["bad_uploads"].values())
    cpu_texts = results["cpu server"]["texts"]
    base = None
    for variant, r in results.items():
        lat = r["latencies"]
        p50, p95 = statistics.median(lat), lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
        same = r["texts"] == cpu_texts and all(len(t) == 1 for t in r["texts"].values())
        ok &= same
        base = base or p50
        growth = (r["rss_end"] - r["rss_start"]) / 2**20
        note = (f"p95 {timing.seconds(p95)}, {requests / r['wall_s']:.2f} req/s, "
                f"RSS {r['rss_end'] / 2**20:.0f} MiB (+{growth:.1f} MiB over {requests} requests), "
                + ("transcripts == CPU server" if same else "TRANSCRIPTS DIFFER"))
        rows.append({"case": f"{requests} requests, {args.threads} threads, {label}",
                     "variant": variant, "min_s": lat[0], "median_s": p50, "repeats": len(lat),
                     "ratio": p50 / base, "note": note})
        extra[variant] = {"p50_s": p50, "p95_s": p95, "throughput_rps": requests / r["wall_s"],
                          "wall_s": r["wall_s"], "rss_start_bytes": r["rss_start"],
                          "rss_end_bytes": r["rss_end"], "rss_growth_bytes": r["rss_end"] - r["rss_start"],
                          "transcripts_equal_cpu": same, "bad_uploads": r["bad_uploads"]}
    return rows, extra, ok


if __name__ == "__main__":
    sys.exit(main())
