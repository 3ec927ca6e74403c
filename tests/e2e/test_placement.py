"""Placement to a running container: GPU pods of every request form go through the
real kube-scheduler, the extender (filter, prioritize, bind), the real kubelet and
the device plugin's Allocate, and each container's environment holds exactly the
GPUs and limits of its pod's annotations (docs/annotations.md, docs/device-plugin.md).
Nodes (conftest): e2e-node-a 4 x H100 80GB, e2e-node-b 2 x A100 40GB."""
import json
import os
import signal
import time
import urllib.request

import pytest

from conftest import NODE_A, NODE_B, NS, READY, check_pod_gpus, gpu_pod

H100 = "NVIDIA H100 80GB HBM3"   # conftest's node models
A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture
def pods(cluster):
    made = []
    yield made
    cluster.delete_pods(NS, made)


def run(cluster, pods, *objs, timeout=60):
    for o in objs:
        pods.append(o["metadata"]["name"])
    cluster.apply(list(objs))
    return cluster.wait_pods(NS, [o["metadata"]["name"] for o in objs], timeout=timeout,
                             ready_log=READY)


def uuids_of(cluster, node):
    return [g["uuid"] for g in cluster.node(node).read_fake_gpus()["gpus"]]


def test_whole_gpu(cluster, pods):
    p = run(cluster, pods, gpu_pod("whole-1", {"nvidia.com/gpu": "1"}))["whole-1"]
    uuids = check_pod_gpus(cluster, p)
    assert len(uuids) == 1
    assert p["metadata"]["annotations"]["gpusched.io/request-kind"] == "whole"
    # kubectl logs goes apiserver -> kubelet (the node name resolves through the control
    # plane's /etc/hosts) and shows what the node's log file holds
    logs = cluster.kubectl("logs", "whole-1", "-c", "main").stdout
    assert f"NVIDIA_VISIBLE_DEVICES={uuids[0]}" in logs.splitlines(), logs


def test_shared_memory_and_cores(cluster, pods):
    got = run(cluster, pods,
              gpu_pod("shared-a", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                                   "nvidia.com/gpu-cores": "30"}, node=NODE_A),
              gpu_pod("shared-b", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "4Gi",
                                   "nvidia.com/gpu-cores": "20"}, node=NODE_A))
    check_pod_gpus(cluster, got["shared-a"], memory_mib=8192, milli=300)
    check_pod_gpus(cluster, got["shared-b"], memory_mib=4096, milli=200)
    for p in got.values():
        assert p["metadata"]["annotations"]["gpusched.io/request-kind"] == "shared"


def test_vcuda_through_webhook(cluster, pods):
    # no schedulerName: the mutating webhook sets it and rewrites vcuda-* as nvidia.com/gpu
    obj = gpu_pod("vcuda-1", {"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "8"},
                  scheduler=None)
    p = run(cluster, pods, obj)["vcuda-1"]
    assert p["spec"]["schedulerName"] == "gpu-scheduler"
    lim = p["spec"]["containers"][0]["resources"]["limits"]
    assert lim.get("nvidia.com/gpu") == "1", lim
    check_pod_gpus(cluster, p, memory_mib=2048, milli=500)
    assert p["metadata"]["annotations"].get("gpusched.io/request", "").startswith("kind=shared")


def test_multi_gpu_and_two_containers(cluster, pods):
    got = run(cluster, pods,
              gpu_pod("multi-2", {"nvidia.com/gpu": "2"}, node=NODE_A),
              gpu_pod("two-ctr", containers=[("first", {"nvidia.com/gpu": "1"}),
                                             ("second", {"nvidia.com/gpu": "1"})], node=NODE_A))
    a = check_pod_gpus(cluster, got["multi-2"])
    b = check_pod_gpus(cluster, got["two-ctr"])
    assert len(a) == 2 and len(set(a)) == 2
    assert len(b) == 2 and len(set(b)) == 2
    assert not set(a) & set(b), f"whole GPUs given twice: {a} {b}"


def with_replicas(node, n):
    """Restarts the node's device plugin at n devices per GPU; returns its old flags."""
    old = list(node.dp_args)
    node.restart_device_plugin([a for a in old if not a.startswith("--replicas")] +
                               [f"--replicas={n}"])
    assert node.dp_replicas == n
    return old


def test_kubelet_device_count_of_multi_container_pods(cluster, pods):
    """kubelet takes devices per container and lets later containers reuse an init
    container's (devicemanager's devicesToReuse); the extender must count the same.
    node-b at 2 devices per GPU (4): two pods of two shared containers take 2 each, and a
    third shared pod is refused by the DeviceCount filter and stays Pending, where a bind
    past kubelet's count would fail admission for good. node-a at 1 device per GPU (4):
    an init(2)+app(1) pod takes 2 devices, not 3, so a 2-GPU pod runs beside it.
    (Shared requests stay off init containers: kubelet 1.20's admission drops the
    resources no node advertises, such as gpu-memory, from app containers only.)"""
    names = ("mc-two-a", "mc-two-b", "mc-third", "mc-init", "mc-pair")
    node_b, node_a = cluster.node(NODE_B), cluster.node(NODE_A)
    old_b = with_replicas(node_b, 2)
    old_a = None
    try:
        assert node_b.allocatable()["nvidia.com/gpu"] == "4"
        share = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1Gi"}
        # one after another: the node lock holds a second bind until kubelet has
        # allocated the first pod anyway
        for name in ("mc-two-a", "mc-two-b"):
            p = run(cluster, pods, gpu_pod(name, containers=[("first", share), ("second", share)],
                                           node=NODE_B))[name]
            assert len(check_pod_gpus(cluster, p)) == 2
        pods.append("mc-third")
        cluster.apply(gpu_pod("mc-third", share, node=NODE_B))

        def failed_event():
            evs = [e for e in cluster.events(NS, "mc-third")
                   if e.get("reason") == "FailedScheduling"]
            return evs[-1] if evs else None
        ev = cluster.wait(failed_event, 30, "a FailedScheduling event for mc-third")
        msg = ev.get("message", "")
        assert "kubelet has 0 of 4 nvidia.com/gpu devices left" in msg, msg
        time.sleep(2)
        p = cluster.pod(NS, "mc-third")
        assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName"), \
            cluster.describe_pods(NS, ["mc-third"])

        old_a = with_replicas(node_a, 1)
        assert node_a.allocatable()["nvidia.com/gpu"] == "4"
        init = gpu_pod("mc-init", {"nvidia.com/gpu": "1"}, node=NODE_A)
        init["spec"]["initContainers"] = [{
            "name": "setup", "image": init["spec"]["containers"][0]["image"],
            "imagePullPolicy": "Never", "command": ["sh", "-c", f"env; echo {READY}"],
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        got = run(cluster, pods, init)
        got.update(run(cluster, pods, gpu_pod("mc-pair", {"nvidia.com/gpu": "2"}, node=NODE_A)))
        a, b = check_pod_gpus(cluster, got["mc-init"]), check_pod_gpus(cluster, got["mc-pair"])
        assert len(a) == 2 and len(b) == 2 and not set(a) & set(b), (a, b)
    finally:
        cluster.delete_pods(NS, [n for n in names if n in pods])
        node_b.restart_device_plugin(old_b)
        if old_a is not None:
            node_a.restart_device_plugin(old_a)


def test_gpu_type_include_exclude(cluster, pods):
    # one at a time: this checks the model filters; pods arriving together at one node
    # are test_bursts.py's subject
    cases = (("type-a100", {"gpusched.io/gpu-type": "A100"}, NODE_B),
             ("type-not-h100", {"gpusched.io/gpu-type-exclude": "H100"}, NODE_B),
             ("type-h100", {"gpusched.io/gpu-type": "h100"}, NODE_A))
    models = {}
    for name, ann, node in cases:
        p = run(cluster, pods, gpu_pod(name, {"nvidia.com/gpu": "1"}, annotations=ann))[name]
        assert p["spec"]["nodeName"] == node, f"{name} on {p['spec']['nodeName']}"
        assert set(check_pod_gpus(cluster, p)) <= set(uuids_of(cluster, node))
        models[name] = p["metadata"]["annotations"].get("gpusched.io/gpu-models", "")
    # the bind records the models each pod was held to: the class cpufrag's learned
    # workload counts it in (its price on scarce models), on every replica alike
    assert models["type-a100"] == A100 and models["type-h100"] == H100, models
    assert A100 in models["type-not-h100"].split("|") and "H100" not in models["type-not-h100"]

    def learned(addr):
        with urllib.request.urlopen(f"http://{addr}/debug/workload", timeout=5) as r:
            return {tuple(c["models"]) for c in json.load(r)["classes"]}
    for _ident, addr in cluster.proxy.backends:
        cluster.wait(lambda: {(A100,), (H100,)} <= learned(addr), 30,
                     f"the learned workload of {addr} to hold the A100 and H100 classes")


def test_soft_preferences_come_before_the_policy(cluster, pods):
    """The extender's prioritize weight (100) outvotes kube-scheduler's own scores, so
    it honours the pod's soft preferences itself, as kube-scheduler's NodeAffinity and
    TaintToleration score them: a pod placed where the policy takes it (node P) goes to
    the other node when it prefers that node, and when P carries a PreferNoSchedule
    taint it does not tolerate; a pod that tolerates the taint goes to P again."""
    def allocations():
        return [cluster.extender_metric(i, "gpusched_allocations")
                for i in range(len(cluster.proxy.backends))]
    before = allocations()

    def place(name, affinity=None, tolerations=None):
        o = gpu_pod(name, {"nvidia.com/gpu": "1"})
        if affinity:
            o["spec"]["affinity"] = {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": affinity}}
        if tolerations:
            o["spec"]["tolerations"] = tolerations
        node = run(cluster, pods, o)[name]["spec"]["nodeName"]
        cluster.delete_pods(NS, [name])
        pods.remove(name)
        cluster.wait(lambda: allocations() == before, 20, f"{name}'s GPU released")
        return node

    chosen = place("soft-none")
    other = NODE_B if chosen == NODE_A else NODE_A
    prefer = [{"weight": 10, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [other]}]}}]
    assert place("soft-prefer", affinity=prefer) == other
    taint = {"key": "gpusched-e2e", "value": "soft", "effect": "PreferNoSchedule"}
    node = cluster.api("GET", f"/api/v1/nodes/{chosen}").json()
    taints = node["spec"].get("taints") or []
    patch = lambda t: cluster.api("PATCH", f"/api/v1/nodes/{chosen}", body={"spec": {"taints": t}},
                                  content_type="application/merge-patch+json")
    assert patch(taints + [taint]).status_code == 200
    try:
        assert place("soft-taint") == other
        tol = [{"key": "gpusched-e2e", "operator": "Exists", "effect": "PreferNoSchedule"}]
        assert place("soft-tolerated", tolerations=tol) == chosen
    finally:
        assert patch(taints or None).status_code == 200


def test_preferred_pod_anti_affinity_comes_before_the_policy(cluster, pods):
    """A replica that prefers not to share a node with its app's other replicas
    (preferred podAntiAffinity on the hostname, as many charts set it, or a
    ScheduleAnyway topology spread constraint) goes to another node, where the
    policy would have put it beside them: the extender scores them itself
    (kube-scheduler's InterPodAffinity and PodTopologySpread scores are outvoted at
    weight 100). So does a pod without terms that a placed pod's term avoids
    (InterPodAffinity's symmetric half)."""
    def allocations():
        return [cluster.extender_metric(i, "gpusched_allocations")
                for i in range(len(cluster.proxy.backends))]

    def place(name, labels=None, node=None, anti=None, spread=None):
        o = gpu_pod(name, {"nvidia.com/gpu": "1"}, node=node,
                    labels=dict({"e2e": "1"}, **(labels or {})))
        if anti:
            o["spec"]["affinity"] = {"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": anti},
                                        "topologyKey": "kubernetes.io/hostname"}}]}}
        if spread:
            o["spec"]["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": spread}}]
        return run(cluster, pods, o)[name]["spec"]["nodeName"]

    def drop(name):
        held = allocations()
        cluster.delete_pods(NS, [name])
        pods.remove(name)
        cluster.wait(lambda: allocations() != held, 20, f"{name}'s GPU released")

    # a node the policy packs onto: one replica there, and a plain pod goes there too
    packed = None
    for target in (NODE_A, NODE_B):
        place("aa-1", {"app": "aa"}, node=target)
        probe = place("aa-probe")
        drop("aa-probe")
        if probe == target:
            packed = target
            break
        drop("aa-1")
    if packed is None:
        pytest.skip("the policy puts a second pod on the other node either way")
    # a term that picks no pod leaves the policy's choice alone
    assert place("aa-3", anti={"app": "nothing"}) == packed
    drop("aa-3")
    other = NODE_B if packed == NODE_A else NODE_A
    assert place("aa-2", {"app": "aa"}, anti={"app": "aa"}) == other
    drop("aa-2")
    # a soft topology spread constraint (ScheduleAnyway) the same way
    assert place("aa-4", {"app": "aa"}, spread={"app": "aa"}) == other
    drop("aa-4")
    # the symmetric half: a replica placed with a term that avoids app=bb keeps a
    # pod labelled app=bb, which has no terms of its own, off its node
    drop("aa-1")
    place("aa-5", {"app": "aa"}, node=packed, anti={"app": "bb"})
    assert place("bb-1", {"app": "bb"}) == other


def extender_reason(cluster, name, node):
    """The extender's own reason for refusing `node` to pod default/NAME (/debug/pods)."""
    for _ident, addr in cluster.proxy.backends:
        try:
            with urllib.request.urlopen(f"http://{addr}/debug/pods/{NS}/{name}", timeout=5) as r:
                trace = json.load(r)
        except OSError:
            continue
        text = json.dumps(trace)
        if node in text:
            return trace
    return None


def test_fits_nowhere_stays_pending_with_reason(cluster, pods):
    """3 A100s fit no node (node-b has 2 A100s, node-a H100s; the webhook passes it, as
    the cluster's largest node has 4 GPUs): Pending, and kube-scheduler's
    FailedScheduling event carries the extender's reasons. On 1.20 that needs
    FailedNodes filled (issue 12, problem 2)."""
    obj = gpu_pod("too-big", {"nvidia.com/gpu": "3"},
                  annotations={"gpusched.io/gpu-type": "A100"})
    pods.append("too-big")
    cluster.apply(obj)

    def failed_event():
        evs = [e for e in cluster.events(NS, "too-big") if e.get("reason") == "FailedScheduling"]
        return evs[-1] if evs else None
    ev = cluster.wait(failed_event, 30, "a FailedScheduling event for too-big")
    p = cluster.pod(NS, "too-big")
    assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
    msg = ev.get("message", "")
    trace = extender_reason(cluster, "too-big", NODE_A)
    # the nodes' reasons must reach the user: each node named by its reason, not "0/2 nodes
    # are available: ." (1.20 reads only FailedNodes)
    assert msg.rstrip().rstrip(".").rstrip(":").strip() != "0/2 nodes are available", (
        f"FailedScheduling shows no reason: {msg!r} (extender trace: {trace})")
    assert "GPU" in msg or "gpu" in msg, f"no extender reason in {msg!r} (trace: {trace})"
    # it stays Pending
    time.sleep(2)
    assert not cluster.pod(NS, "too-big")["spec"].get("nodeName")


def test_refused_bind_says_why_in_the_event(cluster, pods):
    """kube-scheduler 1.20 reads the body of a 200 extender reply only: a /bind refused
    with another status leaves the pod's event with "code 503" and nothing else, so the
    extender answers a refusal 200 with the reason in Error (docs/extender.md). Here
    node-a's kubelet is stopped (SIGSTOP): a GPU pod bound there is never admitted, so
    the node stays held (the node lock), and a second GPU pod's /bind waits bind_wait
    and is refused. Its FailedScheduling event must name the pod that holds the node.
    Once kubelet goes on, both run."""
    kubelet = cluster.node(NODE_A).kubelet
    names = ["held-first", "held-second"]
    os.killpg(kubelet.pid, signal.SIGSTOP)
    try:
        pods.append(names[0])
        cluster.apply(gpu_pod(names[0], {"nvidia.com/gpu": "1"}, node=NODE_A))
        cluster.wait(lambda: cluster.pod(NS, names[0])["spec"].get("nodeName"), 30,
                     f"{names[0]} bound")
        pods.append(names[1])
        cluster.apply(gpu_pod(names[1], {"nvidia.com/gpu": "1"}, node=NODE_A))

        def refusals():
            return [e.get("message", "") for e in cluster.events(NS, names[1])
                    if e.get("reason") == "FailedScheduling"] or None
        msgs = cluster.wait(refusals, 40, f"a FailedScheduling event for {names[1]}")
        assert any(f"{NS}/{names[0]}" in m and "waited" in m for m in msgs), msgs
        assert not any("code 5" in m or "code 4" in m for m in msgs), msgs
    finally:
        os.killpg(kubelet.pid, signal.SIGCONT)
    got = cluster.wait_pods(NS, names, timeout=90, ready_log=READY)
    a, b = (check_pod_gpus(cluster, got[n]) for n in names)
    assert len(a) == 1 and len(b) == 1 and a != b, (a, b)
