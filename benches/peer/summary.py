"""Reads the JSON lines of a peer bench's runs (scripts/peer-bench.sh, scripts/round-trip-bench.sh;
stdin) and prints, per consumer line, the median of each figure, and each of this crate's lines
as ratios to each of the peer's."""

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
    ms = lambda f: "n/a" if m[f] is None else f"{m[f]:.3f} ms"
    print(
        f"{consumer}: medians of {len(rs)} runs: {m['per_second']:.0f} messages/s, "
        f"{m['requests_per_message']:.3f} requests per message, CPU per message: "
        f"client {ms('client_cpu_ms')}, server {ms('server_cpu_ms')}; runs: "
        + ", ".join(f"{r['per_second']:.0f}/s" for r in rs)
    )
for ours_name, ours in medians.items():
    if not ours_name.startswith("sqs-consumer"):
        continue
    for peer_name, peer in medians.items():
        if not peer_name.startswith("fanferro"):
            continue
        ratio = lambda f: "n/a" if not (ours[f] and peer[f]) else f"{ours[f] / peer[f]:.2f}"
        print(
            f"{ours_name} / {peer_name}: messages/s {ratio('per_second')}, "
            f"requests {ratio('requests_per_message')}, client CPU {ratio('client_cpu_ms')}, "
            f"server CPU {ratio('server_cpu_ms')}"
        )
