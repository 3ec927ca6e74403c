"""MIG instances through the real kube-scheduler and kubelet.

node-b's second A100 is put in MIG mode for this module (its fake-GPU file
rewritten: two 1g.5gb instances and one 2g.10gb; the device plugin re-reads the
file, starts a server per profile and publishes the inventory). Then, with
nothing but the real components in between: kubelet advertises
nvidia.com/mig-<profile> as NVIDIA's "mixed" strategy names them, kube-scheduler
and the extender place MIG pods on instances of their profile, kubelet's Allocate
hands each container exactly the instances of its pod's assignment, whole and
shared pods never land on the GPU in MIG mode, a MIG pod past the node's
instances waits, and gets the instance a deleted pod frees. The file is put back
at the end and the node is checked to be whole again.
"""
import json

import pytest

import kcluster
from conftest import NODE_B, NS, READY, check_pod_gpus, gpu_pod

A100_1G = 4864      # MiB of an A100 40GB's 1g.5gb and 2g.10gb instances
A100_2G = 9984


def mig_uuid(tag, k):
    return f"MIG-{tag:08x}-0000-4000-8000-{k:012x}"


def node_allocatable(node):
    a = node.allocatable()
    return {k: v for k, v in a.items() if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-")}


def inventory_migs(cluster, name):
    """{gpu uuid: [mig uuids]} of the node's gpusched.io/gpu-inventory annotation."""
    node = cluster.api("GET", f"/api/v1/nodes/{name}").json()
    inv = json.loads(node["metadata"].get("annotations", {}).get(
        kcluster.PREFIX + "gpu-inventory", "{}") or "{}")
    return {g["uuid"]: [m["uuid"] for m in g.get("mig") or []] for g in inv.get("gpus", [])}


@pytest.fixture(scope="module")
def mig_node(cluster):
    node = cluster.node(NODE_B)
    before, doc = node.read_fake_gpus(), node.read_fake_gpus()
    whole, migged = doc["gpus"][0], doc["gpus"][1]
    migged["mig"] = [
        {"uuid": mig_uuid(0xb1, 0), "profile": "1g.5gb", "memory_mib": A100_1G},
        {"uuid": mig_uuid(0xb1, 1), "profile": "1g.5gb", "memory_mib": A100_1G},
        {"uuid": mig_uuid(0xb1, 2), "profile": "2g.10gb", "memory_mib": A100_2G}]
    want = {"nvidia.com/gpu": str(node.dp_replicas), "nvidia.com/mig-1g.5gb": "2",
            "nvidia.com/mig-2g.10gb": "1"}
    node.write_fake_gpus(doc)
    try:
        cluster.wait(lambda: node_allocatable(node) == want, 30,
                     f"{NODE_B}: allocatable {want}", proc=node.dp)
        cluster.wait(lambda: len(inventory_migs(cluster, NODE_B).get(migged["uuid"], [])) == 3,
                     30, f"{NODE_B}: the inventory lists the MIG instances", proc=node.dp)
        yield {"whole": whole["uuid"], "gpu": migged["uuid"],
               "1g": [m["uuid"] for m in migged["mig"][:2]], "2g": migged["mig"][2]["uuid"]}
    finally:
        node.write_fake_gpus(before)
        whole_again = {"nvidia.com/gpu": str(2 * node.dp_replicas)}

        def restored():
            a = node_allocatable(node)
            return (a.get("nvidia.com/gpu") == whole_again["nvidia.com/gpu"] and
                    all(v == "0" for k, v in a.items() if k != "nvidia.com/gpu") and
                    not any(inventory_migs(cluster, NODE_B).values()))
        cluster.wait(restored, 30, f"{NODE_B}: both A100s whole again", proc=node.dp)


@pytest.fixture
def pods(cluster):
    made = []
    yield made
    cluster.delete_pods(NS, made)


def start(cluster, pods, *objs):
    for o in objs:
        pods.append(o["metadata"]["name"])
    cluster.apply(list(objs))
    return cluster.wait_pods(NS, [o["metadata"]["name"] for o in objs], timeout=60,
                             ready_log=READY)


def annotations(p):
    return p["metadata"].get("annotations", {})


def test_mig_pods_get_their_instances(cluster, mig_node, pods):
    got = start(cluster, pods,
                gpu_pod("mig-pair", {"nvidia.com/mig-1g.5gb": "2"}),
                gpu_pod("mig-big", {"nvidia.com/mig-2g.10gb": "1"}))
    pair, big = got["mig-pair"], got["mig-big"]
    for p, profile in ((pair, "1g.5gb"), (big, "2g.10gb")):
        ann = annotations(p)
        assert p["spec"]["nodeName"] == NODE_B, p["spec"].get("nodeName")
        assert ann.get("gpusched.io/request-kind") == "mig", ann
        assert ann.get("gpusched.io/mig-profile") == profile, ann
    # each container got exactly its pod's instances (NVIDIA_VISIBLE_DEVICES =
    # the MIG UUIDs of the assignment), of the profile it asked for
    assert sorted(check_pod_gpus(cluster, pair)) == sorted(mig_node["1g"])
    assert check_pod_gpus(cluster, big) == [mig_node["2g"]]


def test_whole_and_shared_pods_avoid_the_mig_gpu(cluster, mig_node, pods):
    got = start(cluster, pods,
                gpu_pod("beside-whole", {"nvidia.com/gpu": "1"}, node=NODE_B))
    assert check_pod_gpus(cluster, got["beside-whole"]) == [mig_node["whole"]]
    cluster.delete_pods(NS, ["beside-whole"])
    got = start(cluster, pods,
                gpu_pod("beside-shared", {"nvidia.com/gpu": "1",
                                          "nvidia.com/gpu-memory": "2Gi"}, node=NODE_B))
    assert check_pod_gpus(cluster, got["beside-shared"], memory_mib=2048) == [mig_node["whole"]]


def test_mig_pod_waits_for_a_free_instance(cluster, mig_node, pods):
    """Both 1g.5gb instances held: a third 1g.5gb pod waits unbound (kubelet's count
    refuses the node: kube-scheduler never binds past it), and gets the instance
    a deleted pod frees."""
    first = start(cluster, pods, gpu_pod("mig-one", {"nvidia.com/mig-1g.5gb": "1"}),
                  gpu_pod("mig-two", {"nvidia.com/mig-1g.5gb": "1"}))
    held = {n: check_pod_gpus(cluster, p)[0] for n, p in first.items()}
    assert sorted(held.values()) == sorted(mig_node["1g"]), held
    pods.append("mig-wait")
    cluster.apply(gpu_pod("mig-wait", {"nvidia.com/mig-1g.5gb": "1"}))

    def failed_event():
        evs = [e for e in cluster.events(NS, "mig-wait") if e.get("reason") == "FailedScheduling"]
        return evs[-1] if evs else None
    ev = cluster.wait(failed_event, 30, "a FailedScheduling event for mig-wait")
    # deploy/'s scheduler config leaves nvidia.com/* to the extender
    # (ignoredByScheduler), so the reasons are the extender's, per node
    msg = ev.get("message", "")
    assert "node has 0 free MIG instances of 1g.5gb, pod needs 1" in msg, msg
    assert "node has no MIG instance of 1g.5gb" in msg, msg
    assert not cluster.pod(NS, "mig-wait")["spec"].get("nodeName")
    cluster.delete_pods(NS, ["mig-one"])
    p = cluster.wait_pods(NS, ["mig-wait"], timeout=60, ready_log=READY)["mig-wait"]
    assert check_pod_gpus(cluster, p) == [held["mig-one"]]


def test_faulted_instance_is_passed_over(cluster, mig_node, pods):
    """A fatal XID on one 1g.5gb instance (its GPU healthy, the fake-GPU file's
    per-instance "xids"): the device plugin reports that device Unhealthy, so the real
    kubelet's allocatable drops to one 1g.5gb; the inventory marks the instance, and a
    1g.5gb pod gets the other one, where the first free instance was picked before.
    Last in the module: the instance stays Unhealthy until the file is put back."""
    node = cluster.node(NODE_B)
    doc = node.read_fake_gpus()
    doc["gpus"][1]["mig"][0]["xids"] = [79]
    node.write_fake_gpus(doc)

    def faulted():
        node_obj = cluster.api("GET", f"/api/v1/nodes/{NODE_B}").json()
        inv = json.loads(node_obj["metadata"]["annotations"][kcluster.PREFIX + "gpu-inventory"])
        gpu = [g for g in inv["gpus"] if g["uuid"] == mig_node["gpu"]][0]
        return gpu["healthy"] and gpu["mig"][0].get("healthy") is False
    cluster.wait(lambda: node_allocatable(node)["nvidia.com/mig-1g.5gb"] == "1", 30,
                 f"{NODE_B}: one healthy 1g.5gb device", proc=node.dp)
    cluster.wait(faulted, 30, f"{NODE_B}: the inventory marks the instance", proc=node.dp)
    got = start(cluster, pods, gpu_pod("mig-healthy", {"nvidia.com/mig-1g.5gb": "1"}))
    assert check_pod_gpus(cluster, got["mig-healthy"]) == [mig_node["1g"][1]]
