#!/usr/bin/python3
"""bench/e2e_policy_say.py - does the extender's policy decide where GPU pods go
under the real kube-scheduler v1.20.2, or do kube-scheduler's own scores?

kube-scheduler adds the extender's /prioritize score (0..10, x weight x 10) to its
in-tree scores (NodeResourcesLeastAllocated, BalancedAllocation, ...), which
prefer emptier nodes: the opposite of a packing policy. This replays one seeded
sequence of GPU pods (whole 1/2/4/8-GPU and shared, with CPU requests) into a
cluster of API-only nodes (tests/e2e/kcluster.py: etcd, kube-apiserver, webhook,
kube-scheduler with deploy/'s config, one extender with deploy/'s config), one pod
at a time: each is bound, or refused and deleted (the benchmark's drop). Once per
extender setting (`top_k` 0, deploy/'s default then; 1). The proxy in front of the
extender records every /prioritize answer and /bind, so for each bound pod it
counts whether kube-scheduler bound it to a node the extender scored below its
best, and how many nodes shared the best score.

Prints per setting: pods bound, GPUs allocated (% of capacity, shares counted by
their compute), binds to a node below the extender's best, and the mean number of
nodes tied at the best score. Needs root and ../shared/k8s, like the e2e suite.
Not run in CI.

usage: bench/e2e_policy_say.py [--pods 90] [--seeds 1,2] [--top-k 0,1]
                               [--gpusched build/gpusched]
"""
import argparse
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import kcluster  # noqa: E402
import scale  # noqa: E402

NS = "default"
NODES = [(6, 8, "96", "prio8"), (6, 4, "48", "prio4"), (6, 2, "32", "prio2")]  # count, GPUs, CPU
GPUS = sum(n * g for n, g, _, _ in NODES)


def pod_sequence(n, seed):
    """(name, limits, GPUs counted) for n pods drawn from a fixed mix."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        x = rnd.random()
        if x < 0.35:
            lim, g = {"nvidia.com/gpu": "1", "cpu": str(rnd.choice((4, 8, 12)))}, 1.0
        elif x < 0.70:
            cores = rnd.choice((25, 50))
            lim = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": f"{cores * 80 // 100}Gi",
                   "nvidia.com/gpu-cores": str(cores), "cpu": str(rnd.choice((2, 4, 6)))}
            g = cores / 100
        elif x < 0.85:
            lim, g = {"nvidia.com/gpu": "2", "cpu": "16"}, 2.0
        elif x < 0.95:
            lim, g = {"nvidia.com/gpu": "4", "cpu": "32"}, 4.0
        else:
            lim, g = {"nvidia.com/gpu": "8", "cpu": "64"}, 8.0
        lim["memory"] = "8Gi"
        out.append((f"p{i:03d}", lim, g))
    return out


def run(gpusched, bins, workdirs, top_k, seq):
    c = kcluster.Cluster(gpusched, nodes=[], extender_replicas=1, bins=bins,
                         proxy_mode="leader", extender_config={"top_k": top_k})
    workdirs.append(c.workdir)
    c.start()
    try:
        for count, gpus, cpu, prefix in NODES:
            c.add_api_nodes(count, gpus=gpus, model="NVIDIA A100-SXM4-80GB",
                            memory_mib=81920, prefix=prefix, cpu=cpu, memory="512Gi")
        prio, binds = {}, {}
        forward = c.proxy.forward

        def recording(path, body):
            status, data = forward(path, body)
            verb = path.rsplit("/", 1)[-1]
            try:
                args = json.loads(body)
                if verb == "prioritize" and status == 200:
                    name = args["Pod"]["metadata"]["name"]
                    prio[name] = {h["Host"]: h["Score"] for h in json.loads(data) or []}
                elif verb == "bind" and status == 200 and not json.loads(data).get("Error"):
                    binds[args["PodName"]] = args["Node"]
            except (ValueError, KeyError, TypeError):
                pass
            return status, data
        c.proxy.forward = recording
        time.sleep(2)            # the extender has watched the new nodes
        bound, gpus_used = 0, 0.0
        for name, lim, g in seq:
            scale.create_pods(c, [scale.pod(name, lim)], threads=1)

            def done():
                p = c.pod(NS, name)
                if p and p["spec"].get("nodeName"):
                    return "bound"
                return "refused" if scale.failed_scheduling(c, NS, {name}) else None
            what = c.wait(done, 60, f"{name} bound or refused", interval=0.05)
            if what == "bound":
                bound += 1
                gpus_used += g
            else:
                c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}",
                      body={"gracePeriodSeconds": 0})
        below, ties, seen = 0, [], 0
        for name, node in binds.items():
            scores = prio.get(name)
            if not scores or len(scores) < 2:
                continue
            seen += 1
            top = max(scores.values())
            ties.append(sum(1 for s in scores.values() if s == top))
            below += scores.get(node, -1) < top
        return {"bound": bound, "alloc_pct": 100.0 * gpus_used / GPUS, "scored": seen,
                "below_best": below,
                "tied_at_best": sum(ties) / len(ties) if ties else 0.0}
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=90)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--top-k", default="0,1")
    ap.add_argument("--gpusched", default=os.path.join(ROOT, "build", "gpusched"))
    a = ap.parse_args()
    kcluster.check_host()
    bins = kcluster.k8s_binaries()
    before = kcluster.HostSnapshot.take()
    workdirs = []
    print(f"{GPUS} GPUs on {sum(n for n, *_ in NODES)} nodes; {a.pods} pods a seed")
    print("seed top_k  bound  GPUs allocated %  binds below the extender's best / scored  "
          "nodes tied at best (mean)")
    try:
        for seed in (int(s) for s in a.seeds.split(",")):
            seq = pod_sequence(a.pods, seed)
            for k in (int(x) for x in a.top_k.split(",")):
                r = run(a.gpusched, bins, workdirs, k, seq)
                print(f"{seed:4d} {k:5d}  {r['bound']:5d}  {r['alloc_pct']:16.1f}  "
                      f"{r['below_best']:5d} / {r['scored']:<5d}  {r['tied_at_best']:.2f}",
                      flush=True)
    finally:
        left = before.leftovers(kcluster.HostSnapshot.take(), workdirs)
        if left:
            print("left behind on the host:\n" + "\n".join(left), file=sys.stderr)


if __name__ == "__main__":
    main()
