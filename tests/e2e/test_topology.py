"""NVLink topology from the device plugin to the placement, through the real API
server, kube-scheduler and kubelet.

node-a's four H100s are given NVLinks across their NUMA nodes for this module
(GPU 0 with 2, 1 with 3; GPUs 0-1 share NUMA node 0, 2-3 NUMA node 1) and its
device plugin is restarted to discover them. The links reach the extender only
as the plugin's gpusched.io/gpu-inventory annotation; a 2-GPU pod must get an
NVLinked pair, not the two GPUs of one NUMA node that a topology-blind packing
takes first, and its container exactly that pair. Single-GPU pods take the GPU
cut off from its partner before one that would break a pair, so a 2-GPU pod
that comes after them still finds one. A pod of two shared GPUs, after a shared pod
holds part of one GPU, gets that GPU and its NVLink partner (not the next GPU by
index, across NUMA nodes, which best fit alone took), and its container exactly
those two. The file is put back at the end.
"""
import json

import pytest

from conftest import NODE_A, NS, READY, check_pod_gpus, gpu_pod


def inventory_links(cluster):
    node = cluster.api("GET", f"/api/v1/nodes/{NODE_A}").json()
    inv = json.loads(node["metadata"]["annotations"]["gpusched.io/gpu-inventory"])
    return {(g["index"], link["gpu"]) for g in inv["gpus"] for link in g.get("links") or []
            if link.get("type") == "nvlink"}


@pytest.fixture(scope="module")
def linked(cluster):
    node = cluster.node(NODE_A)
    before, doc = node.read_fake_gpus(), node.read_fake_gpus()
    assert [g["numa_node"] for g in doc["gpus"]] == [0, 0, 1, 1]
    doc["gpus"][0]["links"] = [{"gpu": 2, "type": "nvlink", "nvlinks": 18}]
    doc["gpus"][1]["links"] = [{"gpu": 3, "type": "nvlink", "nvlinks": 18}]
    node.write_fake_gpus(doc)
    try:
        node.restart_device_plugin()
        cluster.wait(lambda: {(0, 2), (1, 3)} <= inventory_links(cluster), 30,
                     "node-a's inventory to list the NVLinks", proc=node.dp)
        uuids = [g["uuid"] for g in doc["gpus"]]
        yield [{uuids[0], uuids[2]}, {uuids[1], uuids[3]}]
    finally:
        node.write_fake_gpus(before)
        node.restart_device_plugin()
        cluster.wait(lambda: not inventory_links(cluster), 30,
                     "node-a's inventory without NVLinks again", proc=node.dp)


def one_after_another(cluster, pods):
    """Runs (name, GPUs) pods on node-a in turn, each placed after the last one's bind;
    returns {name: set of its GPUs}."""
    got = {}
    for name, gpus in pods:
        cluster.apply(gpu_pod(name, {"nvidia.com/gpu": str(gpus)}, node=NODE_A))
        p = cluster.wait_pods(NS, [name], ready_log=READY)[name]
        got[name] = set(check_pod_gpus(cluster, p))
    return got


def test_two_gpu_pods_get_nvlinked_pairs(cluster, linked):
    names = ["nvl-first", "nvl-second"]
    try:
        got = one_after_another(cluster, [(n, 2) for n in names])
        pairs = [got[n] for n in names]
        for n, pair in zip(names, pairs):
            assert pair in linked, f"{n} got {sorted(pair)}, not an NVLinked pair {linked}"
        assert pairs[0] != pairs[1]
    finally:
        cluster.delete_pods(NS, names)


def test_single_gpu_pods_leave_a_pair_whole(cluster, linked):
    """GPU 0 to the first 1-GPU pod; the second takes 2, 0's partner, not 1 (lowest
    index, which would leave 2 and 3: one NUMA node, no NVLink); the 2-GPU pod then
    gets the 1-3 pair."""
    names = ["nvl-a", "nvl-b", "nvl-c"]
    try:
        got = one_after_another(cluster, [("nvl-a", 1), ("nvl-b", 1), ("nvl-c", 2)])
        uuid = {i: u for i, u in enumerate(sorted(set.union(*linked)))}
        assert got["nvl-a"] | got["nvl-b"] == {uuid[0], uuid[2]}, got
        assert got["nvl-c"] == {uuid[1], uuid[3]}, got
    finally:
        cluster.delete_pods(NS, names)


def test_two_shared_gpus_get_an_nvlinked_pair(cluster, linked):
    names = ["nvl-held", "nvl-tp"]
    held = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "20Gi", "nvidia.com/gpu-cores": "60"}
    tp = {"nvidia.com/gpu": "2", "nvidia.com/gpu-memory": "20Gi", "nvidia.com/gpu-cores": "30"}
    got = {}
    try:
        for name, limits in zip(names, (held, tp)):
            cluster.apply(gpu_pod(name, limits, node=NODE_A))
            p = cluster.wait_pods(NS, [name], ready_log=READY)[name]
            got[name] = set(check_pod_gpus(cluster, p))
        assert got["nvl-tp"] in linked, (
            f"2 x 30 % got {sorted(got['nvl-tp'])}, not an NVLinked pair {linked}")
        assert got["nvl-held"] <= got["nvl-tp"], (
            f"2 x 30 % got {sorted(got['nvl-tp'])}: not the partly used GPU "
            f"{sorted(got['nvl-held'])} and its partner")
    finally:
        cluster.delete_pods(NS, names)
