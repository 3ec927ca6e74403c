"""Renamed resources and annotations (docs/resources.md, Renaming) on a real cluster:
every component is given example.com/ resources and sched.example.com/ annotations as a
user sets them (the device plugin's and webhook's --resource-prefix/--annotation-prefix,
the extender's resource_* and annotation_prefix keys, kube-scheduler's managedResources).
The device plugin advertises example.com/gpu to the real kubelet; the webhook checks the
renamed request; kube-scheduler hands it to the extender, which writes the assignment
under the renamed prefix; kubelet's Allocate finds it there, and each container gets
exactly those GPUs and limits. Nothing is written under the default names."""
import pytest

import kcluster
from conftest import NS, READY, check_pod_gpus, deploy_dp_args, gpu_pod, gpusched_bin

RES, ANN = "example.com/", "sched.example.com/"
NODE = "e2e-renamed"


@pytest.fixture(scope="module")
def renamed(host_clean):
    bins, workdirs = host_clean
    nodes = [kcluster.NodeSpec(NODE, kcluster.fake_gpus_doc(2, tag=0xc), dp_args=deploy_dp_args())]
    c = kcluster.Cluster(gpusched_bin(), nodes=nodes, bins=bins, extender_replicas=1,
                         res_prefix=RES, annot_prefix=ANN)
    workdirs.append(c.workdir)
    c.start()
    yield c
    c.stop()


def default_keys(obj):
    meta = obj["metadata"]
    return [k for k in list(meta.get("annotations", {})) + list(meta.get("labels", {}))
            if k.startswith(kcluster.PREFIX)]


def test_renamed_names_from_node_to_container(renamed):
    c = renamed
    node = c.api("GET", f"/api/v1/nodes/{NODE}").json()
    alloc = node["status"]["allocatable"]
    assert alloc.get(RES + "gpu") == str(2 * c.node(NODE).dp_replicas), alloc
    assert "nvidia.com/gpu" not in alloc, alloc
    assert ANN + "gpu-inventory" in node["metadata"]["annotations"]
    assert not default_keys(node), node["metadata"]["annotations"]

    # the webhook refuses an impossible renamed request, naming it
    bad = gpu_pod("impossible", {RES + "gpu": "1", RES + "gpu-cores": "150"})
    r = c.api("POST", f"/api/v1/namespaces/{NS}/pods", body=bad)
    assert r.status_code in (400, 403, 422), r.text
    assert f"containers[0].limits[{RES}gpu-cores]" in r.json().get("message", ""), r.text

    whole = gpu_pod("renamed-whole", {RES + "gpu": "1"}, scheduler=None)
    shared = gpu_pod("renamed-shared", {RES + "gpu": "1", RES + "gpu-memory": "8Gi",
                                        RES + "gpu-cores": "30"}, scheduler=None)
    names = ["renamed-whole", "renamed-shared"]
    try:
        c.apply([whole, shared])   # the webhook gives them gpu-scheduler
        got = c.wait_pods(NS, names, timeout=60, ready_log=READY)
        w, s = got["renamed-whole"], got["renamed-shared"]
        assert w["spec"]["schedulerName"] == "gpu-scheduler"
        assert len(check_pod_gpus(c, w)) == 1
        assert w["metadata"]["annotations"][ANN + "request-kind"] == "whole"
        check_pod_gpus(c, s, memory_mib=8192, milli=300)
        assert s["metadata"]["annotations"][ANN + "request-kind"] == "shared"
        for p in (w, s):
            ann = p["metadata"]["annotations"]
            assert ANN + "allocated-at" in ann, ann     # the device plugin's mark
            assert p["metadata"]["labels"].get(ANN + "gpu-pod") == "true", p["metadata"]
            assert not default_keys(p), ann
    finally:
        c.delete_pods(NS, names)
