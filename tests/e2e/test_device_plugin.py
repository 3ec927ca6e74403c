"""The device plugin against the real kubelet: registration (allocatable), the
inventory annotation, re-registration after a kubelet restart (kubelet wipes its
device-plugin directory), and a GPU going unhealthy shrinking allocatable fast."""
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
        want = [g["uuid"] for g in json.load(open(node.fake_gpus_path))["gpus"]]
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


def test_unhealthy_gpu_shrinks_allocatable(cluster):
    node = cluster.node(NODE_B)
    r = node.dp_replicas
    doc = json.load(open(node.fake_gpus_path))
    assert node.allocatable().get("nvidia.com/gpu") == str(2 * r)
    bad = json.loads(json.dumps(doc))
    bad["gpus"][1]["xids"] = [48]          # double-bit ECC: fatal
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
    finally:
        node.write_fake_gpus(doc)
        node.restart_device_plugin()       # a fatal XID is re-probed only after 300 s
