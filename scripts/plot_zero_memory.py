#!/usr/bin/env python3
"""Plots bench_zero's per-rank memory against ZeRO stage and world size.

usage: python3 scripts/plot_zero_memory.py ZERO.json OUT.png
ZERO.json is bench_zero's --benchmark_out (JSON). Bars: measured parameters + gradients +
optimizer states per rank (max over ranks); a dot on each bar: the ZeRO formula for the same
model; hatched on top: stage 3's gathered parameters. Needs matplotlib (pip install matplotlib).
"""
import json
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_zero_memory.py needs matplotlib: python3 -m pip install --user matplotlib")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if "state_bytes" in b]
    worlds = sorted({int(b["world"]) for b in runs})
    stages = sorted({int(b["stage"]) for b in runs})
    # psi from the stage-0, world-1 run: 16 bytes per parameter (bf16 params and grads, Adam).
    by = {(int(b["world"]), int(b["stage"])): b for b in runs}
    psi = by[(1, 0)]["state_bytes"] / 16.0
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(worlds)
    for i, w in enumerate(worlds):
        xs = [s + (i - (len(worlds) - 1) / 2) * width for s in stages]
        state = [by[(w, s)]["state_bytes"] / 2**20 for s in stages]
        gathered = [by[(w, s)]["gathered_bytes"] / 2**20 for s in stages]
        ax.bar(xs, state, width, label=f"{w} rank{'s' if w > 1 else ''}")
        ax.bar(xs, gathered, width, bottom=state, color="none", edgecolor="gray", hatch="//")
        formula = [(2 * psi * (1 if s < 3 else 1 / w) + 2 * psi * (1 if s < 2 else 1 / w) +
                    12 * psi * (1 if s < 1 else 1 / w)) / 2**20 for s in stages]
        ax.plot(xs, formula, "k.", markersize=6)
    ax.set_xticks(stages, [f"stage {s}" for s in stages])
    ax.set_ylabel("MiB per rank")
    ax.set_title(f"ZeRO memory per rank, GPT of {psi / 1e6:.2f}M parameters (bf16 + Adam)\n"
                 "bars: measured params+grads+optimizer states; dots: formula; "
                 "hatched: gathered (stage 3)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
