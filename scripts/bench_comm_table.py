#!/usr/bin/env python3
"""Turns bench_comm's JSON output into the bus-bandwidth tables of docs/PERFORMANCE.md.

Usage:
  build/bin/bench_comm --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      --benchmark_out=comm.json --benchmark_out_format=json
  scripts/bench_comm_table.py comm.json

Prints one table per (backend, ranks): median bus bandwidth in GB/s (1e9 B/s) for each
collective and size, and, for reference, the median memcpy bandwidth of the same size.
"""
import json
import re
import sys
from collections import defaultdict


def main(path):
    with open(path) as f:
        data = json.load(f)
    rows = defaultdict(dict)  # (backend, ranks) -> {(collective, size): busbw}
    memcpy = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        busbw = b.get("busbw")
        if busbw is None:
            continue
        size = int(b["size"])
        if name.startswith("memcpy/"):
            memcpy[size] = busbw
            continue
        m = re.match(r"(.+)/(all_reduce|all_gather|reduce_scatter|broadcast)/(\d+)/.*threads:(\d+)", name)
        if not m:
            continue
        backend, collective, _, ranks = m.group(1), m.group(2), m.group(3), int(m.group(4))
        rows[(backend, ranks)][(collective, size)] = busbw
    sizes = sorted({s for r in rows.values() for (_, s) in r})
    collectives = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
    for (backend, ranks), cells in sorted(rows.items()):
        print(f"\n{backend}, {ranks} ranks: bus bandwidth, GB/s (median)\n")
        print("| size | " + " | ".join(collectives) + " | memcpy |")
        print("|---:|" + "---:|" * (len(collectives) + 1))
        for s in sizes:
            vals = [cells.get((c, s)) for c in collectives]
            text = ["-" if v is None else f"{v / 1e9:.2f}" for v in vals]
            mc = memcpy.get(s)
            print(f"| {s >> 20} MiB | " + " | ".join(text) + f" | {'-' if mc is None else f'{mc / 1e9:.2f}'} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
