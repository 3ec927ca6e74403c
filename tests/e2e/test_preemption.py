"""Preemption (issue 12): a high-priority GPU pod preempts lower-priority GPU pods
through the extender's preempt verb, and the victims are the ones the extender
chose.

The GPU resources are ignoredByScheduler, so kube-scheduler's own dry run finds no
victim (its in-tree filters fit the pod on every node as it is); only the
extender's /preempt answer (NodeNameToMetaVictims: kube-scheduler's victims plus
the smallest set of lower-priority GPU pods whose removal lets the pod fit) names
any.

kube-scheduler v1.20.0 - v1.20.9 never calls an extender's preempt verb (its
framework is built without the extenders: kubernetes/kubernetes#102971, fixed in
v1.20.10 by #103030), and with candidates that have no victims it dies
(index out of range in pickOneNodeForPreemption): with the v1.20.2 binaries here
a GPU pod that could preempt crashes kube-scheduler. So, on those versions, the
module's kube-scheduler runs with DefaultPreemption disabled in its profile (what
such a cluster has to do), and:

- test_extender_victims_placed_by_kube_scheduler sends kube-scheduler's
  ExtenderPreemptionArgs (every node a candidate with no victims of its own, as
  its dry run gives) to the one URL kube-scheduler calls, does what kube-scheduler
  does with the answer (picks the node with the lowest-priority victims, deletes
  them, nominates the node), and checks that the real kube-scheduler then places
  the preemptor on the victims' GPUs, that the victims are the extender's choice
  (lowest priority, exactly the GPUs needed) and that every other pod survived.
- test_kube_scheduler_preempts_through_extender is the whole flow in
  kube-scheduler (recording /preempt at the proxy): it runs where kube-scheduler
  has the fix and skips, naming the bug, on v1.20.0 - v1.20.9. From v1.22 until
  kubernetes/kubernetes#135486 (2026-09) kube-scheduler's dry run drops a node it
  fits with no victim ("expected at least one victim pod on node") and never calls
  /preempt for a pod that only GPUs keep out (docs/extender.md): this test would
  fail there, as GPU preemption does.

API-only nodes (two with 4 GPUs, ten CPU-only); one cluster for the module (~30 s)."""
import json
import threading
import time

import pytest
import requests

import kcluster
import scale

NS = "default"


def affected(version):
    """kube-scheduler versions that never call an extender's preempt verb."""
    major, minor, patch = (int(x) for x in version.lstrip("v").split(".")[:3])
    return (major, minor) == (1, 20) and patch < 10


def no_default_preemption(cfg):
    for prof in cfg["profiles"]:
        prof.setdefault("plugins", {})["postFilter"] = {
            "disabled": [{"name": "DefaultPreemption"}]}


@pytest.fixture(scope="module")
def prio(host_clean):
    with scale.api_only_cluster(host_clean) as c:
        if affected(kcluster.K8S_VERSION):
            # what a 1.20.0 - 1.20.9 cluster must do to keep kube-scheduler alive
            c.restart_scheduler(no_default_preemption)
        c.add_api_nodes(10, gpus=0, prefix="cpu")
        c.add_api_nodes(2, gpus=4, prefix="gpu")
        c.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": name}, "value": value}
                 for name, value in (("e2e-low", 100), ("e2e-mid", 500), ("e2e-high", 1000))])
        # every /preempt answer the extender gives, as kube-scheduler receives it
        answers = []
        lock = threading.Lock()
        forward = c.proxy.forward

        def recording(path, body):
            status, data = forward(path, body)
            if path.rsplit("/", 1)[-1] == "preempt":
                with lock:
                    answers.append((time.time(), status, json.loads(body), json.loads(data)))
            return status, data
        c.proxy.forward = recording
        c.preempt_answers = answers
        yield c


def fill(c, grace=0):
    """gpu-0 and gpu-1 full: six low (100) and two mid (500) whole-GPU pods; a
    deleted one terminates for `grace` seconds (no kubelet ends it sooner)."""
    objs = [scale.pod(f"low-{i}", scale.WHOLE1, priority_class="e2e-low") for i in range(6)]
    objs += [scale.pod(f"mid-{i}", scale.WHOLE1, priority_class="e2e-mid") for i in range(2)]
    for o in objs:
        o["spec"]["terminationGracePeriodSeconds"] = grace
    scale.create_pods(c, objs)
    c.wait(lambda: len(scale.pods_by_name(c, NS)) == 8 and
           all(p["spec"].get("nodeName") for p in scale.pods_by_name(c, NS).values()),
           60, "8 low/mid pods bound")
    return scale.pods_by_name(c, NS)


def pick_node(chosen, prio_of):
    """kube-scheduler's pickOneNodeForPreemption without PDBs: the lowest highest
    victim priority, then the lowest sum, then the fewest victims."""
    def key(node):
        ps = [prio_of[v] for v in chosen[node]]
        return (max(ps), sum(ps), len(ps), node)
    return min(chosen, key=key)


def check_outcome(c, before, victims, node, high):
    after = scale.pods_by_name(c, NS)
    gone = set(before) - set(after)
    assert gone == victims, (f"pods deleted {sorted(gone)}, the extender chose "
                             f"{sorted(victims)} on {node}")
    assert len(victims) == 2, f"two GPUs needed, victims {victims}"
    assert all(before[v]["spec"]["nodeName"] == node for v in victims)
    # lowest priority first: two low pods of one node, never a mid
    assert all(v.startswith("low-") for v in victims), victims
    freed = set()
    for v in victims:
        freed |= set(before[v]["metadata"]["annotations"][scale.PREFIX + "gpu-uuids"]
                     .split(","))
    got = set(high["metadata"]["annotations"][scale.PREFIX + "gpu-uuids"].split(","))
    assert high["spec"]["nodeName"] == node
    assert got == freed, f"high got {got}, the victims held {freed}"
    scale.check_assignments(after, scale.inventories(c, "gpu"))


def bound(c, name):
    p = c.pod(NS, name)
    return p if p and p["spec"].get("nodeName") else None


def test_extender_victims_placed_by_kube_scheduler(prio):
    c = prio
    before = fill(c)
    name_of = {p["metadata"]["uid"]: n for n, p in before.items()}
    prio_of = {n: p["spec"]["priority"] for n, p in before.items()}
    try:
        scale.create_pods(c, [scale.pod("high", scale.WHOLE2, priority_class="e2e-high")])
        c.wait(lambda: "high" in scale.failed_scheduling(c, NS, {"high"}), 30,
               "the high-priority pod refused while every GPU is taken")
        high = c.pod(NS, "high")
        assert high["spec"]["priority"] == 1000
        nodes = [n["metadata"]["name"] for n in c.api("GET", "/api/v1/nodes").json()["items"]]
        args = {"Pod": high, "NodeNameToMetaVictims": {
            n: {"Pods": [], "NumPDBViolations": 0} for n in nodes}}
        r = requests.post(c.proxy.url + "/preempt", json=args, timeout=10)
        assert r.status_code == 200, r.text
        chosen = {n: {name_of[v["UID"]] for v in vs["Pods"]}
                  for n, vs in r.json()["NodeNameToMetaVictims"].items()}
        assert chosen and set(chosen) <= {"gpu-0", "gpu-1"}, chosen
        node = pick_node(chosen, prio_of)
        victims = chosen[node]
        for v in victims:   # as kube-scheduler's PrepareCandidate does
            d = c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{v}", body={})
            assert d.status_code in (200, 202), d.text
        p = c.api("PATCH", f"/api/v1/namespaces/{NS}/pods/high/status",
                  body={"status": {"nominatedNodeName": node}},
                  content_type="application/merge-patch+json")
        assert p.status_code == 200, p.text
        high = c.wait(lambda: bound(c, "high"), 30, "the preemptor bound", interval=0.2)
        check_outcome(c, before, victims, node, high)
        print(f"preemption: extender chose {sorted(victims)} on {node} "
              f"(offered {sorted((n, sorted(v)) for n, v in chosen.items())})")
    finally:
        c.force_delete_all(NS, "e2e=1")


def test_kube_scheduler_preempts_through_extender(prio):
    if affected(kcluster.K8S_VERSION):
        pytest.skip(f"kube-scheduler {kcluster.K8S_VERSION} never calls an extender's preempt "
                    f"verb and dies on GPU preemption (kubernetes/kubernetes#102971, fixed in "
                    f"v1.20.10)")
    c = prio
    before = fill(c)
    name_of = {p["metadata"]["uid"]: n for n, p in before.items()}
    try:
        scale.create_pods(c, [scale.pod("high", scale.WHOLE2, priority_class="e2e-high")])
        high = c.wait(lambda: bound(c, "high"), 90, "the high-priority pod bound", interval=0.3)
        node = high["spec"]["nodeName"]
        answers = [a for a in c.preempt_answers if a[1] == 200]
        assert answers, "kube-scheduler never called the extender's /preempt"
        _, _, req, ans = answers[-1]   # the answer kube-scheduler acted on
        assert req["Pod"]["metadata"]["name"] == "high", req["Pod"]["metadata"]
        chosen = ans["NodeNameToMetaVictims"]
        assert node in chosen, f"bound to {node}, extender offered {list(chosen)}"
        victims = {name_of.get(v["UID"], v["UID"]) for v in chosen[node]["Pods"]}
        check_outcome(c, before, victims, node, high)
    finally:
        c.force_delete_all(NS, "e2e=1")


def test_gpus_won_by_a_preemption_are_kept_for_the_preemptor(prio):
    """After a preemption kube-scheduler nominates the preemptor to the victims' node
    and keeps lower-priority pods off the CPU it needs there, not off its GPUs
    (ignoredByScheduler). A lower-priority GPU pod created while the victim still
    terminates must not take the GPUs the preemptor waits for: the extender refuses
    the node to it, and once the victim is gone the real kube-scheduler binds the
    preemptor there while the late pod keeps waiting."""
    c = prio
    try:
        scale.create_pods(c, [scale.pod("full", {"nvidia.com/gpu": "4"},
                                        priority_class="e2e-mid")])
        full = c.wait(lambda: bound(c, "full"), 30, "the 4-GPU pod bound")
        node = ({"gpu-0", "gpu-1"} - {full["spec"]["nodeName"]}).pop()
        victim = scale.pod("victim", scale.WHOLE2, priority_class="e2e-low")
        victim["spec"]["terminationGracePeriodSeconds"] = 3600  # terminates while we look
        scale.create_pods(c, [victim])
        victim = c.wait(lambda: bound(c, "victim"), 30, "the victim bound")
        assert victim["spec"]["nodeName"] == node
        scale.create_pods(c, [scale.pod("high", {"nvidia.com/gpu": "4"},
                                        priority_class="e2e-high")])
        c.wait(lambda: "high" in scale.failed_scheduling(c, NS, {"high"}), 30,
               "the high-priority pod refused while GPUs are taken")
        # what kube-scheduler's preemption does: delete the victim (with no
        # kubelet it stays terminating), nominate the preemptor to its node
        d = c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/victim", body={})
        assert d.status_code in (200, 202), d.text
        assert c.pod(NS, "victim")["metadata"].get("deletionTimestamp")
        p = c.api("PATCH", f"/api/v1/namespaces/{NS}/pods/high/status",
                  body={"status": {"nominatedNodeName": node}},
                  content_type="application/merge-patch+json")
        assert p.status_code == 200, p.text
        scale.create_pods(c, [scale.pod("late", scale.WHOLE2, priority_class="e2e-low")])
        msgs = c.wait(lambda: [m for m in scale.failed_scheduling(c, NS, {"late"}).get("late", [])
                               if "nominated" in m], 30,
                      "the late pod refused the GPUs kept for the preemptor")
        assert "default/high" in msgs[0], msgs
        assert not bound(c, "late"), "the late pod took the preemptor's GPUs"
        # the victim's containers stop: the real kube-scheduler places the preemptor
        d = c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/victim",
                  params={"gracePeriodSeconds": "0"})
        assert d.status_code in (200, 202), d.text
        high = c.wait(lambda: bound(c, "high"), 60, "the preemptor bound", interval=0.2)
        assert high["spec"]["nodeName"] == node
        assert len(high["metadata"]["annotations"][scale.PREFIX + "gpu-uuids"].split(",")) == 4
        assert not bound(c, "late")
        scale.check_assignments(scale.pods_by_name(c, NS), scale.inventories(c, "gpu"))
    finally:
        c.force_delete_all(NS, "e2e=1")
