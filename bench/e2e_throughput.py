#!/usr/bin/python3
"""bench/e2e_throughput.py - pods/s from creation to binding through the real
kube-scheduler v1.20.2 (tests/e2e/kcluster.py: etcd, kube-apiserver, webhook,
API-only nodes), with the gpusched extender versus the same kube-scheduler with
whole GPUs as a plain extended resource and no extender, in one run.

Each round creates PODS whole 1-GPU pods at once (16 client threads), records
when each one is bound (a pod watch) and force-deletes them again. Modes
alternate round by round so both see the same machine:
  extender  the harness's scheduler config (deploy/'s, percentageOfNodesToScore
            100, filter/prioritize/bind through the extender), two extender
            replicas behind the one URL (the proxy's service mode; the follower
            forwards /bind to the leader)
  plain     the same config without the extender: nvidia.com/gpu is an ordinary
            extended resource, counted by kube-scheduler's NodeResourcesFit; the
            extender replicas are stopped
Nodes: 100 GPU nodes (8 GPUs) plus CPU-only nodes up to each size; sizes run in
increasing order on one cluster (nodes are only added).

Prints one line per round and, per size and mode, the medians: "total" is
PODS / (last binding - first creation), "sched" is (PODS - 1) / (last binding -
first binding). Needs root and ../shared/k8s, like the e2e suite. Not run in CI.

usage: bench/e2e_throughput.py [--pods 500] [--rounds 3] [--sizes 1104,5000]
                               [--modes extender,plain] [--gpusched build/gpusched]
"""
import argparse
import os
import signal
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import kcluster  # noqa: E402
import scale  # noqa: E402

NS = "default"
GPU_NODES, GPUS = 100, 8


def no_extender(cfg):
    cfg.pop("extenders", None)


class BindPoll:
    """Records when each pod of the round is first seen bound (a list every 0.25 s;
    the resolution of the numbers below)."""

    def __init__(self, c):
        self.c, self.bound, self.stop = c, {}, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                items = self.c.pods(NS, "e2e=1")
            except Exception:   # a slow list: try again
                continue
            now = time.time()
            for p in items:
                if p["spec"].get("nodeName"):
                    self.bound.setdefault(p["metadata"]["name"], now)
            self.stop.wait(0.25)

    def count(self):
        return len(self.bound)

    def close(self):
        self.stop.set()
        self.thread.join()


def one_round(c, tag, pods):
    w = BindPoll(c)
    objs = [scale.pod(f"{tag}-{i}", scale.WHOLE1) for i in range(pods)]
    t0 = time.time()
    scale.create_pods(c, objs, threads=16)
    t_created = time.time()
    c.wait(lambda: w.count() >= pods, 900, f"{pods} pods bound", interval=0.2)
    w.close()
    times = sorted(w.bound.values())
    res = {"total": pods / (times[-1] - t0),
           "sched": (pods - 1) / max(times[-1] - times[0], 0.25),
           "create_s": t_created - t0, "span_s": times[-1] - t0}
    c.force_delete_all(NS, "e2e=1", timeout=300)
    time.sleep(3)   # the extender's watch sees the deletions
    return res


def set_mode(c, mode):
    if mode == "plain":
        for i in range(len(c.extenders)):
            if c.extenders[i].alive():
                c.kill_extender(i, sig=kcluster.signal.SIGTERM)
        c.restart_scheduler(no_extender)
    else:
        for i in range(len(c.extenders)):
            if not c.extenders[i].alive():
                c.restart_extender(i)
        c.wait(c.lease_holder, 30, "an extender leads")
        c.restart_scheduler()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1104,5000")
    ap.add_argument("--modes", default="extender,plain")
    ap.add_argument("--gpusched", default=os.path.join(ROOT, "build", "gpusched"))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    modes = a.modes.split(",")
    kcluster.check_host()
    # a timeout's SIGTERM still tears the cluster down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    c = kcluster.Cluster(a.gpusched, nodes=[], extender_replicas=2, proxy_mode="service",
                         extender_config={"inventory_ttl": 0})
    c.start()
    results = {}
    try:
        c.add_api_nodes(GPU_NODES, gpus=GPUS, prefix="gpu")
        have = GPU_NODES
        for size in sizes:
            c.add_api_nodes(size - have, gpus=0, prefix=f"cpu{size}", threads=16)
            have = size
            for r in range(a.rounds):
                for mode in modes:
                    set_mode(c, mode)
                    res = one_round(c, f"r{size}-{r}-{mode}", a.pods)
                    results.setdefault((size, mode), []).append(res)
                    print(f"{size} nodes  {mode:8s} round {r}: {res['total']:.1f} pods/s "
                          f"creation->binding, {res['sched']:.1f} pods/s first->last "
                          f"binding (creating took {res['create_s']:.1f} s, all bound at "
                          f"{res['span_s']:.1f} s)", flush=True)
        print("\nmedians (pods/s): nodes, mode, creation->binding, first->last binding")
        for (size, mode), rs in sorted(results.items()):
            print(f"  {size:5d}  {mode:8s}  {statistics.median(r['total'] for r in rs):6.1f}  "
                  f"{statistics.median(r['sched'] for r in rs):6.1f}")
        for size in sizes:
            if (size, "extender") in results and (size, "plain") in results:
                e = statistics.median(r["total"] for r in results[(size, "extender")])
                p = statistics.median(r["total"] for r in results[(size, "plain")])
                print(f"  {size:5d}  extender / plain: {100 * e / p:.0f} %")
    finally:
        c.stop()


if __name__ == "__main__":
    main()
