"""Reads the JSON lines of scripts/peer-bench.sh's runs (stdin) and prints, per consumer, the
median of each figure, and this crate's figures as ratios to the peer's."""

import json
import statistics
import sys

FIGURES = ("per_second", "requests_per_message", "client_cpu_ms", "server_cpu_ms")

runs: dict[str, list[dict]] = {}
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        run = json.loads(line)
        runs.setdefault(run["consumer"], []).append(run)

medians = {}
for consumer, rs in runs.items():
    medians[consumer] = {
        f: statistics.median(r[f] for r in rs if r.get(f) is not None)
        if any(r.get(f) is not None for r in rs)
        else None
        for f in FIGURES
    }
    m = medians[consumer]
    print(
        f"{consumer}: medians of {len(rs)} runs: {m['per_second']:.0f} messages/s, "
        f"{m['requests_per_message']:.3f} requests per message, CPU per message: "
        f"client {m['client_cpu_ms']:.3f} ms, server "
        + ("n/a" if m["server_cpu_ms"] is None else f"{m['server_cpu_ms']:.3f} ms")
        + "; runs: "
        + ", ".join(f"{r['per_second']:.0f}/s" for r in rs)
    )
ours, peer = medians.get("sqs-consumer"), medians.get("fanferro")
if ours and peer:
    ratio = lambda f: "n/a" if not (ours[f] and peer[f]) else f"{ours[f] / peer[f]:.2f}"
    print(
        f"sqs-consumer / fanferro: messages/s {ratio('per_second')}, requests {ratio('requests_per_message')}, "
        f"client CPU {ratio('client_cpu_ms')}, server CPU {ratio('server_cpu_ms')}"
    )
