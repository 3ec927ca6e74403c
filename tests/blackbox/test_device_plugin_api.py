"""gpusched device-plugin with an API server: the extender's GPUs, not kubelet's IDs.

The fake kube-apiserver holds the node and the pods with their gpusched.io
assignment annotations (docs/annotations.md); the fake kubelet allocates
replica IDs; a fake pod-resources service says which container got which
IDs. Checks: the node inventory annotation and labels, Allocate answering
with the assigned GPUs for the oldest pending pod, refusals instead of
guesses, PreStartContainer catching a swap, concurrent Allocates.
"""
import json
import os
import shutil
import tempfile
import threading
import time

import grpc
import pytest

from fake_apiserver import FakeApiServer
from fake_kubelet import FakeKubelet, FakePodResources
from test_device_plugin import FAKE, GPU, PluginProc, edit

ANN = "gpusched.io/"


@pytest.fixture
def world(gpusched_bin):
    kdir = tempfile.mkdtemp(prefix="dpa", dir="/tmp")
    gdir = tempfile.mkdtemp(prefix="dpag", dir="/tmp")
    gpus = os.path.join(gdir, "gpus.json")
    shutil.copy(FAKE, gpus)
    api = FakeApiServer().start()
    api.add_node("node-a", labels={"nvidia.com/gpu.product": "keep-me"})
    kubelet = FakeKubelet(kdir).start()
    podres = FakePodResources(os.path.join(kdir, "podres.sock"))
    kubeconfig = api.write_kubeconfig(os.path.join(gdir, "kubeconfig"))
    procs = []

    def start(*extra, replicas="4"):
        reps = ["--replicas", replicas] if replicas else []
        p = PluginProc(gpusched_bin, kdir, gpus, "--kubeconfig", kubeconfig,
                       "--pod-resources-socket", podres.path, *reps, *extra,
                       no_api=False)
        procs.append(p)
        return p

    class W:
        pass
    w = W()
    w.api, w.kubelet, w.podres, w.gpus, w.start = api, kubelet, podres, gpus, start
    yield w
    codes = []
    for p in procs:
        out = p.output()
        codes.append(p.stop())
        print(out[-3000:])
    podres.stop()
    kubelet.stop()
    api.stop()
    shutil.rmtree(kdir, ignore_errors=True)
    shutil.rmtree(gdir, ignore_errors=True)
    assert all(c == 0 for c in codes), "plugin exit status %s" % codes


def assigned_pod(api, name, uuids, at, n=None, kind="whole", mem=None, milli=None,
                 node="node-a", containers=None):
    ann = {ANN + "node": node, ANN + "gpu-uuids": ",".join(uuids), ANN + "assigned-at": at,
           ANN + "request-kind": kind, ANN + "gpu-indices": ",".join(u[-1] for u in uuids)}
    if mem is not None:
        ann[ANN + "gpu-memory"] = str(mem)
    if milli is not None:
        ann[ANN + "gpu-milli"] = str(milli)
    containers = containers or [{"name": "main", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": str(n or len(uuids))}}}]
    return api.add_pod("default", name, containers=containers, annotations=ann, node=node)


def inventory(api):
    node = api.get("nodes", "node-a")
    return json.loads(node["metadata"]["annotations"].get(ANN + "gpu-inventory", "null"))


def wait(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("condition not met in %.1fs" % timeout)
        time.sleep(0.05)


def test_publishes_inventory_and_missing_labels(world):
    world.start()
    inv = wait(lambda: inventory(world.api))
    assert [g["uuid"] for g in inv["gpus"]] == GPU
    assert inv["gpus"][0]["links"][0] == {"gpu": 1, "type": "nvlink", "nvlinks": 18}
    labels = world.api.get("nodes", "node-a")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "keep-me"  # present: left alone
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.count"] == "4"
    # A health change reaches the annotation, with its reason.
    edit(world.gpus, lambda d: d["gpus"][2].update(xids=[79]))
    inv = wait(lambda: (lambda i: i if not i["gpus"][2]["healthy"] else None)(
        inventory(world.api)), timeout=3)
    assert inv["gpus"][2]["reason"] == "XID 79 (fatal)"


def test_failed_publishes_back_off(world):
    """An API server that refuses the node's inventory (down, or RBAC) gets
    retries 1 s, 2 s, 4 s ... apart, not every 100 ms from every node; the
    change lands once it takes them again."""
    world.start()
    wait(lambda: inventory(world.api))
    world.api.fail("GET", r"/api/v1/nodes/node-a$", 503, times=10000)
    edit(world.gpus, lambda d: d["gpus"][2].update(xids=[79]))
    first = wait(lambda: [i for i, r in enumerate(world.api.requests)
                          if r[0] == "GET" and r[1].endswith("/nodes/node-a")], timeout=3)[-1]
    time.sleep(3.5)
    tries = [r for r in world.api.requests[first:]
             if r[0] == "GET" and r[1].endswith("/nodes/node-a")]
    assert 2 <= len(tries) <= 4, len(tries)  # at 0, 1 and 3 s; it was 35
    with world.api.lock:
        world.api.faults.clear()
    inv = wait(lambda: (lambda i: i if not i["gpus"][2]["healthy"] else None)(
        inventory(world.api)), timeout=8)
    assert inv["gpus"][2]["reason"] == "XID 79 (fatal)"


def test_default_replicas_with_an_api_server_is_10(world):
    """kubelet admits at most as many GPU pods per node as there are devices:
    one per GPU (the old default) would fail the fifth shared pod on a 4-GPU
    node for good (issue 12, problem 5)."""
    world.start(replicas=None)
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    devs = p.wait(lambda d: len(d) == 40)
    assert sorted(d.ID for d in devs if d.ID.startswith(GPU[0])) == \
        sorted(f"{GPU[0]}::{k}" for k in range(10))


def allocated_at(api, name):
    return api.get("pods", name, "default")["metadata"]["annotations"].get(ANN + "allocated-at")


def test_allocate_gives_the_extenders_gpus_and_marks_the_pod(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assert p.options.pre_start_required
    p.wait(lambda d: len(d) == 16)
    assigned_pod(world.api, "older", [GPU[3]], "2026-11-22T15:20:01.000000000Z")
    assigned_pod(world.api, "elsewhere", [GPU[0]], "2026-11-22T15:00:00.000000000Z",
                 node="node-b")
    # kubelet picks replica IDs of GPU 0; the answer is the assigned GPU.
    r = p.allocate([GPU[0] + "::2"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[3]
    assert r.envs["GPUSCHED_POD"] == "default/older"
    assert r.annotations[ANN + "pod"] == "default/older"
    # its only GPU container is served: marked for the extender's node lock
    assert allocated_at(world.api, "older")
    assert allocated_at(world.api, "elsewhere") is None
    assigned_pod(world.api, "newer", [GPU[1]], "2026-11-22T15:20:02.000000000Z")
    r = p.allocate([GPU[0] + "::1"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    assert allocated_at(world.api, "newer")
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[0] + "::0"])
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pending pod on node node-a" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate(["GPU-unknown::0"])
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_preferred_allocation_names_the_extenders_gpus(world):
    """kubelet records the IDs it chose (PodResources, read by dcgm-exporter;
    its Topology Manager aligns CPUs to them): GetPreferredAllocation offers
    IDs of the GPUs the extender assigned, so the record is the truth."""
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    devs = [d.ID for d in p.wait(lambda d: len(d) == 16)]
    assigned_pod(world.api, "two", [GPU[3], GPU[1]], "2026-11-22T15:20:01.000000000Z")
    chosen, r = p.admit(devs, 2)
    assert [c.split("::")[0] for c in chosen] == [GPU[3], GPU[1]], chosen
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join([GPU[3], GPU[1]])
    # a must-include ID of another GPU (kubelet reusing an init container's):
    # the plugin cannot honour both, so the topology choice answers
    assigned_pod(world.api, "one", [GPU[2]], "2026-11-22T15:20:02.000000000Z")
    chosen, r = p.admit(devs, 1, must=[GPU[0] + "::1"])
    assert chosen == [GPU[0] + "::1"]
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[2]


def test_without_pod_resources_allocate_serves_and_says_so_once(world):
    """kubelet before 1.20 serves no PodResources v1: Allocate works from the plugin's own
    record, and the plugin says once what it cannot check."""
    world.podres.stop()
    pl = world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 16)
    assigned_pod(world.api, "a", [GPU[3]], "2026-11-22T15:20:01.000000000Z")
    assert p.allocate([GPU[0] + "::2"]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[3]
    assigned_pod(world.api, "b", [GPU[2]], "2026-11-22T15:20:02.000000000Z")
    assert p.allocate([GPU[0] + "::1"]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[2]
    out = pl.output()
    assert out.count("PodResources v1 (kubelet 1.20 and later) did not answer") == 1, out


def test_shared_gpu_limits_and_multi_container_split(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    containers = [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                  {"name": "side", "image": "x"},
                  {"name": "b", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    assigned_pod(world.api, "shared", [GPU[0], GPU[2], GPU[3]], "2026-11-22T15:20:01.000000000Z",
                 kind="shared", mem=8192, milli=250, containers=containers)
    r = p.allocate([GPU[1] + "::0", GPU[1] + "::1"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "%s,%s" % (GPU[2], GPU[3])  # container b
    assert r.envs["GPUSCHED_GPU_MEMORY_MIB"] == "8192"
    assert r.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "8192m"
    assert r.envs["GPUSCHED_GPU_MILLI"] == "250"
    assert r.envs["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert allocated_at(world.api, "shared") is None  # container a still waits
    r = p.allocate([GPU[1] + "::2"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[0]                       # container a
    assert allocated_at(world.api, "shared")


def test_refuses_to_guess_between_pending_pods(world):
    """Issue 12, problem 4: with two pods waiting for kubelet on the node an
    Allocate could be for either (kubelet's admission order is not the
    plugin's to know): refuse, rather than give one the other's GPUs."""
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "a", [GPU[0]], "2026-11-22T15:20:01.000000000Z")
    assigned_pod(world.api, "b", [GPU[1]], "2026-11-22T15:20:02.000000000Z")
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[2] + "::0"])
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "2 pods on node node-a wait for 1 nvidia.com/gpu (default/a, default/b)" in \
        ei.value.details()
    assert "cannot tell which one kubelet is admitting" in ei.value.details()
    assert allocated_at(world.api, "a") is None and allocated_at(world.api, "b") is None
    # once a is marked allocated (its Allocate answered earlier), b is the one
    world.api.update("pods", "a", "default", lambda o: o["metadata"]["annotations"].update(
        {ANN + "allocated-at": "2026-11-22T15:20:03.000000Z"}))
    assert p.allocate([GPU[2] + "::1"]).envs["GPUSCHED_POD"] == "default/b"


def test_a_pod_half_served_is_the_one(world):
    """kubelet allocates a pod's containers one after another: a pod with a
    container served is the pod being admitted, whatever else waits."""
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    two = [{"name": n, "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
           for n in ("c1", "c2")]
    assigned_pod(world.api, "multi", [GPU[0], GPU[1]], "2026-11-22T15:20:01.000000000Z",
                 containers=two)
    world.podres.pods = [("default", "multi", "c1", "nvidia.com/gpu", [GPU[3] + "::0"])]
    assigned_pod(world.api, "other", [GPU[2]], "2026-11-22T15:20:00.000000000Z")
    r = p.allocate([GPU[3] + "::1"])
    assert r.envs["GPUSCHED_POD"] == "default/multi" and r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    assert allocated_at(world.api, "multi")
    assert p.allocate([GPU[3] + "::2"]).envs["GPUSCHED_POD"] == "default/other"


def test_refuses_rather_than_guess(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "ghost", ["GPU-not-here"], "2026-11-22T15:20:01.000000000Z")
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[0] + "::0"])
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "GPU-not-here is not on node node-a" in ei.value.details()
    world.api.delete("pods", "ghost", "default")
    edit(world.gpus, lambda d: d["gpus"][1].update(xids=[48]))
    assigned_pod(world.api, "on-bad-gpu", [GPU[1]], "2026-11-22T15:20:01.000000000Z")
    p.wait(lambda d: any(x.health == "Unhealthy" for x in d))
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[0] + "::0"])
    assert "assigned GPU %s is unhealthy: XID 48 (fatal)" % GPU[1] in ei.value.details()


def test_pod_resources_of_a_full_node_past_4_mib_is_read(world):
    # kubelet lists every pod of the node: past the 4 MiB of a device plugin
    # message its answer was refused, and the containers kubelet had already
    # served were unknown
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "running-already", [GPU[2]], "2026-11-22T15:20:00.000000000Z")
    assigned_pod(world.api, "a", [GPU[0]], "2026-11-22T15:20:01.000000000Z")
    pad = "x" * 200
    world.podres.pods = [("default", "running-already", "main", "nvidia.com/gpu",
                          [GPU[3] + "::0"])]
    world.podres.pods += [("busy", "p%05d-%s" % (i, pad), "main", "example.com/dev",
                           ["d%05d-%s" % (i, pad)]) for i in range(12000)]
    ra = p.allocate([GPU[3] + "::1"])
    assert ra.envs["GPUSCHED_POD"] == "default/a"


def test_pod_resources_skips_admitted_containers_and_prestart_catches_a_swap(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "running-already", [GPU[2]], "2026-11-22T15:20:00.000000000Z")
    assigned_pod(world.api, "a", [GPU[0]], "2026-11-22T15:20:01.000000000Z")
    # kubelet already gave running-already its devices (e.g. before a plugin restart).
    world.podres.pods = [("default", "running-already", "main", "nvidia.com/gpu",
                          [GPU[3] + "::0"])]
    ra = p.allocate([GPU[3] + "::1"])
    assert ra.envs["GPUSCHED_POD"] == "default/a"
    assigned_pod(world.api, "b", [GPU[1]], "2026-11-22T15:20:02.000000000Z")
    rb = p.allocate([GPU[3] + "::2"])
    assert rb.envs["GPUSCHED_POD"] == "default/b"
    # kubelet's record agrees: both start.
    world.podres.pods += [("default", "a", "main", "nvidia.com/gpu", [GPU[3] + "::1"]),
                          ("default", "b", "main", "nvidia.com/gpu", [GPU[3] + "::2"])]
    p.prestart([GPU[3] + "::1"])
    p.prestart([GPU[3] + "::2"])
    # Had kubelet given ::1 to b and ::2 to a, each would have the other's GPU.
    world.podres.pods[1:] = [("default", "b", "main", "nvidia.com/gpu", [GPU[3] + "::1"]),
                             ("default", "a", "main", "nvidia.com/gpu", [GPU[3] + "::2"])]
    with pytest.raises(grpc.RpcError) as ei:
        p.prestart([GPU[3] + "::1"])
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "went to default/b/main" in ei.value.details()
    assert "assigned to default/a/main" in ei.value.details()
    # a container of two devices: kubelet lists them one entry each (1.21+, as the
    # fake kubelet does), one set all the same
    world.podres.pods[1:] = world.podres.pods[1:][::-1]
    assigned_pod(world.api, "c", [GPU[0], GPU[1]], "2026-11-22T15:20:03.000000000Z")
    two = [GPU[2] + "::1", GPU[2] + "::2"]
    assert p.allocate(two).envs["GPUSCHED_POD"] == "default/c"
    world.podres.pods.append(("default", "c", "main", "nvidia.com/gpu", two))
    p.prestart(two[::-1])
    world.podres.pods[-1] = ("default", "d", "main", "nvidia.com/gpu", two)
    with pytest.raises(grpc.RpcError) as ei:
        p.prestart(two)
    assert "went to default/d/main" in ei.value.details(), ei.value.details()


def test_pod_recreated_under_the_same_name_is_a_new_pod(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "web-0", [GPU[1]], "2026-11-22T15:20:01.000000000Z")
    assert p.allocate([GPU[0] + "::0"]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    world.api.delete("pods", "web-0", "default")   # a StatefulSet replaces it
    assigned_pod(world.api, "web-0", [GPU[2]], "2026-11-22T15:21:01.000000000Z")
    assert p.allocate([GPU[0] + "::1"]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[2]


def test_concurrent_allocates_get_distinct_containers(world):
    world.start()
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    ctrs = [{"name": "c%d" % i, "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            for i in range(4)]
    assigned_pod(world.api, "four", list(GPU), "2026-11-22T15:20:00.000000000Z",
                 containers=ctrs)
    results, errors = [], []

    def one(i):
        try:
            results.append(p.allocate([GPU[0] + "::%d" % i]).envs["NVIDIA_VISIBLE_DEVICES"])
        except grpc.RpcError as e:
            errors.append(e.details())
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert sorted(results) == sorted(GPU)
    assert allocated_at(world.api, "four")


def test_api_server_down_is_waited_out_then_a_clear_allocate_error(world):
    """kubelet never asks again after a failed Allocate (the pod fails
    admission for good), so an API server that does not answer is waited
    for, up to --api-wait, and only then named in the error."""
    pl = world.start("--api-wait", "2")
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "blip", [GPU[3]], "2026-11-22T15:20:01.000000000Z")
    world.api.fail("GET", r"/api/v1/pods", 503, times=2)
    t0 = time.monotonic()
    r = p.allocate([GPU[0] + "::0"])  # two 503s, then the answer
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[3]
    assert time.monotonic() - t0 < 2
    world.api.fail("GET", r"/api/v1/pods", 503, times=1000)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[1] + "::0"])
    assert 2 <= time.monotonic() - t0 < 6
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "503" in ei.value.details()
    assert "waiting up to 2 s" in pl.output()
    assert pl.proc.poll() is None


def test_a_slow_failing_api_server_is_waited_for_by_the_clock(world):
    """--api-wait bounds the time, not the naps: each failed try that takes
    1.5 s counts, so the answer comes in about 2 s, not after five slow
    tries (11 s)."""
    pl = world.start("--api-wait", "2")
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    world.api.delay("GET", r"/api/v1/pods", 1.5, times=1000)
    world.api.fail("GET", r"/api/v1/pods", 503, times=1000)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[1] + "::0"])
    took = time.monotonic() - t0
    assert 2 <= took < 5, took
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    assert pl.proc.poll() is None


def test_a_kubelet_restart_ends_an_allocate_that_waits(world):
    """An Allocate waiting out the API server does not hold the plugin's
    servers: kubelet restarting (its caller gone) ends the wait, and the
    plugin registers again at once, not after --api-wait."""
    world.start("--api-wait", "30")
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    world.api.fail("GET", r"/api/v1/pods", 503, times=100000)
    errs = []

    def call():
        try:
            p.allocate([GPU[1] + "::0"])
        except grpc.RpcError as e:
            errs.append(e)
    th = threading.Thread(target=call)
    th.start()
    time.sleep(1)
    t0 = time.monotonic()
    world.kubelet.restart()
    world.kubelet.wait_plugin("nvidia.com/gpu", timeout=5, after=t0)
    th.join(30)
    assert errs


def test_a_restart_ends_an_allocate_that_began_while_servers_stop(world):
    """A restart stops the servers one after the other, each once its calls
    end. An Allocate that reaches a later server while an earlier one is still
    stopping (its own Allocate in a slow API try) must end too: waiting out
    --api-wait, it held that server's stop, and the re-registration, as long."""
    mig = ["MIG-11111111-0000-4000-8000-00000000000%d" % i for i in range(2)]
    edit(world.gpus, lambda d: d["gpus"][3].update(mig=[
        {"uuid": u, "profile": "1g.10gb", "memory_mib": 9856} for u in mig]))
    world.start("--api-wait", "40")
    g = world.kubelet.wait_plugin("nvidia.com/gpu")
    m = world.kubelet.wait_plugin("nvidia.com/mig-1g.10gb")
    mids = [d.ID for d in m.wait(lambda d: len(d) >= 1)]
    # a connection of our own: a kubelet restart closes the stand-in's and
    # unlinks the sockets
    from fake_kubelet import stubs
    pb = stubs()
    ch = grpc.insecure_channel("unix:" + os.path.join(world.kubelet.dir, m.endpoint))
    mig_stub = pb.grpc.DevicePluginStub(ch)
    mig_stub.GetDevicePluginOptions(pb.pb.Empty(), timeout=10)
    world.api.delay("GET", r"/api/v1/pods", 3.0, times=100000)
    world.api.fail("GET", r"/api/v1/pods", 503, times=100000)
    errs = []

    def call(stub, ids):
        try:
            if stub is mig_stub:
                stub.Allocate(pb.pb.AllocateRequest(container_requests=[
                    pb.pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=60)
            else:
                stub.allocate(ids)
        except grpc.RpcError as e:
            errs.append(e)
    first = threading.Thread(target=call, args=(g, [GPU[1] + "::0"]))
    first.start()
    time.sleep(0.5)  # in its first API try, 3 s long
    t0 = time.monotonic()
    world.kubelet.restart()
    time.sleep(1.0)  # nvidia.com/gpu stopping, waiting for that Allocate; the MIG server
    late = threading.Thread(target=call, args=(mig_stub, mids[:1]))  # still takes calls
    late.start()
    world.kubelet.wait_plugin("nvidia.com/gpu", timeout=15, after=t0)
    world.kubelet.wait_plugin("nvidia.com/mig-1g.10gb", timeout=5, after=t0)
    first.join(35)
    late.join(65)
    ch.close()
    assert len(errs) == 2, errs


def test_a_stuck_control_loop_fails_healthz(world):
    """A control loop held in a call (here a Register that kubelet answers after
    6 s) registers nothing meanwhile: /healthz says so after --healthz-grace,
    and is fine again once the loop turns."""
    world.kubelet.register_delay = 6.0
    pl = world.start("--healthz-grace", "1")
    end = time.monotonic() + 6
    while "control loop has not turned" not in pl.get("/healthz").text:
        assert time.monotonic() < end, pl.get("/healthz").text
        time.sleep(0.2)
    assert pl.get("/healthz").status_code == 503
    wait(lambda: pl.get("/healthz").status_code == 200, timeout=15)


def test_bad_kubeconfig_is_a_usage_error(gpusched_bin):
    from conftest import run
    r = run(gpusched_bin, "device-plugin", "--fake-gpus", FAKE, "--kubeconfig",
            "/nonexistent/kubeconfig", timeout=10)
    assert r.returncode == 2 and "/nonexistent/kubeconfig" in r.stderr


def test_a_slow_api_server_does_not_hold_back_registration(world):
    """The inventory is published on a thread of its own: a publish stuck in a
    slow API server (up to the client's 10 s timeout per call) held the control
    loop, and a kubelet restart meanwhile waited that long for the plugin to
    register again, its GPUs unadvertised."""
    world.start()
    world.kubelet.wait_plugin("nvidia.com/gpu")
    wait(lambda: inventory(world.api))
    n = len(world.api.requests)
    world.api.delay("GET", r"/api/v1/nodes/node-a$", 8.0)
    edit(world.gpus, lambda d: d["gpus"][2].update(xids=[79]))  # a publish, held 6 s
    wait(lambda: any(m == "GET" and p == "/api/v1/nodes/node-a"
                     for m, p, _ in list(world.api.requests)[n:]), timeout=5)
    t0 = time.monotonic()
    world.kubelet.restart()
    world.kubelet.wait_plugin("nvidia.com/gpu", timeout=5, after=t0)
    first = min(t for t, _, _ in world.kubelet.registrations if t >= t0)
    assert first - t0 < 3.0  # held by the publish: up to 8 s
    # and the held publish lands
    wait(lambda: not inventory(world.api)["gpus"][2]["healthy"], timeout=15)
