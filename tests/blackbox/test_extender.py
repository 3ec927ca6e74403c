"""The scheduler extender in standalone mode, driven over real HTTP.

Covers filter/prioritize/bind for whole, shared, vcuda and MIG requests,
the protocol's case-insensitive keys and both node forms, bad input, races
for the last GPU, restart from the journal (torn last record included),
release, preemption, top-k, config files and metrics. The helpers here are
reused by test_extender_cluster.py.
"""
import copy
import json
import os
import signal
import socket
import subprocess
import threading
import time
import zlib

import pytest
import requests

from conftest import free_port, run

A100 = "NVIDIA A100-SXM4-80GB"


def inventory(node, n, model, mem, mig=False, updated_at=None, links="nvlink"):
    gpus = []
    for i in range(n):
        g = {"index": i, "uuid": f"GPU-{node}-{i}", "model": model, "memory_mib": mem,
             "numa_node": i // 4, "healthy": True,
             "links": [{"gpu": j, "type": links} for j in range(n) if j != i]}
        if mig:
            g["mig_enabled"] = True
            g["mig"] = [{"uuid": f"MIG-{node}-{i}-{k}", "profile": "1g.10gb", "memory_mib": 9856}
                        for k in range(7)]
        gpus.append(g)
    return json.dumps({"version": 1, "gpus": gpus,
                       "updated_at": updated_at or time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime())})


def gpu_node(name, n=4, model=A100, mem=81920, mig=False, labels=None, taints=None,
             updated_at=None):
    return {"metadata": {"name": name, "labels": labels or {},
                         "annotations": {"gpusched.io/gpu-inventory":
                                         inventory(name, n, model, mem, mig, updated_at)}},
            "spec": {"taints": taints} if taints else {},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def label_node(name, n, product, mem):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.memory": str(mem)}},
            "status": {"capacity": {"nvidia.com/gpu": str(n)},
                       "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110",
                                       "nvidia.com/gpu": str(n)}}}


def pod(name, limits=None, ns="default", uid=None, annotations=None, priority=None,
        node_selector=None):
    spec = {"containers": [{"name": "main", "image": "cuda",
                            "resources": {"limits": limits or {}}}]}
    if priority is not None:
        spec["priority"] = priority
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                         "annotations": annotations or {}},
            "spec": spec}


STANDARD_NODES = [
    gpu_node("a100-1"),
    gpu_node("a100-2", labels={"zone": "b"}),
    label_node("t4-1", 2, "Tesla-T4", 15360),
    gpu_node("mig-1", n=1, mig=True),
    gpu_node("tainted", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
]
ALL = [n["metadata"]["name"] for n in STANDARD_NODES]


def bound(r):
    """A /bind that succeeded: 200 with an empty Error (a refusal is 200 too)."""
    return r.status_code == 200 and r.json()["Error"] == ""


def refused(r, *words):
    """A /bind the extender turned down, answered as kube-scheduler needs it: 200 with
    the reason in Error (kube-scheduler reads the body of a 200 reply only, so any
    other status would leave the pod's event with just the code). Returns the reason."""
    assert r.status_code == 200, r.text
    err = r.json()["Error"]
    assert err and all(w in err for w in words), r.text
    return err


class Extender:
    """A running `gpusched extender` process and a small client for it."""

    def __init__(self, bin_, args, env=None, verify=None):
        """verify: the CA file of an extender serving HTTPS (--tls-cert)."""
        self.port = free_port()
        self.url = f"{'https' if verify else 'http'}://127.0.0.1:{self.port}"
        self.verify = verify or True  # per request: a Session's verify loses to REQUESTS_CA_BUNDLE
        self.proc = subprocess.Popen([bin_, "extender", "--listen", f"127.0.0.1:{self.port}",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.wait_ready()

    def wait_ready(self, timeout=20, path="/healthz"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("extender exited: " + self.proc.stderr.read())
            try:
                if requests.get(self.url + path, timeout=1, verify=self.verify).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"extender not ready on {path}")

    def post(self, verb, body, raw=None):
        if raw is not None:
            return requests.post(self.url + "/" + verb, data=raw, timeout=10, verify=self.verify)
        return requests.post(self.url + "/" + verb, json=body, timeout=10, verify=self.verify)

    def filter(self, p, nodes=ALL):
        r = self.post("filter", {"Pod": p, "NodeNames": nodes, "Nodes": None})
        assert r.status_code == 200, r.text
        return r.json()

    def bind(self, p, node):
        """POST /bind; see refused() for a bind the extender turns down"""
        md = p["metadata"]
        return self.post("bind", {"PodName": md["name"], "PodNamespace": md["namespace"],
                                  "PodUID": md["uid"], "Node": node})

    def place(self, p, nodes=ALL):
        """filter + prioritize + bind on the best node; returns the node."""
        f = self.filter(p, nodes)
        assert f["NodeNames"], f
        r = self.post("prioritize", {"Pod": p, "NodeNames": f["NodeNames"]})
        best = max(r.json(), key=lambda h: h["Score"])["Host"]
        b = self.bind(p, best)
        assert b.status_code == 200 and b.json()["Error"] == "", b.text
        return best

    def debug(self, p):
        md = p["metadata"]
        return requests.get(f"{self.url}/debug/pods/{md['namespace']}/{md['name']}", timeout=10,
                            verify=self.verify)

    def allocation(self, p):
        return self.debug(p).json()["allocation"]

    def metric(self, name):
        text = requests.get(self.url + "/metrics", timeout=10, verify=self.verify).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{") or \
                    ("{" in name and line.startswith(name)):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out, err = self.proc.communicate()
        self.proc_err = err
        for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert bad not in err, err[-4000:]
        if sig == signal.SIGTERM:
            assert self.proc.returncode == 0, err[-4000:]
        return err


def write_nodes(path, nodes):
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "NodeList", "items": nodes}, f)
    return str(path)


@pytest.fixture
def nodes_file(tmp_path):
    return write_nodes(tmp_path / "nodes.json", STANDARD_NODES)


@pytest.fixture
def ext(gpusched_bin, nodes_file, tmp_path):
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", str(tmp_path / "state")])
    yield e
    e.stop()


# ---- placement ---------------------------------------------------------------

def test_whole_gpus_filter_and_bind(ext):
    p = pod("train", {"nvidia.com/gpu": "2"})
    f = ext.filter(p)
    assert f["Error"] == ""
    assert set(f["NodeNames"]) == {"a100-1", "a100-2", "t4-1"}
    assert "tainted" in f["FailedAndUnresolvableNodes"]
    assert "mig-1" in f["FailedAndUnresolvableNodes"]
    assert f["Nodes"] is None
    node = ext.place(p)
    a = ext.allocation(p)
    assert a["gpusched.io/node"] == node
    assert a["gpusched.io/request-kind"] == "whole"
    assert len(a["gpusched.io/gpu-uuids"].split(",")) == 2
    assert len(a["gpusched.io/gpu-indices"].split(",")) == 2


def test_standalone_keeps_nothing_for_nominated_pods(ext):
    """Standalone, no watch tells when a pod goes: a pod /filter saw nominated to
    a node (after a preemption) holds nothing there, or it would hold it forever
    once deleted (cluster mode keeps its GPUs: test_extender_cluster.py)."""
    big = pod("pre", {"nvidia.com/gpu": "4"})
    big["spec"]["priority"] = 1000
    big["status"] = {"nominatedNodeName": "a100-1"}
    ext.filter(big)
    low = pod("low", {"nvidia.com/gpu": "2"})
    assert "a100-1" in ext.filter(low)["NodeNames"]
    assert ext.metric("gpusched_extender_nominated_pods") == 0


def test_unresolvable_reasons_are_in_failed_nodes_too(ext):
    """kube-scheduler 1.20 reads only FailedNodes (FailedAndUnresolvableNodes
    came in 1.21, where an entry in both maps counts as unresolvable): every
    refused node's reason must be in FailedNodes, or a 1.20 user sees
    "0/N nodes are available: ." (issue 12, problem 2)."""
    ext.place(pod("big", {"nvidia.com/gpu": "4"}), ["a100-1"])
    f = ext.filter(pod("wide", {"nvidia.com/gpu": "4"}))
    unres = f["FailedAndUnresolvableNodes"]
    assert set(unres) == {"tainted", "mig-1", "t4-1"}
    for node, why in unres.items():
        assert f["FailedNodes"][node] == why, node
    # a node that frees up later (resolvable, preemption may help) is in
    # FailedNodes only
    assert "a100-1" in f["FailedNodes"] and "a100-1" not in unres
    assert f["NodeNames"] == ["a100-2"]


def test_a_faulted_mig_instance_takes_no_pod(gpusched_bin, tmp_path):
    """The device plugin marks a MIG instance that took an XID (its GPU healthy):
    the extender places MIG pods on the others only, and says why when too few are
    left (docs/device-plugin.md, Health)."""
    m = gpu_node("m", n=1, mig=True)
    inv = json.loads(m["metadata"]["annotations"]["gpusched.io/gpu-inventory"])
    for k in range(1, 7):  # instances 1..6 faulted, 0 healthy
        inv["gpus"][0]["mig"][k].update(healthy=False, reason="XID 94 (transient)")
    m["metadata"]["annotations"]["gpusched.io/gpu-inventory"] = json.dumps(inv)
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "n.json", [m])])
    try:
        f = e.filter(pod("two", {"nvidia.com/mig-1g.10gb": "2"}), ["m"])
        assert f["FailedAndUnresolvableNodes"]["m"] == (
            "node has 1 healthy MIG instances of 1g.10gb (of 7), pod needs 2"), f
        one = pod("one", {"nvidia.com/mig-1g.10gb": "1"})
        e.place(one, ["m"])
        assert e.allocation(one)["gpusched.io/gpu-uuids"] == "MIG-m-0-0"
        f = e.filter(pod("next", {"nvidia.com/mig-1g.10gb": "1"}), ["m"])
        assert f["FailedNodes"]["m"] == "node has 0 free MIG instances of 1g.10gb, pod needs 1"
    finally:
        e.stop()


def test_never_more_pods_than_kubelet_has_devices(gpusched_bin, tmp_path):
    """kubelet counts devices per node: with the device plugin's --replicas 1
    a 4-GPU node has 4 nvidia.com/gpu devices, so a fifth shared pod, which
    the GPUs' memory would still take, must not be bound there: kubelet would
    fail it for good (issue 12, problem 5)."""
    n = gpu_node("g", n=4)
    n["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    mig = gpu_node("m", n=1, mig=True)
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "2"
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "n.json", [n, mig])])
    try:
        small = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1Gi"}
        for i in range(4):
            e.place(pod(f"s{i}", small), ["g"])
        f = e.filter(pod("s4", small), ["g"])
        assert f["NodeNames"] == []
        assert f["FailedNodes"]["g"] == ("kubelet has 0 of 4 nvidia.com/gpu devices left on the "
                                         "node (the rest held by pods bound there), pod needs 1")
        assert "g" not in f["FailedAndUnresolvableNodes"]  # preemption may help
        b = e.bind(pod("s4", small), "g")
        refused(b, "devices left")
        # more devices than the node has in all: no eviction helps
        f = e.filter(pod("wide", {"nvidia.com/gpu": "5"}), ["g"])
        assert f["FailedAndUnresolvableNodes"]["g"] == "node has 4 healthy GPUs, pod needs 5"
        # a release gives a device back
        assert requests.delete(e.url + "/allocations/default/s0", timeout=5).status_code == 200
        assert e.filter(pod("s4", small), ["g"])["NodeNames"] == ["g"]
        # MIG: 7 instances in the inventory, 2 devices in kubelet's count
        one = {"nvidia.com/mig-1g.10gb": "1"}
        e.place(pod("m0", one), ["m"])
        e.place(pod("m1", one), ["m"])
        f = e.filter(pod("m2", one), ["m"])
        assert f["FailedNodes"]["m"].startswith(
            "kubelet has 0 of 2 nvidia.com/mig-1g.10gb devices left"), f
        f = e.filter(pod("m3", {"nvidia.com/mig-1g.10gb": "3"}), ["m"])
        assert f["FailedAndUnresolvableNodes"]["m"] == \
            "kubelet has 2 nvidia.com/mig-1g.10gb devices on the node in all, pod needs 3"
        d = e.debug(pod("m2", one)).json()
        by = {x["node"]: x for x in d["nodes"]}
        assert by["m"]["filter"] == "DeviceCount" and by["m"]["code"] == "UNSCHEDULABLE", d
    finally:
        e.stop()


def test_node_without_device_counts_is_not_limited(gpusched_bin, tmp_path):
    # a node file without allocatable GPU devices (no kubelet behind it)
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "n.json",
                                                       [gpu_node("g", n=1)])])
    try:
        small = {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1Gi"}
        for i in range(6):
            e.place(pod(f"s{i}", small), ["g"])
    finally:
        e.stop()


def test_reason_names_the_numbers(ext):
    ext.place(pod("big", {"nvidia.com/gpu": "4"}), ["a100-1"])
    f = ext.filter(pod("next", {"nvidia.com/gpu": "1"}), ["a100-1"])
    assert f["NodeNames"] == []
    reason = f["FailedNodes"]["a100-1"]
    assert any(ch.isdigit() for ch in reason), reason


def test_shared_gpu_memory_and_cores(ext):
    p = pod("share", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                      "nvidia.com/gpu-cores": "30"})
    ext.place(p, ["a100-1"])
    a = ext.allocation(p)
    assert a["gpusched.io/request-kind"] == "shared"
    assert a["gpusched.io/gpu-memory"] == "8192"
    assert a["gpusched.io/gpu-milli"] == "300"
    # a second shared pod can use the same GPU
    q = pod("share2", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                       "nvidia.com/gpu-cores": "30"})
    ext.place(q, ["a100-1"])
    assert ext.metric("gpusched_gpu_compute_allocated_milli") == 600
    # a MIG pod holds its instances' memory, and their share of compute (was 0)
    mem = ext.metric('gpusched_gpu_memory_allocated_mib{node="mig-1"')
    ext.place(pod("slices", {"nvidia.com/mig-1g.10gb": "2"}), ["mig-1"])
    assert ext.metric('gpusched_gpu_memory_allocated_mib{node="mig-1"') > mem
    assert ext.metric('gpusched_gpu_compute_allocated_milli{node="mig-1"') > 0


def test_vcuda_request(ext):
    p = pod("vc", {"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "16"})
    ext.place(p, ["t4-1"])
    a = ext.allocation(p)
    assert a["gpusched.io/request-kind"] == "shared"
    assert a["gpusched.io/gpu-memory"] == "4096"
    assert a["gpusched.io/gpu-milli"] == "500"


def test_mig_request(ext):
    p = pod("mig", {"nvidia.com/mig-1g.10gb": "2"})
    f = ext.filter(p)
    assert f["NodeNames"] == ["mig-1"]
    ext.place(p)
    a = ext.allocation(p)
    assert a["gpusched.io/request-kind"] == "mig"
    assert a["gpusched.io/mig-profile"] == "1g.10gb"
    assert all(u.startswith("MIG-mig-1-0-") for u in a["gpusched.io/gpu-uuids"].split(","))


def test_gpu_type_annotation_and_selector(ext):
    p = pod("t4only", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/gpu-type": "T4"})
    assert ext.filter(p)["NodeNames"] == ["t4-1"]
    q = pod("zoned", {"nvidia.com/gpu": "1"}, node_selector={"zone": "b"})
    assert ext.filter(q)["NodeNames"] == ["a100-2"]


def test_no_gpu_pod_passes_untouched(ext):
    p = pod("web", {"cpu": "1"})
    f = ext.filter(p, ALL + ["not-a-gpu-node"])
    assert f["NodeNames"] == ALL + ["not-a-gpu-node"]
    assert f["FailedNodes"] == {}


def test_keys_are_case_insensitive_and_replies_pascal(ext):
    p = pod("lower", {"nvidia.com/gpu": "1"})
    r = ext.post("filter", {"pod": p, "nodenames": ["a100-1"], "nodes": None})
    assert r.status_code == 200
    assert set(r.json()) >= {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    r = ext.post("prioritize", {"POD": p, "nodeNames": ["a100-1"]})
    assert r.json() == [{"Host": "a100-1", "Score": r.json()[0]["Score"]}]
    r = ext.post("bind", {"podname": "lower", "podnamespace": "default", "poduid": "uid-lower",
                          "node": "a100-1"})
    assert r.status_code == 200 and r.json() == {"Error": ""}


def test_full_nodes_form(ext):
    p = pod("full", {"nvidia.com/gpu": "1"})
    items = [n for n in STANDARD_NODES if n["metadata"]["name"] in ("a100-1", "mig-1")]
    r = ext.post("filter", {"Pod": p, "Nodes": {"items": items}, "NodeNames": None})
    body = r.json()
    assert body["NodeNames"] is None
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["a100-1"]
    assert "mig-1" in body["FailedAndUnresolvableNodes"]


def test_a_node_listed_twice_in_nodes_is_learnt_once(ext):
    # no kube-scheduler sends it, but any client may: the second copy
    # replaced the first while the answer still pointed at it (a use after
    # free, caught by the ASan run)
    twin = copy.deepcopy(next(n for n in STANDARD_NODES if n["metadata"]["name"] == "a100-1"))
    twin["metadata"]["name"] = "twin-1"
    p = pod("twice", {"nvidia.com/gpu": "1"})
    r = ext.post("filter", {"Pod": p, "Nodes": {"items": [twin, twin]}, "NodeNames": None})
    assert r.status_code == 200, r.text
    assert [n["metadata"]["name"] for n in r.json()["Nodes"]["items"]] == ["twin-1", "twin-1"]
    assert bound(ext.bind(p, "twin-1"))


def test_prioritize_range_and_policy_annotation(ext):
    ext.place(pod("first", {"nvidia.com/gpu": "1"}), ["a100-1"])
    packer = pod("pack", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/policy": "binpack"})
    scores = {h["Host"]: h["Score"] for h in
              ext.post("prioritize", {"Pod": packer, "NodeNames": ["a100-1", "a100-2"]}).json()}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["a100-1"] > scores["a100-2"]
    spreader = pod("spread", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/policy": "spread"})
    scores = {h["Host"]: h["Score"] for h in
              ext.post("prioritize", {"Pod": spreader, "NodeNames": ["a100-1", "a100-2"]}).json()}
    assert scores["a100-2"] > scores["a100-1"]


def test_prioritize_keeps_the_best_node_alone_at_the_top(gpusched_bin, tmp_path):
    """Two 1-GPU nodes holding 300 and 250 thousandths: binpack scores a 100-thousandth
    pod 40 and 35 there, both 4 on kube-scheduler's 0..10 scale once rounded. A tie
    would hand the choice to kube-scheduler's in-tree scores, which favour the emptier
    node: the node below the best gets 3. Between equal nodes, the top goes to the one
    the policy takes (the seeded rank), the node --top-k 1 keeps too."""
    nodes = write_nodes(tmp_path / "nodes.json", [gpu_node(f"n{i}", n=1) for i in range(1, 7)])
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(tmp_path / "state"),
                                "--policy", "binpack", "--top-k", "1"])
    try:
        share = {"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "30"}
        e.place(pod("on-n1", share), ["n1"])
        e.place(pod("on-n2", dict(share, **{"nvidia.com/gpu-cores": "25"})), ["n2"])
        p = pod("next", dict(share, **{"nvidia.com/gpu-cores": "10"}))
        r = e.post("prioritize", {"Pod": p, "NodeNames": ["n1", "n2"]})
        assert {h["Host"]: h["Score"] for h in r.json()} == {"n1": 4, "n2": 3}, r.json()
        trace = {n["node"]: n for n in e.debug(p).json()["nodes"]}
        assert (trace["n1"]["score"], trace["n2"]["score"]) == (40, 35), trace
        assert (trace["n1"]["extender_score"], trace["n2"]["extender_score"]) == (4, 3)
        empty = ["n3", "n4", "n5", "n6"]
        r = e.post("prioritize", {"Pod": p, "NodeNames": empty}).json()
        top = [h["Host"] for h in r if h["Score"] == max(x["Score"] for x in r)]
        assert len(top) == 1, r
        assert e.filter(p, empty)["NodeNames"] == top
    finally:
        e.stop()


def top_choice(e, p, names):
    """The one node /prioritize scores highest for p, which --top-k 1's /filter keeps."""
    r = e.post("prioritize", {"Pod": p, "NodeNames": names}).json()
    best = [h["Host"] for h in r if h["Score"] == max(x["Score"] for x in r)]
    assert len(best) == 1, r
    assert e.filter(p, names)["NodeNames"] == best
    return best[0]


def test_soft_preferences_come_first(gpusched_bin, tmp_path):
    """Preferred node affinity and PreferNoSchedule taints rank nodes before the
    policy does (kube-scheduler's own scores for them are outvoted by the extender's
    weight): binpack takes n1, the fullest, but a pod that prefers zone b gets the top
    score and --top-k 1 on n2; with a PreferNoSchedule taint on n2 it gets n3 (zone b
    too), unless it tolerates the taint. Pods of one shape with other preferences
    never share a kept reply."""
    whole = {"nvidia.com/gpu": "1"}
    zone_b = pod("zone-b", whole)
    zone_b["spec"]["affinity"] = {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}
    names = ["n1", "n2", "n3"]
    for spot in (False, True):
        taints = [{"key": "spot", "effect": "PreferNoSchedule"}] if spot else None
        nodes = write_nodes(tmp_path / f"nodes{spot}.json", [
            gpu_node("n1", labels={"zone": "a"}),
            gpu_node("n2", labels={"zone": "b"}, taints=taints),
            gpu_node("n3", labels={"zone": "b"})])
        e = Extender(gpusched_bin, ["--nodes", nodes, "--policy", "binpack", "--top-k", "1"])
        try:
            e.place(pod("on-n1", whole), ["n1"])
            e.place(pod("on-n1b", whole), ["n1"])
            e.place(pod("on-n2", whole), ["n2"])

            def top(p):
                return top_choice(e, p, names)
            plain = pod("plain", whole)
            assert top(plain) == "n1"
            zone_b["spec"].pop("tolerations", None)
            assert top(zone_b) == ("n3" if spot else "n2")
            # the decision trace shows why: NodeAffinity 0..100 + TaintToleration 0..100
            trace = {n["node"]: n.get("preference") for n in e.debug(zone_b).json()["nodes"]}
            assert trace == ({"n1": 100, "n2": 100, "n3": 200} if spot else
                             {"n1": 100, "n2": 200, "n3": 200}), trace
            assert top(plain) == "n1"  # its own kept reply, not zone-b's
            zone_b["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
            assert top(zone_b) == "n2"
        finally:
            e.stop()


def test_preferred_pod_affinity_comes_first(gpusched_bin, tmp_path):
    """Preferred pod affinity and anti-affinity, and soft topology spread, rank
    nodes before the policy, as kube-scheduler's InterPodAffinity and
    PodTopologySpread count them over the GPU pods placed (their own scores would
    be outvoted): binpack takes n1, the fullest, but a pod that prefers not to share
    a node (or a zone) with app=web pods goes elsewhere, one that prefers app=db's
    node goes there, and terms that pick no pod change nothing."""
    whole = {"nvidia.com/gpu": "1"}
    H = "kubernetes.io/hostname"
    nodes = write_nodes(tmp_path / "nodes.json", [
        gpu_node(n, labels={"zone": z, H: n}) for n, z in (("n1", "a"), ("n2", "b"),
                                                           ("n3", "b"))])
    names = ["n1", "n2", "n3"]

    def labelled(name, labels):
        p = pod(name, whole)
        p["metadata"]["labels"] = labels
        return p

    def prefers(name, kind, weight, key, labels, namespaces=None):
        p = pod(name, whole)
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
        if namespaces:
            term["namespaces"] = namespaces
        p["spec"]["affinity"] = {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "podAffinityTerm": term}]}}
        return p

    e = Extender(gpusched_bin, ["--nodes", nodes, "--policy", "binpack", "--top-k", "1"])
    try:
        for name, labels, node in (("web-1", {"app": "web"}, "n1"), ("other-1", {}, "n1"),
                                   ("other-2", {}, "n1"), ("other-3", {}, "n2"),
                                   ("other-4", {}, "n2"), ("db-1", {"app": "db"}, "n3")):
            e.place(labelled(name, labels), [node])  # n1 3 GPUs held, n2 2, n3 1

        def top(p):
            return top_choice(e, p, names)
        assert top(pod("plain", whole)) == "n1"
        spread = prefers("spread", "podAntiAffinity", 100, H, {"app": "web"})
        assert top(spread) == "n2"  # n2 and n3 rank alike; binpack takes the fuller
        trace = {n["node"]: n.get("preference") for n in e.debug(spread).json()["nodes"]}
        assert trace == {"n1": 100, "n2": 200, "n3": 200}, trace  # + TaintToleration's 100
        # the same pod in another namespace picks nothing there (its own reply)
        elsewhere = prefers("spread", "podAntiAffinity", 100, H, {"app": "web"})
        elsewhere["metadata"]["namespace"] = "other"
        assert top(elsewhere) == "n1"
        assert top(spread) == "n2"
        assert top(prefers("zones", "podAntiAffinity", 10, "zone", {"app": "web"})) == "n2"
        assert top(prefers("near-db", "podAffinity", 5, H, {"app": "db"})) == "n3"
        # picks nothing: another namespace, a label no pod has, a key no node has
        assert top(prefers("ns", "podAntiAffinity", 100, H, {"app": "web"}, ["ml"])) == "n1"
        assert top(prefers("none", "podAffinity", 100, H, {"app": "cache"})) == "n1"
        assert top(prefers("nokey", "podAntiAffinity", 100, "rack", {"app": "web"})) == "n1"
        assert top(pod("plain-2", whole)) == "n1"
        # the weights of matching terms add up, anti-affinity negative
        both = prefers("both", "podAntiAffinity", 30, H, {"app": "web"})
        both["spec"]["affinity"]["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 40, "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["web", "db"]}]},
                    "topologyKey": H}}]}
        assert top(both) == "n3"  # n1: -30 + 40, n3: +40
        # soft topology spread (ScheduleAnyway): zone a holds app=web's pod, so
        # zone b, where binpack takes n2; a DoNotSchedule one is kube-scheduler's
        # filter and changes no score here
        for when, want in (("ScheduleAnyway", "n2"), ("DoNotSchedule", "n1")):
            sp = pod(f"spread-{when}", whole)
            sp["spec"]["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": when,
                "labelSelector": {"matchLabels": {"app": "web"}}}]
            assert top(sp) == want, when
        # the new placement counts at once for the next pod
        e.place(labelled("web-2", {"app": "web"}), ["n2"])
        assert top(prefers("spread-2", "podAntiAffinity", 100, H, {"app": "web"})) == "n3"
        # two pods picked in one domain add up: zone b holds web-2 and web-3
        e.place(labelled("web-3", {"app": "web"}), ["n3"])
        z = prefers("zones-2", "podAntiAffinity", 10, "zone", {"app": "web"})
        assert top(z) == "n1"
        trace = {n["node"]: n.get("preference") for n in e.debug(z).json()["nodes"]}
        assert trace == {"n1": 150, "n2": 100, "n3": 100}, trace  # a: -10, b: -20
        bad = prefers("bad", "podAntiAffinity", 0, H, {"app": "web"})
        f = e.filter(bad, names)
        assert "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight" in \
            f["Error"], f
    finally:
        e.stop()


def linked_node(name, down):
    """4 GPUs with NVLinks 0-2 and 1-3 (NUMA 0: GPUs 0-1, NUMA 1: 2-3), GPUs in
    `down` unhealthy."""
    n = gpu_node(name, n=4)
    inv = json.loads(n["metadata"]["annotations"]["gpusched.io/gpu-inventory"])
    for g in inv["gpus"]:
        i = g["index"]
        g["numa_node"] = i // 2
        g["links"] = [{"gpu": (i + 2) % 4, "type": "nvlink"}]
        g["healthy"] = i not in down
    n["metadata"]["annotations"]["gpusched.io/gpu-inventory"] = json.dumps(inv)
    return n


@pytest.mark.parametrize("pair_on", ["l1", "l2"])
def test_equal_nodes_go_to_the_linked_gpus(gpusched_bin, tmp_path, pair_on):
    """Two nodes cpufrag scores alike (two whole GPUs free on each): on one the free
    GPUs are an NVLinked pair, on the other 0 and 3, across NUMA nodes. A 2-GPU pod's
    top score, --top-k 1 and the decision trace all name the node with the pair,
    whichever node's seeded rank comes first (both ways round), and so for a pod of two
    shared GPUs; a 1-GPU pod keeps the rank alone."""
    other = "l2" if pair_on == "l1" else "l1"
    nodes = write_nodes(tmp_path / "nodes.json",
                        [linked_node(pair_on, (1, 3)), linked_node(other, (1, 2))])
    e = Extender(gpusched_bin, ["--nodes", nodes, "--top-k", "1"])
    try:
        p = pod("pair", {"nvidia.com/gpu": "2"})
        r = e.post("prioritize", {"Pod": p, "NodeNames": ["l1", "l2"]}).json()
        assert {h["Host"]: h["Score"] for h in r}[pair_on] == 10, r
        assert e.filter(p, ["l1", "l2"])["NodeNames"] == [pair_on]
        trace = {n["node"]: n for n in e.debug(p).json()["nodes"]}
        assert trace[pair_on]["score"] == trace[other]["score"], trace
        assert (trace[pair_on]["would_get"], trace[pair_on]["weakest_link"]) == ([0, 2], "nvlink")
        assert (trace[other]["would_get"], trace[other]["weakest_link"]) == ([0, 3], "sys")
        assert (trace[pair_on]["extender_score"], trace[other]["extender_score"]) == (10, 9)
        one = pod("one", {"nvidia.com/gpu": "1"})
        e.filter(one, ["l1", "l2"])
        trace = {n["node"]: n for n in e.debug(one).json()["nodes"]}
        assert "weakest_link" not in trace["l1"] and len(trace["l1"]["would_get"]) == 1
        # two shared GPUs: the same pair decides
        tp = pod("tp", {"nvidia.com/gpu": "2", "nvidia.com/gpu-memory": "10Gi",
                        "nvidia.com/gpu-cores": "30"})
        assert e.filter(tp, ["l1", "l2"])["NodeNames"] == [pair_on]
        trace = {n["node"]: n for n in e.debug(tp).json()["nodes"]}
        assert trace[pair_on]["score"] == trace[other]["score"], trace
        assert (trace[pair_on]["would_get"], trace[pair_on]["weakest_link"]) == ([0, 2], "nvlink")
        assert trace[other]["weakest_link"] == "sys", trace
        assert e.place(p, ["l1", "l2"]) == pair_on
    finally:
        e.stop()


def test_default_policy_is_cpufrag(ext):
    # docs/benchmark.md: cpufrag beats fgd on every openb trace, so it is the default
    p = pod("dflt", {"nvidia.com/gpu": "1"})
    ext.place(p)
    assert ext.debug(p).json()["policy"] == "cpufrag"
    q = pod("byannot", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/policy": "fgd"})
    ext.place(q)
    assert ext.debug(q).json()["policy"] == "fgd"


def test_unknown_policy_is_an_error(ext):
    p = pod("pol", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/policy": "nope"})
    f = ext.filter(p)
    assert "gpusched.io/policy" in f["Error"] and "nope" in f["Error"]


# ---- bad input -----------------------------------------------------------------

def test_bad_input_is_rejected_and_state_untouched(ext):
    ext.place(pod("keep", {"nvidia.com/gpu": "1"}), ["a100-1"])
    before = ext.metric("gpusched_allocations")
    cases = [
        ("filter", b"{not json", 400, "not valid JSON"),
        ("filter", b"[]", 400, "object"),
        ("filter", json.dumps({"NodeNames": ["a"]}).encode(), 400, "Pod"),
        ("filter", json.dumps({"Pod": pod("x"), "NodeNames": "a100-1"}).encode(), 400,
         "NodeNames"),
        ("filter", json.dumps({"Pod": pod("x"), "NodeNames": [1]}).encode(), 400, "NodeNames[0]"),
        ("filter", json.dumps({"Pod": {"metadata": {}}, "NodeNames": []}).encode(), 400,
         "metadata.name"),
        ("prioritize", json.dumps({"Pod": pod("x")}).encode(), 400, "NodeNames"),
        ("bind", json.dumps({"PodName": "x", "PodNamespace": "default"}).encode(), 400, "PodUID"),
        ("bind", json.dumps({"PodName": 3, "PodNamespace": "d", "PodUID": "u",
                             "Node": "n"}).encode(), 400, "PodName"),
        ("bind", json.dumps({"PodName": "ghost", "PodNamespace": "default", "PodUID": "nope",
                             "Node": "a100-1"}).encode(), 200, "unknown"),  # refused()
        ("preempt", json.dumps({"Pod": pod("x"), "NodeNameToMetaVictims": []}).encode(), 400,
         "NodeNameToMetaVictims"),
        ("frobnicate", b"{}", 404, "no route"),
    ]
    for verb, raw, status, needle in cases:
        r = ext.post(verb, None, raw=raw)
        assert r.status_code == status, (verb, raw, r.text)
        assert needle in r.json()["error"], (verb, r.text)
    # a pod the extender saw, on a node that does not exist
    ext.filter(pod("real", {"nvidia.com/gpu": "1"}))
    refused(ext.bind(pod("real", {"nvidia.com/gpu": "1"}), "no-such-node"), "no-such-node")
    # an impossible request: 200 with an Error naming the field
    f = ext.filter(pod("bad", {"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "150"}))
    assert "gpu-cores" in f["Error"]
    assert requests.get(ext.url + "/filter", timeout=5).status_code == 405
    # known paths asked with another method: 405 saying which; unknown paths: 404
    r = requests.post(ext.url + "/healthz", timeout=5)
    assert r.status_code == 405 and "use GET" in r.json()["error"], r.text
    assert requests.delete(ext.url + "/metrics", timeout=5).status_code == 405
    assert requests.post(ext.url + "/debug/pods/default/real", timeout=5).status_code == 405
    r = requests.get(ext.url + "/allocations/default/real", timeout=5)
    assert r.status_code == 405 and "use DELETE" in r.json()["error"], r.text
    assert requests.post(ext.url + "/no-such-path", timeout=5).status_code == 404
    huge = b'{"Pod": "' + b"x" * (9 << 20) + b'"}'
    r = requests.post(ext.url + "/filter", data=huge, timeout=30)
    assert r.status_code == 413
    # a client announcing 10 GB is answered before it sends them, and cut off
    with socket.create_connection(("127.0.0.1", ext.port), timeout=5) as sk:
        sk.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 10737418240\r\n\r\n" + b"x" * 65536)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = sk.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 413"), got
    assert requests.get(ext.url + "/healthz", timeout=5).status_code == 200
    assert ext.metric("gpusched_allocations") == before


# ---- races, restart, release ---------------------------------------------------------

def test_race_for_the_last_gpu(ext):
    ext.bind(pod("fill", {"nvidia.com/gpu": "3"}), "a100-1")  # not seen: refused
    filler = pod("fill", {"nvidia.com/gpu": "3"})
    ext.filter(filler, ["a100-1"])
    assert bound(ext.bind(filler, "a100-1"))
    racers = [pod(f"r{i}", {"nvidia.com/gpu": "1"}) for i in range(8)]
    for p in racers:
        assert ext.filter(p, ["a100-1"])["NodeNames"] == ["a100-1"]
    results = []
    barrier = threading.Barrier(len(racers))

    def go(p):
        barrier.wait()
        results.append(ext.bind(p, "a100-1"))
    threads = [threading.Thread(target=go, args=(p,)) for p in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    won = [r for r in results if r.status_code == 200 and r.json()["Error"] == ""]
    assert len(won) == 1, [r.text for r in results]
    for r in results:
        if r is not won[0]:
            refused(r, "a100-1")
    assert ext.metric('gpusched_gpus_allocated{node="a100-1"') == 4


def test_restart_restores_every_allocation(gpusched_bin, nodes_file, tmp_path):
    state = str(tmp_path / "state")
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", state])
    pods = [pod("w1", {"nvidia.com/gpu": "2"}),
            pod("s1", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "10Gi"}),
            pod("m1", {"nvidia.com/mig-1g.10gb": "1"})]
    placed = {p["metadata"]["name"]: e.place(p) for p in pods}
    before = {p["metadata"]["name"]: e.allocation(p) for p in pods}
    released = pod("gone", {"nvidia.com/gpu": "1"})
    e.place(released)
    assert requests.delete(e.url + "/allocations/default/gone", timeout=5).status_code == 200
    e.stop(signal.SIGKILL)
    journal = os.path.join(state, "journal")

    def assigned():
        out = {}
        with open(journal) as f:
            for line in f:
                rec = json.loads(line.split(" ", 1)[1])
                if rec["op"] == "bind":
                    out[rec["uid"]] = rec["annotations"]["gpusched.io/assigned-at"]
                elif rec["op"] == "release":
                    out.pop(rec["uid"])
                else:  # the compaction's learned workload: "gone" ended
                    assert rec["op"] == "workload" and rec["ended"]["pods"] == 1, rec
        return out
    times = assigned()
    assert set(times) == {"uid-w1", "uid-s1", "uid-m1"}
    # a crash in the middle of the next record
    with open(os.path.join(state, "journal"), "a") as f:
        f.write('0badc0de {"op":"bind","uid":"torn"')
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", state])
    try:
        assert e.metric("gpusched_allocations") == 3
        text = requests.get(e.url + "/metrics", timeout=5).text
        for p in pods:
            name = p["metadata"]["name"]
            # the pod is only in the journal now: no pod object; check per-node totals
            assert f'node="{placed[name]}"' in text
        assert e.metric('gpusched_gpus_allocated{node="a100-1"') + \
            e.metric('gpusched_gpus_allocated{node="a100-2"') + \
            e.metric('gpusched_gpus_allocated{node="t4-1"') == 3
        # compaction kept the records as written (assignment times included)
        assert assigned() == times
        assert before["w1"]["gpusched.io/gpu-uuids"]
    finally:
        err = e.stop()
    assert "torn" in err


def write_journal(state, recs):
    """DIR/journal holding recs, each "<crc32 hex> <json>" (ext/journal.h)."""
    with open(os.path.join(state, "journal"), "w") as f:
        for r in recs:
            js = json.dumps(r, separators=(",", ":"))
            f.write(f"{zlib.crc32(js.encode()):08x} {js}\n")


def test_learned_workload_keeps_the_models_pods_were_held_to(gpusched_bin, nodes_file,
                                                              tmp_path):
    """cpufrag learns its target workload from the pods it reserves; a pod held to some
    GPU models counts in a class of those models (what its price on scarce models is
    computed from). The bind records them (gpusched.io/gpu-models), so a restart from
    the journal learns the same classes."""
    state = str(tmp_path / "state")
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", state])
    pods = [pod("t4", {"nvidia.com/gpu": "1"}, annotations={"gpusched.io/gpu-type": "t4"}),
            pod("not-t4", {"nvidia.com/gpu": "1"},
                annotations={"gpusched.io/gpu-type-exclude": "T4"}),
            pod("both", {"nvidia.com/gpu": "1"},
                annotations={"gpusched.io/gpu-type": "T4,A100"}),
            pod("any1", {"nvidia.com/gpu": "1"}), pod("any2", {"nvidia.com/gpu": "1"})]
    for p in pods:
        e.place(p)
    models = {p["metadata"]["name"]: e.allocation(p).get("gpusched.io/gpu-models")
              for p in pods}
    assert models == {"t4": "Tesla-T4", "not-t4": A100, "both": None, "any1": None,
                      "any2": None}, models

    def classes():
        w = requests.get(e.url + "/debug/workload", timeout=5).json()
        assert w["pods"] == 5, w
        return sorted((c["num_gpu"], c["milli"], tuple(c["models"]), c["pods"])
                      for c in w["classes"])
    before = classes()
    assert before == [(1, 1000, (), 3), (1, 1000, (A100,), 1), (1, 1000, ("Tesla-T4",), 1)]
    e.stop(signal.SIGKILL)
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", state])
    try:
        assert classes() == before
        # two pods end: still counted, and after the journal is compacted (the
        # next start keeps only live binds) a workload record carries them
        for name in ("t4", "any1"):
            r = requests.delete(f"{e.url}/allocations/default/{name}", timeout=5)
            assert r.status_code == 200, r.text
        assert classes() == before
    finally:
        e.stop()
    for _ in range(2):  # compacts; then replays the compacted journal
        e = Extender(gpusched_bin, ["--nodes", nodes_file, "--state-dir", state])
        try:
            assert classes() == before
            assert e.metric("gpusched_allocations") == 3
        finally:
            e.stop()
    with open(os.path.join(state, "journal")) as f:
        recs = [json.loads(line.split(" ", 1)[1]) for line in f]
    assert [r["op"] for r in recs] == ["workload", "bind", "bind", "bind"], recs
    assert recs[0]["ended"]["pods"] == 2, recs[0]
    # a damaged workload record refuses the start, naming the record and field
    recs[0]["ended"]["classes"][0]["milli"] = 0
    write_journal(state, recs)
    r = run(gpusched_bin, "extender", "--nodes", nodes_file, "--state-dir", state,
            "--listen", f"127.0.0.1:{free_port()}", timeout=10)
    assert r.returncode == 2 and "journal:1" in r.stderr and \
        "workload record: ended: classes[0].milli: 0 is outside 1..1000" in r.stderr, r.stderr


def test_filter_preemption_needs_cluster_mode(gpusched_bin, nodes_file):
    """Standalone has no pods to delete: --filter-preemption is refused at start."""
    r = run(gpusched_bin, "extender", "--nodes", nodes_file, "--filter-preemption",
            "--listen", "127.0.0.1:0", timeout=20)
    assert r.returncode == 2 and "filter_preemption: needs cluster mode" in r.stderr, r.stderr


def test_damaged_journal_refuses_to_start(gpusched_bin, nodes_file, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal").write_text('deadbeef {"op":"bind"}\n0badc0de {}\n')
    r = run(gpusched_bin, "extender", "--nodes", nodes_file, "--state-dir", str(state),
            "--listen", f"127.0.0.1:{free_port()}", timeout=10)
    assert r.returncode == 2 and "journal:1" in r.stderr


def test_release_from_the_cli(gpusched_bin, ext):
    p = pod("rel", {"nvidia.com/gpu": "4"})
    ext.place(p, ["a100-1"])
    assert ext.filter(pod("after", {"nvidia.com/gpu": "1"}), ["a100-1"])["NodeNames"] == []
    r = run(gpusched_bin, "extender", "release", "default/rel", "--listen",
            f"127.0.0.1:{ext.port}")
    assert r.returncode == 0, r.stderr
    assert ext.filter(pod("after", {"nvidia.com/gpu": "1"}), ["a100-1"])["NodeNames"] == ["a100-1"]
    r = run(gpusched_bin, "extender", "release", "default/rel", "--listen",
            f"127.0.0.1:{ext.port}")
    assert r.returncode == 1 and "holds no GPUs" in r.stderr


def test_a_pod_named_like_a_verb_can_be_explained_and_released(ext):
    p = pod("bind", {"nvidia.com/gpu": "1"})
    ext.place(p, ["a100-1"])
    r = requests.get(ext.url + "/debug/pods/default/bind", timeout=5)
    assert r.status_code == 200, r.text
    r = requests.delete(ext.url + "/allocations/default/bind", timeout=5)
    assert r.status_code == 200 and r.json() == {"released": "default/bind"}, r.text


def test_release_by_a_reused_name(gpusched_bin, ext):
    # a StatefulSet's pod web-0 re-created while the old one still holds its
    # GPUs (standalone: nothing told the extender it ended): the name alone
    # does not say which, and freeing the live one would hand its GPUs out twice
    old = pod("web-0", {"nvidia.com/gpu": "1"}, uid="uid-old")
    ext.place(old, ["a100-1"])
    new = pod("web-0", {"nvidia.com/gpu": "1"}, uid="uid-new")
    ext.filter(new, ["a100-1"])  # pending: by name, the old allocation is the one
    r = requests.delete(ext.url + "/allocations/default/web-0", timeout=5)
    assert r.status_code == 200, r.text
    assert ext.filter(pod("probe", {"nvidia.com/gpu": "4"}), ["a100-1"])["NodeNames"] == \
        ["a100-1"]
    ext.place(old, ["a100-1"])
    ext.place(new, ["a100-1"])
    r = requests.delete(ext.url + "/allocations/default/web-0", timeout=5)
    assert r.status_code == 409 and "2 pods named default/web-0 hold GPUs" in r.text, r.text
    assert "gpusched extender release default/web-0 UID" in r.text
    r = requests.delete(ext.url + "/allocations/default/web-1?uid=uid-old", timeout=5)
    assert r.status_code == 404, r.text  # the uid is not that name's
    r = run(gpusched_bin, "extender", "release", "default/web-0", "uid-old", "--listen",
            f"127.0.0.1:{ext.port}")
    assert r.returncode == 0, r.stderr
    # the live one keeps its GPU, the old one's is free
    assert ext.filter(pod("probe4", {"nvidia.com/gpu": "4"}), ["a100-1"])["NodeNames"] == []
    assert ext.filter(pod("probe3", {"nvidia.com/gpu": "3"}), ["a100-1"])["NodeNames"] == \
        ["a100-1"]
    r = requests.delete(ext.url + "/allocations/default/web-0", timeout=5)
    assert r.status_code == 200, r.text


def test_bind_is_idempotent_and_refuses_a_second_node(ext):
    p = pod("once", {"nvidia.com/gpu": "1"})
    ext.place(p, ["a100-1"])
    assert bound(ext.bind(p, "a100-1"))
    refused(ext.bind(p, "a100-2"), "already holds")


# ---- preemption, top-k, config, metrics -------------------------------------------------

def test_preempt_proposes_lower_priority_victims(ext):
    low = [pod(f"low{i}", {"nvidia.com/gpu": "2"}, priority=i) for i in range(2)]
    for p in low:
        ext.filter(p, ["a100-1"])
        assert bound(ext.bind(p, "a100-1"))
    high = pod("high", {"nvidia.com/gpu": "2"}, priority=1000)
    r = ext.post("preempt", {"Pod": high, "NodeNameToMetaVictims": {
        "a100-1": {"Pods": [], "NumPDBViolations": 0}}})
    assert r.status_code == 200, r.text
    victims = r.json()["NodeNameToMetaVictims"]["a100-1"]["Pods"]
    assert victims == [{"UID": "uid-low0"}]  # one victim, the lowest priority
    # kube-scheduler's own choice is kept
    r = ext.post("preempt", {"Pod": high, "NodeNameToMetaVictims": {
        "a100-1": {"Pods": [{"UID": "uid-low1"}], "NumPDBViolations": 0}}})
    assert r.json()["NodeNameToMetaVictims"]["a100-1"]["Pods"] == [{"UID": "uid-low1"}]
    # trying victims takes them off and puts them back: the learned workload still
    # counts each of the two pods once
    w = requests.get(ext.url + "/debug/workload", timeout=5).json()
    assert w["pods"] == 2 and [c["pods"] for c in w["classes"]] == [2], w
    # a pod it cannot read: ExtenderPreemptionResult has no Error field, so a 200
    # would read as "no candidate" in silence; 500 fails the preemption, logged
    bad = pod("bad", {"nvidia.com/gpu": "1"}, priority=1000)
    bad["metadata"]["annotations"] = {"gpusched.io/policy": "no-such-policy"}
    r = ext.post("preempt", {"Pod": bad, "NodeNameToMetaVictims": {
        "a100-1": {"Pods": [], "NumPDBViolations": 0}}})
    assert r.status_code == 500 and "no-such-policy" in r.json()["error"], r.text


def test_top_k(gpusched_bin, nodes_file):
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--top-k", "1"])
    try:
        f = e.filter(pod("k", {"nvidia.com/gpu": "1"}))
        assert len(f["NodeNames"]) == 1
        assert any("best 1" in v for v in f["FailedNodes"].values())
    finally:
        e.stop()


def test_config_file_and_json_logs(gpusched_bin, nodes_file, tmp_path):
    cfg = tmp_path / "ext.yaml"
    cfg.write_text(f"nodes: {nodes_file}\npolicy: binpack\nlog_format: json\ntop_k: 0\n")
    e = Extender(gpusched_bin, ["--config", str(cfg)])
    try:
        p = pod("c", {"nvidia.com/gpu": "1"})
        e.filter(p)
        assert e.debug(p).json()["policy"] == "binpack"
    finally:
        err = e.stop()
    first = err.strip().splitlines()[0]
    assert json.loads(first)["msg"] if first.startswith("{") else False
    cfg.write_text("polciy: binpack\n")
    r = run(gpusched_bin, "extender", "--config", str(cfg), timeout=10)
    assert r.returncode == 2 and "polciy: unknown setting" in r.stderr
    cfg.write_text("top_k: many\n")
    r = run(gpusched_bin, "extender", "--config", str(cfg), timeout=10)
    assert r.returncode == 2 and "top_k: must be an integer" in r.stderr
    cfg.write_text("tls_ca: /etc/ca.crt\n")
    r = run(gpusched_bin, "extender", "--config", str(cfg), timeout=10)
    assert r.returncode == 2 and "tls_ca needs tls_cert and tls_key" in r.stderr
    cfg.write_text("annotation_prefix: gpusched.io\n")  # the '/' left out
    r = run(gpusched_bin, "extender", "--config", str(cfg), timeout=10)
    assert r.returncode == 2 and "annotation_prefix 'gpusched.io': must be a DNS subdomain" \
        in r.stderr, r.stderr


def test_bad_nodes_file_names_the_node(gpusched_bin, tmp_path):
    bad = gpu_node("broken")
    bad["metadata"]["annotations"]["gpusched.io/gpu-inventory"] = '{"version": 1, "gpus": [{}]}'
    path = write_nodes(tmp_path / "bad.json", [gpu_node("ok"), bad])
    r = run(gpusched_bin, "extender", "--nodes", path, "--listen", f"127.0.0.1:{free_port()}",
            timeout=10)
    assert r.returncode == 2
    assert "items[1]" in r.stderr and "broken" in r.stderr and "gpus[0].index" in r.stderr


def test_probes_version_and_metrics(ext):
    assert requests.get(ext.url + "/readyz", timeout=5).status_code == 200
    assert requests.get(ext.url + "/version", timeout=5).json()["version"]
    ext.place(pod("m", {"nvidia.com/gpu": "1"}))
    text = requests.get(ext.url + "/metrics", timeout=5).text
    for needle in ['gpusched_extender_requests_total{verb="filter",code="200"}',
                   'gpusched_extender_request_duration_seconds_bucket{verb="bind",le="+Inf"} 1',
                   'gpusched_extender_decisions_total{verb="bind",result="bound"} 1',
                   "gpusched_gpus_free{", "gpusched_gpu_memory_allocated_mib{",
                   "gpusched_fragmentation_milli", "# TYPE gpusched_gpus gauge"]:
        assert needle in text, needle


def test_debug_explains_every_node(ext):
    p = pod("why", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "90Gi"})
    ext.filter(p)
    d = ext.debug(p).json()
    by = {n["node"]: n for n in d["nodes"]}
    assert set(by) == set(ALL)
    assert not by["a100-1"]["fits"] and "MiB" in by["a100-1"]["reason"]
    assert by["a100-1"]["gpus"][0]["free_memory_mib"] == 81920
    assert ext.debug(pod("never-seen")).status_code == 404


# ---- the deploy/ example ------------------------------------------------------------

def _deploy(name):
    import yaml
    root = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
    with open(os.path.join(root, name)) as f:
        return list(yaml.safe_load_all(f))


# the scheduler's configuration: test_deploy.py


def test_deploy_extender_config_is_accepted(gpusched_bin, tmp_path):
    import yaml
    docs = _deploy("extender.yaml")
    cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
    dep = [d for d in docs if d["kind"] == "Deployment"][0]
    assert dep["spec"]["replicas"] == 2
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["limits"]
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(cm["data"]["extender.yaml"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    r = subprocess.run([gpusched_bin, "extender", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=10, env=env)
    # every key is accepted; it stops only because this is not a cluster
    assert r.returncode == 2 and "KUBERNETES_SERVICE_HOST" in r.stderr, r.stderr
    rules = [d for d in _deploy("rbac-extender.yaml") if d["kind"] == "ClusterRole"][0]["rules"]
    verbs = {(g, res): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"]
             for res in rule["resources"]}
    assert verbs[("", "pods/binding")] == {"create"}
    assert "delete" not in verbs[("", "pods")] and "update" not in verbs[("", "nodes")]
    assert yaml  # the manifests parsed


# ---- GPU quotas ----------------------------------------------------------------------

def test_quota_file_is_enforced(gpusched_bin, nodes_file, tmp_path):
    quotas = tmp_path / "quotas.yaml"
    quotas.write_text("- apiVersion: gpusched.io/v1\n  kind: GPUQuota\n"
                      "  metadata: {name: q, namespace: team}\n"
                      "  spec: {total: {gpus: 2}}\n")
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--quotas", str(quotas)])
    try:
        first = pod("q1", {"nvidia.com/gpu": "2"}, ns="team")
        e.place(first, ["a100-1"])
        second = pod("q2", {"nvidia.com/gpu": "1"}, ns="team")
        f = e.filter(second, ["a100-1", "a100-2"])
        assert f["NodeNames"] == []
        assert all("GPUQuota team/q" in r for r in f["FailedNodes"].values()), f
        # another namespace is not limited
        assert e.filter(pod("other", {"nvidia.com/gpu": "1"}), ["a100-2"])["NodeNames"]
        # freeing the first pod frees the quota
        assert requests.delete(e.url + "/allocations/team/q1", timeout=5).status_code == 200
        assert e.filter(second, ["a100-2"])["NodeNames"] == ["a100-2"]
    finally:
        e.stop()
    quotas.write_text("- {apiVersion: gpusched.io/v1, kind: GPUQuota, metadata: {name: q}, "
                      "spec: {total: {gpus: 2}}}\n")
    e = Extender(gpusched_bin, ["--nodes", nodes_file, "--quotas", str(quotas)])
    err = e.stop()
    assert "namespace" in err  # the broken object is reported, not enforced as zero


def test_an_idle_connection_outlives_go_clients_idle_timeout(ext):
    """kube-scheduler (and the API server calling a webhook) keep an idle
    keep-alive connection 90 s (Go's http.DefaultTransport) and do not retry a POST
    the server closed under them: the server must keep it longer. A connection
    silent for 91 s still answers."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", ext.port, timeout=10)
    try:
        body = json.dumps({"Pod": pod("idle", {"nvidia.com/gpu": "1"}), "NodeNames": ["a100-1"]})
        conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
        assert conn.getresponse().read()
        sock = conn.sock
        time.sleep(91)
        conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        assert conn.sock is sock, "the client reconnected: the server closed the idle connection"
        assert r.status == 200 and json.loads(r.read())["NodeNames"] == ["a100-1"]
    finally:
        conn.close()
