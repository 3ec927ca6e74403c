#!/usr/bin/python3
"""Markdown table of `gpusched simulate --json` results, one file per trace.

    bench/bench_pol_table.py OUT_DIR TRACE...

reads OUT_DIR/TRACE.json for each trace and prints one row per trace: mean
+- sd of the unallocated GPU % at arrived 100 % for every policy in the
files (in their order), the last policy's gain over fgd, and which policy
is best. bench/bench_pol_grid.sh writes the files.
"""
import json
import os
import sys


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out, traces = argv[1], argv[2:]
    rows, pols = [], None
    for t in traces:
        with open(os.path.join(out, t + ".json")) as f:
            doc = json.load(f)
        res = {r["policy"]: r["unallocated_pct_at_100"] for r in doc["results"]}
        names = [r["policy"] for r in doc["results"]]
        if pols is None:
            pols = names
        elif names != pols:
            sys.stderr.write(f"{t}: policies {names} differ from {pols}\n")
            return 1
        rows.append((t, res))
    new = pols[-1]
    print("| trace | " + " | ".join(pols) + f" | {new} vs fgd |")
    print("|---" * (len(pols) + 2) + "|")
    sums = {p: 0.0 for p in pols}
    for t, res in rows:
        best = min(pols, key=lambda p: res[p]["mean"])
        cells = []
        for p in pols:
            c = f"{res[p]['mean']:.2f} ± {res[p]['sd']:.2f}"
            cells.append(f"**{c}**" if p == best else c)
            sums[p] += res[p]["mean"]
        gain = 100 * (res[new]["mean"] - res["fgd"]["mean"]) / res["fgd"]["mean"]
        print(f"| {t} | " + " | ".join(cells) + f" | {gain:+.1f} % |")
    n = len(rows)
    mean = {p: sums[p] / n for p in pols}
    gain = 100 * (mean[new] - mean["fgd"]) / mean["fgd"]
    print(f"| **mean of {n}** | " + " | ".join(f"{mean[p]:.2f}" for p in pols) +
          f" | {gain:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
