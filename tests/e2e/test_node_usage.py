"""Pods without GPUs count on their nodes, through the real API server and
kube-scheduler: a pod bound without a GPU assignment (a CPU-only job, a DaemonSet's,
one placed by its nodeName) takes CPU that kube-scheduler counts, and the extender's
policy must see it too, or it takes a node whose CPU is gone for an empty one.

Three API-only nodes: `seed-0` with one GPU, `use-0` and `use-1` with eight GPUs and
64 cores each. A seed pod of one GPU and 8 cores, held to seed-0, teaches the extender
its workload (GPU pods of 8 cores). Then a CPU-only pod of 60 cores is put on one of
the use nodes by its nodeName, and a GPU pod of one core comes: cpufrag (the default)
puts it on the node whose GPUs that CPU hog has stranded, keeping the other node's
GPUs for pods that need CPU. Alike, the two use nodes would go by the seeded rank:
the test runs both ways round, and a choice that ignores the hog fails one of them.
The extender's decision trace (/debug/pods) shows each node's free CPU as
kube-scheduler counts it: allocatable less the requests of every pod bound there.
A GPU pod with preferred pod affinity to a CPU-only pod goes to that pod's node,
both ways round, as kube-scheduler's InterPodAffinity would have it.

Pods on API-only nodes never start: asserted on bindings and annotations."""
import pytest
import requests

import scale

NS = "default"
USE = ["use-0", "use-1"]
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def usage(host_clean):
    with scale.api_only_cluster(host_clean) as c:
        c.add_api_nodes(1, gpus=1, prefix="seed")
        c.add_api_nodes(2, gpus=8, prefix="use")
        seed = scale.pod("seed", {"nvidia.com/gpu": "1", "cpu": "8"}, labels={"e2e": "seed"})
        seed["spec"]["nodeSelector"] = {HOSTNAME: "seed-0"}
        scale.create_pods(c, [seed])
        bound(c, "seed")
        yield c


def bound(c, name):
    return c.wait(lambda: (lambda q: q if q and q["spec"].get("nodeName") else None)(
        c.pod(NS, name)), 60, f"{name} bound")


def requested_cpu(c, node):
    """Millicores kube-scheduler counts on node: the requests of its pods."""
    total = 0
    for p in c.pods(NS):
        if p["spec"].get("nodeName") != node or p["status"].get("phase") in ("Succeeded",
                                                                             "Failed"):
            continue
        for ctr in p["spec"]["containers"]:
            q = ctr.get("resources", {}).get("requests", {}).get("cpu", "0")
            total += int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)
    return total


@pytest.mark.parametrize("busy", USE)
def test_gpu_pod_goes_where_other_pods_stranded_the_gpus(usage, busy):
    c = usage
    hog = scale.pod(f"hog-{busy}", {"cpu": "60", "memory": "1Gi"}, scheduler=None)
    hog["spec"]["nodeName"] = busy  # placed by hand, as a DaemonSet's pod is
    scale.create_pods(c, [hog])
    try:
        name = f"small-{busy}"
        scale.create_pods(c, [scale.pod(name, {"nvidia.com/gpu": "1", "cpu": "1"})])
        p = bound(c, name)
        assert p["spec"]["nodeName"] == busy, (
            f"{name} bound to {p['spec']['nodeName']}: {busy}'s 8 GPUs have 4 cores left "
            f"for them, the other node's 64")
        r = requests.get(f"{c.extender_url(0)}/debug/pods/{NS}/{name}", timeout=10,
                         verify=False)
        assert r.status_code == 200, r.text
        hosts = {n["node"]: n["host"] for n in r.json()["nodes"]}
        for node in USE:
            want = 64000 - requested_cpu(c, node)
            assert hosts[node]["free_cpu_milli"] == want, (node, hosts[node], want)
        assert hosts[busy]["other_pods"] == 1 and hosts[busy]["pods"] == 2, hosts
    finally:
        c.force_delete_all(NS, "e2e=1")


@pytest.mark.parametrize("near", USE)
def test_gpu_pod_prefers_its_cpu_only_peer(usage, near):
    """Preferred pod affinity to a pod without GPUs (a cache placed by its nodeName):
    the extender counts it as kube-scheduler's InterPodAffinity does, so the GPU pod
    goes to its node; alike, the rank would send it to the same node both times."""
    c = usage
    cache = scale.pod(f"cache-{near}", {"cpu": "100m", "memory": "64Mi"}, scheduler=None,
                      labels={"e2e": "1", "app": f"cache-{near}"})
    cache["spec"]["nodeName"] = near
    p = scale.pod(f"near-{near}", {"nvidia.com/gpu": "1", "cpu": "1"})
    p["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": f"cache-{near}"}},
            "topologyKey": HOSTNAME}}]}}
    scale.create_pods(c, [cache])
    try:
        c.wait(lambda: requested_cpu(c, near) >= 100, 30, "cache bound")
        scale.create_pods(c, [p])
        got = bound(c, f"near-{near}")["spec"]["nodeName"]
        assert got == near, f"near-{near} bound to {got}, not beside its cache on {near}"
    finally:
        c.force_delete_all(NS, "e2e=1")
