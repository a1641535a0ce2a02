#!/usr/bin/env python3
"""Per-arm times of gpu_attend JSON runs taken while the GPU's clock moved between steps.

usage: scripts/plateau.py RUN.json [RUN.json ...] [--match SUBSTRING ...]

On the H200 of 2026-12-06 the clock stepped between ~345 MHz and 1980 MHz inside single
runs (nvidia-smi dmon), so each arm's samples fell on 2-4 plateaus up to ~5x apart and the
median was whichever plateau held most samples. This prints, for each run and arm, the
samples within 3 % of the arm's fastest sample (the top plateau: the highest clock the run
reached), their count and their median, and the plain median for reference. Compare two
builds only through arms whose top plateaus both hold several samples.
"""
import json
import statistics
import sys


def main(argv):
    files = [a for a in argv if a.endswith(".json")]
    match = [a for a in argv if not a.endswith(".json") and a != "--match"]
    print("| run | arm | top-plateau samples | their median µs | plain median µs |")
    print("|---|---|---|---|---|")
    for f in files:
        d = json.load(open(f))
        for a in d["arms"]:
            if a.get("twin"):
                continue
            if match and not any(m in a["name"] for m in match):
                continue
            us = [x / 1000 for x in a["samples_ns"]]
            lo = min(us)
            top = [x for x in us if x <= lo * 1.03]
            print(
                f"| {f.split('/')[-1][:-5]} | {a['name']} | {len(top)} of {len(us)} | "
                f"{statistics.median(top):.1f} | {statistics.median(us):.1f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
