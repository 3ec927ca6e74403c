"""NVLink topology in the choice of the node, through the real API server and
kube-scheduler: of nodes the policy scores equal, a pod of 2+ whole GPUs goes to the
one where its GPUs are best linked, not to the one the seeded rank puts first.

Two API-only nodes, four H100s each, NVLinks 0-2 and 1-3 (NUMA node 0: GPUs 0-1, 1:
GPUs 2-3), as test_topology.py gives node-a. Two GPUs of each are reported unhealthy
in the inventory: on one node GPUs 1 and 3 (the 0-2 NVLink pair is left), on the
other 1 and 2 (left: 0 and 3, across NUMA nodes). Both nodes keep two whole free
GPUs of one model, so cpufrag (the default) scores them alike. A 2-GPU pod must be
bound to the node with the pair, with GPUs 0 and 2, whichever node that is: the test
runs both ways round, and a choice by rank alone fails one of them.

A pod of two *shared* GPUs is placed by its links too: with GPUs 0 and 1 of a node
partly used (held there by steering two shared pods with the inventory's health), a
pod of 2 x 30 % gets 0 and 2 (NVLinked), not the best-fitting 0 and 1 (across NUMA
nodes).

Pods on API-only nodes never start: asserted on bindings and annotations."""
import json
import time

import pytest

import scale

NS = "default"
NODES = ["lk-0", "lk-1"]
LINKS = {0: 2, 1: 3, 2: 0, 3: 1}


@pytest.fixture(scope="module")
def linked(host_clean):
    with scale.api_only_cluster(host_clean) as c:
        c.add_api_nodes(2, gpus=4, model="NVIDIA H100 80GB HBM3", memory_mib=81920,
                        prefix="lk")
        yield c


def set_inventory(c, node, unhealthy):
    """node's inventory with the NVLinks, NUMA nodes and these GPUs unhealthy."""
    n = c.api("GET", f"/api/v1/nodes/{node}").json()
    inv = json.loads(n["metadata"]["annotations"][scale.PREFIX + "gpu-inventory"])
    inv["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for g in inv["gpus"]:
        i = g["index"]
        g["numa_node"] = i // 2
        g["links"] = [{"gpu": LINKS[i], "type": "nvlink", "nvlinks": 18}]
        g["healthy"] = i not in unhealthy
        g["reason"] = "" if g["healthy"] else "XID 79 (test)"
    r = c.api("PATCH", f"/api/v1/nodes/{node}", content_type="application/merge-patch+json",
              body={"metadata": {"annotations": {
                  scale.PREFIX + "gpu-inventory": json.dumps(inv)}}})
    assert r.status_code == 200, r.text
    return {g["index"]: g["uuid"] for g in inv["gpus"]}


def free_gpus(c, node):
    return c.extender_metric(0, "gpusched_gpus_free", {"node": node})


def orient(c, pair_on):
    """The 0-2 pair free on node pair_on; 0 and 3 free on the other. Goes through
    every GPU healthy first, so the extender's view is known to have moved."""
    for node in NODES:
        set_inventory(c, node, ())
    c.wait(lambda: all(free_gpus(c, n) == 4 for n in NODES), 30, "all GPUs healthy")
    uuids = {n: set_inventory(c, n, (1, 3) if n == pair_on else (1, 2)) for n in NODES}
    c.wait(lambda: all(free_gpus(c, n) == 2 for n in NODES), 30, "two GPUs down per node")
    return uuids


@pytest.mark.parametrize("pair_on", NODES)
def test_two_gpu_pod_goes_where_its_gpus_are_linked(linked, pair_on):
    c = linked
    uuids = orient(c, pair_on)
    name = f"pair-{pair_on}"
    scale.create_pods(c, [scale.pod(name, scale.WHOLE2)])
    try:
        p = c.wait(lambda: (lambda q: q if q and q["spec"].get("nodeName") else None)(
            c.pod(NS, name)), 60, f"{name} bound")
        ann = p["metadata"]["annotations"]
        assert p["spec"]["nodeName"] == pair_on, (
            f"{name} bound to {p['spec']['nodeName']} (free GPUs 0 and 3, across NUMA "
            f"nodes), not {pair_on} (free GPUs 0 and 2, NVLinked)")
        assert ann[scale.PREFIX + "gpu-indices"] == "0,2", ann
        assert set(ann[scale.PREFIX + "gpu-uuids"].split(",")) == {
            uuids[pair_on][0], uuids[pair_on][2]}, ann
    finally:
        c.force_delete_all(NS, "e2e=1")


SHARED60 = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "40Gi", "nvidia.com/gpu-cores": "60"}
SHARED2X30 = {"nvidia.com/gpu": "2", "nvidia.com/gpu-memory": "20Gi", "nvidia.com/gpu-cores": "30"}


def bound(c, name):
    return c.wait(lambda: (lambda q: q if q and q["spec"].get("nodeName") else None)(
        c.pod(NS, name)), 60, f"{name} bound")["metadata"]["annotations"]


def test_two_shared_gpus_go_to_a_linked_pair(linked):
    c = linked
    other = NODES[1]
    set_inventory(c, other, (0, 1, 2, 3))  # the pods all go to lk-0
    try:
        # a 60 % pod on GPU 0, then one on GPU 1: each placed while only its GPU is
        # healthy on lk-0
        for gpu, name in ((0, "held-0"), (1, "held-1")):
            set_inventory(c, NODES[0], tuple(i for i in range(4) if i != gpu))
            c.wait(lambda: free_gpus(c, NODES[0]) == 1, 30, f"only GPU {gpu} healthy")
            scale.create_pods(c, [scale.pod(name, SHARED60)])
            assert bound(c, name)[scale.PREFIX + "gpu-indices"] == str(gpu)
        uuids = set_inventory(c, NODES[0], ())
        c.wait(lambda: free_gpus(c, NODES[0]) == 2, 30, "all GPUs of lk-0 healthy")
        scale.create_pods(c, [scale.pod("tp", SHARED2X30)])
        ann = bound(c, "tp")
        got = ann[scale.PREFIX + "gpu-indices"]
        assert set(got.split(",")) == {"0", "2"}, (
            f"2 x 30 % got GPUs {got}: 0 and 2 are NVLinked and fit ({ann})")
        assert set(ann[scale.PREFIX + "gpu-uuids"].split(",")) == {uuids[0], uuids[2]}, ann
    finally:
        c.force_delete_all(NS, "e2e=1")
