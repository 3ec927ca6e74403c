"""The device plugin against the real kubelet: registration (allocatable), the
inventory annotation, re-registration after a kubelet restart (kubelet wipes its
device-plugin directory), and a GPU going unhealthy shrinking allocatable fast,
after which pods are placed on the healthy GPU only."""
import base64
import json
import os
import time

import requests

from conftest import NODE_A, NODE_B, NS, READY, check_pod_gpus, deploy_dp_args, gpu_pod


def test_registered_on_both_nodes(cluster):
    for name, gpus in ((NODE_A, 4), (NODE_B, 2)):
        node = cluster.node(name)
        # the count the plugin says it chose (kcluster reads its log) is deploy/'s
        assert [f"--replicas={node.dp_replicas}"] == deploy_dp_args()
        assert node.allocatable().get("nvidia.com/gpu") == str(gpus * node.dp_replicas)
        obj = cluster.api("GET", f"/api/v1/nodes/{name}").json()
        inv = json.loads(obj["metadata"]["annotations"]["gpusched.io/gpu-inventory"])
        want = [g["uuid"] for g in node.read_fake_gpus()["gpus"]]
        assert [g["uuid"] for g in inv["gpus"]] == want
        assert all(g["healthy"] for g in inv["gpus"])
        assert obj["metadata"]["labels"].get("nvidia.com/gpu.count") == str(gpus)


def registrations(node):
    """gpusched_dp_registrations_total of the node's plugin (its /metrics)."""
    text = requests.get(f"http://127.0.0.1:{node.dp_metrics_port}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("gpusched_dp_registrations_total"))


def test_reregisters_after_kubelet_restart(cluster):
    node = cluster.node(NODE_B)
    sock = node.host("/var/lib/kubelet/device-plugins/gpusched-gpu.sock")
    assert os.path.exists(sock)
    before = registrations(node)
    node.kubelet.stop()
    t0 = time.time()
    node.start_kubelet()          # kubelet deletes every socket in the directory at start
    want = str(2 * node.dp_replicas)
    # the node's status still shows the old kubelet's allocatable: wait for the plugin
    # to register with the new one, then for the new kubelet to report its devices
    cluster.wait(lambda: registrations(node) > before and os.path.exists(sock), 30,
                 "plugin registered again with the new kubelet", proc=node.dp)
    print(f"re-registered {time.time() - t0:.1f}s after kubelet's restart")
    cluster.wait(lambda: node.allocatable().get("nvidia.com/gpu") == want, 10,
                 f"allocatable nvidia.com/gpu = {want}")
    assert node.dp.alive()
    # and the new kubelet hands out its devices
    cluster.apply(gpu_pod("after-restart", {"nvidia.com/gpu": "1"}, node=NODE_B))
    try:
        p = cluster.wait_pods(NS, ["after-restart"], ready_log=READY)["after-restart"]
        check_pod_gpus(cluster, p)
    finally:
        cluster.delete_pods(NS, ["after-restart"])


def test_unhealthy_gpu_leaves_allocatable_and_placement(cluster):
    node = cluster.node(NODE_B)
    r = node.dp_replicas
    doc = node.read_fake_gpus()
    assert node.allocatable().get("nvidia.com/gpu") == str(2 * r)
    bad = json.loads(json.dumps(doc))
    bad["gpus"][1]["xids"] = [48]          # double-bit ECC: fatal
    made = []
    try:
        t0 = time.time()
        node.write_fake_gpus(bad)
        cluster.wait(lambda: node.allocatable().get("nvidia.com/gpu") == str(r), 10,
                     "allocatable to lose the unhealthy GPU's devices", interval=0.05)
        took = time.time() - t0
        print(f"allocatable shrank {took:.2f}s after the XID")
        assert took <= 2.5, f"allocatable shrank only after {took:.2f}s"

        def inventory_health():
            inv = json.loads(cluster.api("GET", f"/api/v1/nodes/{NODE_B}").json()["metadata"]
                             ["annotations"]["gpusched.io/gpu-inventory"])
            return [g["healthy"] for g in inv["gpus"]] == [True, False]
        cluster.wait(inventory_health, 5, "the inventory annotation to mark GPU 1 unhealthy")

        # kubelet still has r devices (all GPU 0's replicas): its count would admit a
        # 2-GPU pod, on two replicas of one GPU. The extender, which reads health
        # from the inventory, must keep it off the node, and put a 1-GPU pod on GPU 0.
        made.append("needs-two")
        cluster.apply(gpu_pod("needs-two", {"nvidia.com/gpu": "2"}, node=NODE_B))

        def failed_event():
            evs = [e for e in cluster.events(NS, "needs-two")
                   if e.get("reason") == "FailedScheduling"]
            return evs[-1] if evs else None
        msg = cluster.wait(failed_event, 30, "a FailedScheduling event for needs-two")["message"]
        assert "node has 1 healthy GPUs, pod needs 2" in msg, msg
        assert not cluster.pod(NS, "needs-two")["spec"].get("nodeName")
        made.append("on-healthy")
        cluster.apply(gpu_pod("on-healthy", {"nvidia.com/gpu": "1"}, node=NODE_B))
        p = cluster.wait_pods(NS, ["on-healthy"], ready_log=READY)["on-healthy"]
        assert check_pod_gpus(cluster, p) == [doc["gpus"][0]["uuid"]]
    finally:
        cluster.delete_pods(NS, made)
        node.write_fake_gpus(doc)
        node.restart_device_plugin()       # a fatal XID is never re-probed by default


def cri_annotations(node, pod, container):
    """The annotations kubelet handed containerd for a container (its CRI
    ContainerConfig, which containerd keeps in the container's metadata)."""
    cid = next(s["containerID"] for s in pod["status"]["containerStatuses"]
               if s["name"] == container).split("://", 1)[1]
    r = node.ctr("containers", "info", cid)
    assert r.returncode == 0, r.stderr
    for ext in (json.loads(r.stdout).get("Extensions") or {}).values():
        meta = json.loads(base64.b64decode(ext["value"]))
        if "Metadata" in meta:
            return meta["Metadata"]["Config"].get("annotations", {})
    raise AssertionError(f"no CRI metadata in containerd's record of {cid}: {r.stdout[:500]}")


def test_device_list_strategies_reach_the_container(cluster):
    """--device-list-strategy volume-mounts,cdi-annotations on the real kubelet and
    containerd: the container sees one file per assigned GPU under
    /var/run/nvidia-container-devices (what a toolkit that ignores
    NVIDIA_VISIBLE_DEVICES in unprivileged containers reads), and the CDI
    annotation naming those GPUs reaches the runtime, where a CDI-enabled one
    (containerd 1.7+, CRI-O) resolves it (containerd 1.6 here only keeps it)."""
    node = cluster.node(NODE_B)
    old = list(node.dp_args)
    node.restart_device_plugin(old + ["--device-list-strategy=volume-mounts,cdi-annotations"])
    try:
        pod = gpu_pod("listed", {"nvidia.com/gpu": "2"}, node=NODE_B)
        pod["spec"]["containers"][0]["command"] = [
            "sh", "-c", "for f in /var/run/nvidia-container-devices/*; do echo DEV $f; done; "
            f"env; echo {READY}; trap 'exit 0' TERM; sleep 3600 & wait"]
        cluster.apply(pod)
        p = cluster.wait_pods(NS, ["listed"], ready_log=READY)["listed"]
        uuids = p["metadata"]["annotations"]["gpusched.io/gpu-uuids"].split(",")
        assert sorted(uuids) == sorted(g["uuid"] for g in node.read_fake_gpus()["gpus"])
        lines = cluster.pod_log(NS, "listed", "main").split(READY)[0].splitlines()
        assert [ln for ln in lines if ln.startswith("DEV ")] == \
            ["DEV /var/run/nvidia-container-devices/" + u for u in sorted(uuids)], lines
        assert "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices" in lines, lines
        assert "CUDA_VISIBLE_DEVICES=" + ",".join(uuids) in lines, lines
        ann = cri_annotations(node, p, "main")
        assert ann.get("cdi.k8s.io/gpusched_" + uuids[0]) == \
            ",".join("nvidia.com/gpu=" + u for u in uuids), ann
    finally:
        cluster.delete_pods(NS, ["listed"])
        node.restart_device_plugin(old)
