#!/usr/bin/python3
"""Markdown tables of bench/bench_bound_grid.sh's JSON files.

    bench/bench_bound_table.py OUT_DIR TRACE...

Prints (1) per trace the LP lower bound on unallocated GPU % at arrived
100 % and each policy's mean, with its distance to the bound, from
OUT_DIR/bound-TRACE.json; (1b) how tight the bound is: the offline placement
of bench_bound_offline (OUT_DIR/offline-TRACE.txt, its `mean` line) against
the bound and cpufrag; (1c) the bound for work-conserving schedulers of
bench_bound_wc (OUT_DIR/wc-TRACE.txt, its `mean` line) against the bound and
the policies; (2) per trace with timestamps and load the
time-weighted GPU allocation and the p99 queueing delay of GPU pods from
OUT_DIR/time-TRACE.json; (3) queueing delay per request class on `default`
and `gpuspec25` (the one with most model-constrained pods).
"""
import json
import os
import sys


def fmt_delay(s):
    if s is None:
        return "-"
    if s < 0.5:
        return "0"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def mean_line(out, kind, t):
    """The numbers of OUT_DIR/KIND-TRACE.txt's `mean` line and the policies' means of
    OUT_DIR/bound-TRACE.json, or None when the text file or its line is missing."""
    path = os.path.join(out, f"{kind}-{t}.txt")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        mean = [ln.split() for ln in f if ln.startswith("mean")]
    if not mean:
        return None
    with open(os.path.join(out, f"bound-{t}.json")) as f:
        doc = json.load(f)
    res = {r["policy"]: r["unallocated_pct_at_100"]["mean"] for r in doc["results"]}
    return [float(x) for x in mean[0][1:]], res


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out, traces = argv[1], argv[2:]
    pols = ["bestfit", "fgd", "cpufrag"]
    print("| trace | LP bound | cpufrag | fgd | bestfit | cpufrag - bound | fgd - bound "
          "| bestfit - bound |")
    print("|---|---|---|---|---|---|---|---|")
    gaps = {p: [] for p in pols}
    for t in traces:
        with open(os.path.join(out, f"bound-{t}.json")) as f:
            doc = json.load(f)
        b = doc["bound"]["unallocated_pct_at_100"]
        res = {r["policy"]: r["unallocated_pct_at_100"] for r in doc["results"]}
        cells = [f"{b['mean']:.2f} ± {b['sd']:.2f}"]
        cells += [f"{res[p]['mean']:.2f} ± {res[p]['sd']:.2f}" for p in ("cpufrag", "fgd", "bestfit")]
        for p in ("cpufrag", "fgd", "bestfit"):
            g = res[p]["mean"] - b["mean"]
            gaps[p].append(g)
            cells.append(f"{g:+.2f}")
        print(f"| {t} | " + " | ".join(cells) + " |")
    print("| **mean distance** | | | | | " + " | ".join(
        f"{sum(gaps[p]) / len(gaps[p]):+.2f}" for p in ("cpufrag", "fgd", "bestfit")) + " |")
    print()
    rows = []
    for t in traces:
        got = mean_line(out, "offline", t)
        if got:
            m, res = got
            cf = res["cpufrag"]
            # bin: bound, placement, gap; last sample: bound, placement, gap
            rows.append(f"| {t} | {m[0]:.2f} | {m[1]:.2f} | {m[1] - m[0]:.2f} | {m[3]:.2f} "
                        f"| {m[4]:.2f} | {cf:.2f} | {cf - m[1]:+.2f} |")
    if rows:
        print("| trace | LP bound (bin) | offline placement (bin) | bracket | LP bound (last "
              "sample) | offline placement (last sample) | cpufrag | cpufrag - placement |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        print()
    rows = []
    for t in traces:
        got = mean_line(out, "wc", t)
        if got:
            # B, W, W-B, the order alone, forced %, first unforced arrived %, lemma sets, W s
            m, res = got
            w = max(m[1], m[0])
            rows.append(f"| {t} | {m[0]:.2f} | {w:.2f} | {w - m[0]:.2f} | {m[3]:.2f} | {m[4]:.1f} "
                        f"| {m[5]:.1f} | {res['cpufrag']:.2f} | {res['fgd']:.2f} "
                        f"| {res['bestfit']:.2f} | {res['cpufrag'] - w:+.2f} "
                        f"| {res['fgd'] - w:+.2f} | {res['bestfit'] - w:+.2f} | {m[6]:.0f} "
                        f"| {m[7]:.1f} |")
    if rows:
        print("| trace | bound B | bound-wc W | W - B | order alone | forced % "
              "| first unforced at arrived % | cpufrag | fgd | bestfit | cpufrag - W "
              "| fgd - W | bestfit - W | lemma sets | W s/seed |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        print()
    print("| trace | load | alloc % bestfit | fgd | cpufrag | waiting GPU % bestfit | fgd | cpufrag "
          "| p99 delay bestfit | fgd | cpufrag |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    per_class = {}
    for t in traces:
        path = os.path.join(out, f"time-{t}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            doc = json.load(f)
        if t in ("default", "gpuspec25"):
            per_class[t] = doc
        loads = sorted({r["load"] for r in doc["results"]})
        for ld in loads:
            res = {r["policy"]: r for r in doc["results"] if r["load"] == ld}
            a = [f"{res[p]['gpu_alloc_pct_time_mean']['mean']:.2f}" for p in pols]
            w = [f"{res[p]['pending_gpu_pct_time_mean']['mean']:.2f}" for p in pols]
            d = [fmt_delay(res[p]["delay"]["all"]["p99_s"]["mean"]) for p in pols]
            print(f"| {t} | {ld:g} | " + " | ".join(a + w + d) + " |")
    for t, doc in per_class.items():
        print()
        print(f"| {t}: load | class | pods | bestfit p50 / p90 / p99 | fgd | cpufrag |")
        print("|---|---|---|---|---|---|")
        for ld in sorted({r["load"] for r in doc["results"]}):
            res = {r["policy"]: r for r in doc["results"] if r["load"] == ld}
            for c in ("all", "whole", "multi_gpu", "sharing", "model_constrained"):
                n = res["cpufrag"]["delay"][c]["pods"]
                if n == 0:
                    continue
                cells = []
                for p in pols:
                    x = res[p]["delay"][c]
                    cells.append(" / ".join(fmt_delay(x[q]["mean"]) for q in ("p50_s", "p90_s",
                                                                               "p99_s")))
                print(f"| {ld:g} | {c} | {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
