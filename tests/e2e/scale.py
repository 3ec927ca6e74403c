"""Helpers shared by the scale-type scenarios (test_scale, test_requeue, test_ha,
test_preemption) and bench/e2e-throughput.py: a cluster of API-only nodes, pods
created in parallel, the assignment read back from the pods' annotations
(docs/annotations.md) and checked for oversubscription."""
import contextlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import yaml

import kcluster
from conftest import gpusched_bin

PREFIX = kcluster.PREFIX


def shipped_percentage():
    """percentageOfNodesToScore as deploy/ ships it for kube-scheduler 1.20 (None: unset,
    kube-scheduler's adaptive default)."""
    for name in ("scheduler-config-v1beta1.yaml", "scheduler-config.yaml"):
        path = os.path.join(kcluster.ROOT, "deploy", name)
        if os.path.isfile(path):
            with open(path) as f:
                return yaml.safe_load(f).get("percentageOfNodesToScore")
    raise AssertionError("deploy/ ships no scheduler config")


def set_percentage(value):
    """An edit for Cluster.restart_scheduler: percentageOfNodesToScore = value (None:
    left out)."""
    def edit(cfg):
        cfg.pop("percentageOfNodesToScore", None)
        if value is not None:
            cfg["percentageOfNodesToScore"] = value
    return edit


def pod(name, limits, ns="default", labels=None, priority_class=None, scheduler="gpu-scheduler"):
    """A pod for API-only nodes (no kubelet will run it)."""
    spec = {"containers": [{"name": "main", "image": kcluster.PAUSE_IMAGE,
                            "resources": {"limits": dict(limits)}}],
            "terminationGracePeriodSeconds": 0}
    if scheduler:
        spec["schedulerName"] = scheduler
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {"e2e": "1"})},
            "spec": spec}


WHOLE1 = {"nvidia.com/gpu": "1"}
WHOLE2 = {"nvidia.com/gpu": "2"}
SHARED10 = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "10Gi", "nvidia.com/gpu-cores": "25"}
SHARED4 = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "4Gi", "nvidia.com/gpu-cores": "10"}


def create_pods(cluster, objs, threads=16):
    """POST every pod at once from `threads` clients; returns the names."""
    def make(o):
        ns = o["metadata"]["namespace"]
        r = cluster.api("POST", f"/api/v1/namespaces/{ns}/pods", body=o)
        if r.status_code not in (200, 201):
            raise AssertionError(f"creating {o['metadata']['name']}: {r.status_code} "
                                 f"{r.text[:300]}")
        return o["metadata"]["name"]
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(make, objs))


def pods_by_name(cluster, ns, selector="e2e=1"):
    return {p["metadata"]["name"]: p for p in cluster.pods(ns, selector)}


def failed_scheduling(cluster, ns, names=None):
    """{pod name: [FailedScheduling messages]} from the namespace's events."""
    r = cluster.api("GET", f"/api/v1/namespaces/{ns}/events",
                    params={"fieldSelector": "reason=FailedScheduling"})
    r.raise_for_status()
    out = {}
    for e in r.json()["items"]:
        n = e["involvedObject"].get("name")
        if names is None or n in names:
            out.setdefault(n, []).append(e.get("message", ""))
    return out


def inventories(cluster, prefix):
    """{node: {uuid: memory_mib}} of the API-only GPU nodes named prefix-*."""
    r = cluster.api("GET", "/api/v1/nodes")
    r.raise_for_status()
    out = {}
    for n in r.json()["items"]:
        name = n["metadata"]["name"]
        inv = n["metadata"].get("annotations", {}).get(PREFIX + "gpu-inventory")
        if name.startswith(prefix) and inv:
            out[name] = {g["uuid"]: g["memory_mib"] for g in json.loads(inv)["gpus"]}
    return out


def check_assignments(pods, inv):
    """Assert that every bound pod's assignment annotations (docs/annotations.md) name
    its node and GPUs of that node, and that no GPU is oversubscribed: a whole GPU
    belongs to one pod, shared GPUs' memory and compute sums stay within the GPU.
    Returns {uuid: [pod names]}."""
    use = {}   # uuid -> [(pod, kind, memory, milli)]
    for name, p in pods.items():
        node = p["spec"].get("nodeName")
        if not node:
            continue
        ann = p["metadata"].get("annotations", {})
        assert ann.get(PREFIX + "node") == node, f"{name}: gpusched.io/node {ann} vs {node}"
        uuids = [u for u in ann.get(PREFIX + "gpu-uuids", "").split(",") if u]
        want = int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        assert len(uuids) == want == len(set(uuids)), f"{name}: gpu-uuids {uuids}, asked {want}"
        assert node in inv and set(uuids) <= set(inv[node]), f"{name}: {uuids} not on {node}"
        kind = ann.get(PREFIX + "request-kind")
        mem = int(ann.get(PREFIX + "gpu-memory", "0"))
        milli = int(ann.get(PREFIX + "gpu-milli", "0"))
        for u in uuids:
            use.setdefault(u, []).append((name, kind, mem, milli))
    for u, holders in use.items():
        node = next(n for n, gpus in inv.items() if u in gpus)
        whole = [h for h in holders if h[1] == "whole"]
        if whole:
            assert len(holders) == 1, f"{u}: whole GPU shared by {holders}"
        mem = sum(h[2] for h in holders)
        milli = sum(h[3] for h in holders)
        assert mem <= inv[node][u], f"{u} on {node}: {mem} MiB > {inv[node][u]}: {holders}"
        assert milli <= 1000, f"{u} on {node}: {milli} milli > 1000: {holders}"
    return {u: [h[0] for h in hs] for u, hs in use.items()}


@contextlib.contextmanager
def api_only_cluster(host_clean, extender_replicas=1, **kw):
    """A cluster with no kubelet node, for API-only Nodes (add_api_nodes): started,
    its workdir given to the session's leftover check, stopped at the end. API-only
    Nodes carry no status.nodeInfo.kubeletVersion, so the extender never holds them
    for a kubelet's admission (docs/design.md, "One pending GPU pod per node")."""
    bins, workdirs = host_clean
    c = kcluster.Cluster(gpusched_bin(), nodes=[], extender_replicas=extender_replicas,
                         bins=bins, **kw)
    workdirs.append(c.workdir)
    c.start()
    try:
        yield c
    finally:
        c.stop()
