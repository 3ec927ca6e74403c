"""Extender and device plugin together, through the fake kube-apiserver.

The device plugin publishes the node's inventory; the extender (topology
policy) reads it, binds pods and writes their GPUs; the fake kubelet admits
them: its GetPreferredAllocation must pick the same GPUs as the extender
(one topology rule, the core's), and Allocate must hand out exactly the GPUs
in the pod's annotations. A GPU that turns unhealthy gets no new pod.
"""
import json
import os
import shutil
import tempfile
import threading
import time

import pytest

from fake_apiserver import FakeApiServer
from fake_kubelet import FakeKubelet
from test_device_plugin import FAKE, GPU, PluginProc, edit
from test_extender import Extender

ANN = "gpusched.io/"


def wait(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


@pytest.fixture
def cluster(gpusched_bin):
    kdir = tempfile.mkdtemp(prefix="dpe", dir="/tmp")
    gdir = tempfile.mkdtemp(prefix="dpeg", dir="/tmp")
    gpus = os.path.join(gdir, "gpus.json")
    shutil.copy(FAKE, gpus)
    # no kubelet admits bound pods here: the plugin's allocated-at mark is
    # what releases the extender's node lock
    api = FakeApiServer(bookmark_interval=0.5, kubelet_admits=False).start()
    api.add_node("node-a", capacity={"cpu": "64", "memory": "512Gi", "pods": "110",
                                     "nvidia.com/gpu": "4"})
    api.update("nodes", "node-a", fn=lambda n: n["status"].update(
        nodeInfo={"kubeletVersion": "v1.20.2"}))  # as if its kubelet registered it
    kc = api.write_kubeconfig(os.path.join(gdir, "kubeconfig"))
    kubelet = FakeKubelet(kdir).start()
    # one device per GPU (the node's 4 devices above): kubelet's IDs are then
    # the UUIDs, which is what the preferred-pick checks compare
    dp = PluginProc(gpusched_bin, kdir, gpus, "--kubeconfig", kc, "--pod-resources-socket",
                    os.path.join(kdir, "none.sock"), "--publish-interval", "1",
                    "--replicas", "1", no_api=False)
    ext = None
    try:
        wait(lambda: ANN + "gpu-inventory" in api.get("nodes", "node-a")["metadata"]["annotations"],
             what="inventory annotation")
        ext = Extender(gpusched_bin, ["--kubeconfig", kc, "--policy", "topology",
                                      "--inventory-ttl", "0"])
        ext.wait_ready(path="/readyz")

        class C:
            pass
        c = C()
        c.api, c.kubelet, c.dp, c.ext, c.gpus = api, kubelet, dp, ext, gpus
        c.plugin = kubelet.wait_plugin("nvidia.com/gpu")
        yield c
    finally:
        if ext:
            ext.proc.terminate()
            ext.proc.wait(10)
        code = dp.stop()
        kubelet.stop()
        api.stop()
        shutil.rmtree(kdir, ignore_errors=True)
        shutil.rmtree(gdir, ignore_errors=True)
    assert code == 0


def schedule(c, name, gpus):
    c.api.add_pod("default", name, containers=[{"name": "main", "image": "cuda", "resources": {
        "limits": {"nvidia.com/gpu": str(gpus)}}}])
    p = wait(lambda: (lambda q: q if c.ext.filter(q, ["node-a"])["NodeNames"] else None)(
        c.api.get("pods", name, "default")), what="pod %s schedulable" % name)
    r = c.ext.bind(p, "node-a")
    assert r.status_code == 200 and r.json()["Error"] == "", r.text
    return c.api.get("pods", name, "default")["metadata"]["annotations"][ANN + "gpu-uuids"]


def test_kubelet_and_extender_agree_and_containers_get_the_assigned_gpus(cluster):
    c = cluster
    free = list(GPU)
    for name in ("first", "second"):
        want = schedule(c, name, 2)
        chosen, r = c.plugin.admit(free, 2)
        assert sorted(chosen) == sorted(want.split(",")), "kubelet's pick differs from the extender's"
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == want
        assert r.envs["GPUSCHED_POD"] == "default/" + name
        free = [g for g in free if g not in chosen]
    # Topology: the NVLink pairs, first 0-1 then 2-3.
    ann = {n: c.api.get("pods", n, "default")["metadata"]["annotations"][ANN + "gpu-uuids"]
           for n in ("first", "second")}
    assert sorted(ann["first"].split(",")) == GPU[:2]
    assert sorted(ann["second"].split(",")) == GPU[2:]


def test_unhealthy_gpu_gets_no_new_pod(cluster):
    c = cluster
    edit(c.gpus, lambda d: d["gpus"][0].update(xids=[79]))
    wait(lambda: not json.loads(c.api.get("nodes", "node-a")["metadata"]["annotations"]
                                [ANN + "gpu-inventory"])["gpus"][0]["healthy"],
         what="unhealthy GPU in the inventory")
    # Give the extender's node watch a moment to see it, then place 3 one-GPU
    # pods, each admitted by kubelet before the next is bound.
    time.sleep(1.0)
    got = []
    for i in range(3):
        got.append(schedule(c, "p%d" % i, 1))
        _, r = c.plugin.admit([g for g in GPU[1:] if g not in got[:i]], 1)
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == got[i]
    assert GPU[0] not in got and sorted(got) == GPU[1:]


def test_pods_bound_together_are_admitted_one_at_a_time(cluster):
    """Issue 12, problem 4: the second pod's bind waits until the plugin has
    answered the first pod's Allocate and marked it, so each Allocate has
    exactly one pod it can be for, whatever order kubelet admits in."""
    c = cluster
    want0 = schedule(c, "a0", 1)
    c.api.add_pod("default", "a1", containers=[{"name": "main", "image": "cuda", "resources": {
        "limits": {"nvidia.com/gpu": "1"}}}])
    p1 = wait(lambda: (lambda q: q if c.ext.filter(q, ["node-a"])["NodeNames"] else None)(
        c.api.get("pods", "a1", "default")), what="pod a1 schedulable")
    out = {}
    t = threading.Thread(target=lambda: out.__setitem__("r", c.ext.bind(p1, "node-a")))
    t.start()
    time.sleep(0.5)
    assert "r" not in out  # a0 has not been admitted: a1 waits
    _, r = c.plugin.admit(list(GPU), 1)
    assert r.envs["GPUSCHED_POD"] == "default/a0" and r.envs["NVIDIA_VISIBLE_DEVICES"] == want0
    assert ANN + "allocated-at" in c.api.get("pods", "a0", "default")["metadata"]["annotations"]
    t.join(5)
    assert out["r"].status_code == 200 and out["r"].json()["Error"] == "", out["r"].text
    want1 = c.api.get("pods", "a1", "default")["metadata"]["annotations"][ANN + "gpu-uuids"]
    _, r = c.plugin.admit([g for g in GPU if g != want0], 1)
    assert r.envs["GPUSCHED_POD"] == "default/a1" and r.envs["NVIDIA_VISIBLE_DEVICES"] == want1
