"""GPUQuota enforcement through the extender's HTTP API: standalone (quotas
from a file, usage rebuilt from the journal after a restart) and cluster mode
(GPUQuota objects watched on the fake kube-apiserver, broken ones reported
with an Event and ignored)."""
import time

import pytest
import requests

from conftest import run
from fake_apiserver import FakeApiServer
from test_extender import STANDARD_NODES, Extender, gpu_node, label_node, pod, refused, write_nodes

QUOTA_FILE = """\
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: team, namespace: ml}
  spec:
    total: {gpus: %(gpus)d}
    models:
    - {model: T4, memory: 8Gi}
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: typo, namespace: ml}
  spec: {total: {gpu: 1}}
"""

A100_NODES = ["a100-1", "a100-2"]


def wait_for(fn, timeout=10, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def setup(tmp_path):
    nodes = write_nodes(tmp_path / "nodes.json", STANDARD_NODES)
    q = tmp_path / "quotas.yaml"
    q.write_text(QUOTA_FILE % {"gpus": 2})
    return {"nodes": nodes, "quotas": q, "state": str(tmp_path / "state")}


def start(bin_, setup):
    return Extender(bin_, ["--nodes", setup["nodes"], "--state-dir", setup["state"],
                           "--quotas", str(setup["quotas"])])


def test_standalone_quota_in_filter_bind_metrics_and_restart(gpusched_bin, setup):
    e = start(gpusched_bin, setup)
    try:
        e.place(pod("a", {"nvidia.com/gpu": "1"}, ns="ml"), A100_NODES)
        # two pods pass /filter while one GPU of quota is left; the second bind fails
        b1 = pod("b1", {"nvidia.com/gpu": "1"}, ns="ml")
        b2 = pod("b2", {"nvidia.com/gpu": "1"}, ns="ml")
        assert e.filter(b1, A100_NODES)["NodeNames"]
        assert e.filter(b2, A100_NODES)["NodeNames"]
        assert e.bind(b1, "a100-1").json()["Error"] == ""
        refused(e.bind(b2, "a100-1"),
                "GPUQuota ml/team: whole GPUs: the pod asks for 1, 2 already in use, limit 2")
        # now /filter says why on every node
        f = e.filter(pod("c", {"nvidia.com/gpu": "1"}, ns="ml"), A100_NODES)
        assert f["NodeNames"] == []
        for node in A100_NODES:
            assert "GPUQuota ml/team: whole GPUs" in f["FailedNodes"][node]
        # other namespaces are not held by ml's quota
        assert e.filter(pod("d", {"nvidia.com/gpu": "1"}, ns="cv"), A100_NODES)["NodeNames"]
        # shared memory on T4 is capped at 8Gi
        e.place(pod("t", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "6Gi"}, ns="ml"),
                ["t4-1"])
        f = e.filter(pod("t2", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "4Gi"}, ns="ml"),
                     ["t4-1"])
        assert "GPU memory on T4: the pod asks for 4Gi, 6Gi already in use, limit 8Gi" in \
            f["FailedNodes"]["t4-1"]
        assert e.metric('gpusched_quota_objects') == 1
        assert e.metric('gpusched_quota_objects_broken') == 1
        assert e.metric('gpusched_namespace_gpu_usage{namespace="ml",'
                        'model="NVIDIA A100-SXM4-80GB",resource="gpus"}') == 2
        assert e.metric('gpusched_quota_used{namespace="ml",quota="team",model="",'
                        'resource="gpus"}') == 2
        assert e.metric('gpusched_quota_limit{namespace="ml",quota="team",model="T4",'
                        'resource="memory_mib"}') == 8192
    finally:
        err = e.stop()
    assert "GPUQuota 1 ignored: GPUQuota ml/typo: spec.total.gpu: unknown field" in err

    # after a restart the usage is rebuilt from the journal: still full
    e = start(gpusched_bin, setup)
    try:
        f = e.filter(pod("c", {"nvidia.com/gpu": "1"}, ns="ml"), A100_NODES)
        assert f["NodeNames"] == [], f
        # releasing a pod gives its quota back
        assert requests.delete(e.url + "/allocations/ml/a", timeout=10).status_code == 200
        assert e.filter(pod("c", {"nvidia.com/gpu": "1"}, ns="ml"), A100_NODES)["NodeNames"]
        # raising the quota in the file takes effect without a restart
        setup["quotas"].write_text(QUOTA_FILE % {"gpus": 5})
        wait_for(lambda: e.metric('gpusched_quota_limit{namespace="ml",quota="team",model="",'
                                  'resource="gpus"}') == 5, what="quota reload")
        # an unreadable file keeps the quotas in force
        setup["quotas"].write_text("- [")
        time.sleep(1.5)
        assert e.metric('gpusched_quota_limit{namespace="ml",quota="team",model="",'
                        'resource="gpus"}') == 5
    finally:
        err = e.stop()
    assert "keeping the quotas in force" in err


def test_standalone_bad_quota_file_refused_at_start(gpusched_bin, setup):
    setup["quotas"].write_text("{not yaml")
    r = run(gpusched_bin, "extender", "--listen", "127.0.0.1:0", "--nodes", setup["nodes"],
            "--quotas", str(setup["quotas"]), timeout=20)
    assert r.returncode == 2 and "quotas:" in r.stderr and "quotas.yaml" in r.stderr


# ---- cluster mode --------------------------------------------------------------

QUOTAS = "/apis/gpusched.io/v1/namespaces/ml/gpuquotas"


def quota_obj(name, spec):
    return {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota", "metadata": {"name": name},
            "spec": spec}


def team_of_one_gpu(api, pods):
    """Node g1 (4 GPUs), GPUQuota ml/team of 1 GPU, and GPU pods in ml: {name: GPUs}."""
    n = gpu_node("g1", n=4)
    api.add_node("g1", labels={}, annotations=n["metadata"]["annotations"],
                 capacity=n["status"]["allocatable"])
    api.create(QUOTAS, quota_obj("team", {"total": {"gpus": 1}}))
    for name, gpus in pods.items():
        api.add_pod("ml", name, containers=pod(name, {"nvidia.com/gpu": gpus})["spec"]
                    ["containers"])


def test_cluster_quota_watch_events_and_last_good_version(gpusched_bin, tmp_path):
    with FakeApiServer(bookmark_interval=0.5) as api:
        team_of_one_gpu(api, {"p1": "1", "p2": "1"})
        kc = api.write_kubeconfig(tmp_path / "kc")
        e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "0"])
        try:
            e.wait_ready(path="/readyz")
            wait_for(lambda: e.metric("gpusched_quota_objects") == 1, what="quota watched")
            p1 = api.get("pods", "p1", "ml")
            wait_for(lambda: e.filter(p1, ["g1"])["NodeNames"], what="p1 fits")
            assert e.bind(p1, "g1").json()["Error"] == ""
            p2 = api.get("pods", "p2", "ml")
            f = wait_for(lambda: (lambda r: r if not r["NodeNames"] else None)(
                e.filter(p2, ["g1"])), what="quota refuses p2")
            assert "GPUQuota ml/team: whole GPUs" in f["FailedNodes"]["g1"]
            # the pod that fits nowhere gets an Event naming the quota
            ev = wait_for(lambda: [x for x in api.list("events")
                                   if x["involvedObject"]["name"] == "p2"], what="pod event")
            assert "quota" in ev[0]["message"]

            # a broken update: reported with an Event, the last good version stays
            def break_it(obj):
                obj["spec"] = {"total": {"gpus": "lots"}}
            api.update("gpuquotas", "team", "ml", fn=break_it, prefix="/apis/gpusched.io/v1")
            wait_for(lambda: e.metric("gpusched_quota_objects_broken") == 1, what="broken")
            ev = wait_for(lambda: [x for x in api.list("events")
                                   if x["involvedObject"]["name"] == "team"], what="quota event")
            assert ev[0]["reason"] == "BrokenGPUQuota" and ev[0]["type"] == "Warning"
            assert "spec.total.gpus: 'lots' is not a quantity" in ev[0]["message"]
            assert e.filter(p2, ["g1"])["NodeNames"] == []  # still limited to 1

            # fixing it to 2 lets p2 in; deleting it lifts the limit
            def fix(obj):
                obj["spec"] = {"total": {"gpus": 2}}
            api.update("gpuquotas", "team", "ml", fn=fix, prefix="/apis/gpusched.io/v1")
            wait_for(lambda: e.filter(p2, ["g1"])["NodeNames"] == ["g1"], what="fixed quota")
            assert e.metric("gpusched_quota_objects_broken") == 0
        finally:
            e.stop()


def test_cluster_not_ready_before_the_quotas_are_read(gpusched_bin, tmp_path):
    # a replica that has not read the GPUQuotas would let every pod past
    # them: the Service must not send it /filter, and a leader must not bind
    with FakeApiServer(bookmark_interval=0.5) as api:
        team_of_one_gpu(api, {"p": "2"})
        # the list of the watch (the probe at start asks limit=1)
        api.delay("GET", r"/apis/gpusched.io/v1/gpuquotas\?limit=(?!1\b)", 3.0)
        kc = api.write_kubeconfig(tmp_path / "kc")
        e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "0"])
        try:
            wait_for(lambda: e.metric("gpusched_gpus") == 4, what="nodes and pods listed")
            assert requests.get(e.url + "/readyz", timeout=5).status_code == 503
            e.wait_ready(path="/readyz")
            assert e.metric("gpusched_quota_objects") == 1  # ready: the quota is in force
            f = e.filter(api.get("pods", "p", "ml"), ["g1"])
            assert f["NodeNames"] == [] and "GPUQuota ml/team" in f["FailedNodes"]["g1"]
        finally:
            e.stop()


def test_cluster_ready_when_the_crd_goes_before_the_first_list(gpusched_bin, tmp_path):
    # the CRD is there at the start's probe and gone at the watch's list: no
    # quota exists, which the replica knows (it stayed unready for ever)
    with FakeApiServer(bookmark_interval=0.5) as api:
        team_of_one_gpu(api, {"p": "2"})
        api.fail("GET", r"/apis/gpusched.io/v1/gpuquotas\?limit=(?!1\b)", 404, times=1000)
        kc = api.write_kubeconfig(tmp_path / "kc")
        e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "0"])
        try:
            e.wait_ready(path="/readyz")
            assert e.metric("gpusched_quota_objects") == 0
            f = e.filter(api.get("pods", "p", "ml"), ["g1"])  # no quota in force
            assert f["NodeNames"] == ["g1"], f
        finally:
            e.stop()


def test_cluster_without_the_crd(gpusched_bin, tmp_path):
    with FakeApiServer() as api:
        n = label_node("t", 1, "Tesla-T4", 15360)
        api.add_node("t", labels=n["metadata"]["labels"], capacity=n["status"]["capacity"])
        api.fail("GET", r"/apis/gpusched.io/v1/gpuquotas", 404)
        kc = api.write_kubeconfig(tmp_path / "kc")
        e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "0"])
        try:
            e.wait_ready(path="/readyz")
            assert e.metric("gpusched_quota_objects") == 0
        finally:
            err = e.stop()
        assert "GPUQuota CRD is not installed" in err
