"""Preemption from /filter (filter_preemption), with the real kube-scheduler.

kube-scheduler 1.22+ (until kubernetes/kubernetes#135486) never asks an extender's
/preempt when GPUs alone keep a pod out, and 1.20.0 - 1.20.9 never asks it either
(and die on a GPU preemption unless DefaultPreemption is disabled:
test_preemption.py). Both amount to a kube-scheduler that does not preempt for GPU
pods, which is what runs here: DefaultPreemption disabled in its profile. With
filter_preemption on, the extender preempts itself when a /filter finds no node:

- the victims are the lowest-priority GPU pods whose removal lets the pod fit, on
  the node kube-scheduler's own rule would pick (lowest highest victim priority),
  deleted through the real API server with their UID as a precondition, each with
  a Preempted event;
- the preemptor is nominated to the node (status.nominatedNodeName, which the real
  API server takes as a pods/status patch);
- while the victims terminate (API-only nodes have no kubelet, so they stay
  terminating until deleted with grace 0) kube-scheduler retries the pod and
  nothing more is preempted;
- once they are gone, the real kube-scheduler binds the preemptor there, on the
  victims' GPUs, and every other pod survives.

API-only nodes (two with 4 GPUs); one cluster for the module (~30 s)."""
import time

import pytest

import scale
from test_preemption import check_outcome, bound, fill, no_default_preemption

NS = "default"


@pytest.fixture(scope="module")
def fprio(host_clean):
    with scale.api_only_cluster(host_clean,
                                extender_config={"filter_preemption": True}) as c:
        # a kube-scheduler that never preempts for GPU pods (1.22+ as 1.20.2 here)
        c.restart_scheduler(no_default_preemption)
        c.add_api_nodes(2, gpus=4, prefix="gpu")
        c.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": name}, "value": value}
                 for name, value in (("e2e-low", 100), ("e2e-mid", 500), ("e2e-high", 1000))])
        yield c


def terminating(c):
    return {n for n, p in scale.pods_by_name(c, NS).items()
            if p["metadata"].get("deletionTimestamp")}


def test_the_extender_preempts_for_a_gpu_pod_from_filter(fprio):
    c = fprio
    before = fill(c, grace=3600)
    try:
        scale.create_pods(c, [scale.pod("high", scale.WHOLE2, priority_class="e2e-high")])
        victims = c.wait(lambda: (lambda t: t if len(t) >= 2 else None)(terminating(c)), 30,
                         "the extender deleted the victims", proc=c.extenders[0])
        node = before[sorted(victims)[0]]["spec"]["nodeName"]
        high = c.wait(lambda: (lambda p: p if p["status"].get("nominatedNodeName") else None)(
            c.pod(NS, "high")), 10, "high nominated")
        assert high["status"]["nominatedNodeName"] == node, high["status"]
        for v in victims:
            msgs = [e["message"] for e in c.events(NS, v) if e["reason"] == "Preempted"]
            assert msgs == [f"Preempted by {NS}/high on node {node}"], (v, msgs)
        # kube-scheduler tries high again while the victims terminate (each
        # change to a pending pod requeues it, as the extender's nudge does):
        # nothing more is preempted
        no_fit = {"verb": "filter", "result": "no_fit"}
        tries = c.extender_metric(0, "gpusched_extender_decisions_total", no_fit)
        for i in range(3):
            c.api("PATCH", f"/api/v1/namespaces/{NS}/pods/high",
                  body={"metadata": {"annotations": {"e2e-retry": str(i)}}},
                  content_type="application/merge-patch+json").raise_for_status()
            time.sleep(1.5)
        more = c.extender_metric(0, "gpusched_extender_decisions_total", no_fit) - tries
        assert more >= 2, f"kube-scheduler asked /filter for high {more} more times"
        assert terminating(c) == victims
        assert len(scale.pods_by_name(c, NS)) == 9
        assert c.extender_metric(0, "gpusched_extender_decisions_total",
                                 {"verb": "preempt", "result": "from_filter"}) == 1
        print(f"filter preemption: {sorted(victims)} on {node}; {more:.0f} more /filter "
              f"refusals of high while they terminate")
        # the victims' containers stop (what their kubelet would report)
        for v in victims:
            d = c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{v}",
                      params={"gracePeriodSeconds": "0"})
            assert d.status_code in (200, 202), d.text
        high = c.wait(lambda: bound(c, "high"), 60, "the preemptor bound", interval=0.2)
        check_outcome(c, before, victims, node, high)
    finally:
        c.force_delete_all(NS, "e2e=1")


def test_filter_preemption_spares_pods_a_disruption_budget_protects(fprio):
    """A PodDisruptionBudget (policy/v1beta1 on this 1.20 API server: the extender
    finds policy/v1 missing) keeps the extender off the pods it protects, as
    kube-scheduler's own preemption: the node with fewer violations wins even
    though its victims rank higher.

    gpu-0 holds four low pods (100) the budget protects, gpu-1 two low pods and
    two mid (500). A pod of three GPUs would take three of gpu-0's low pods
    without the budget (the lowest highest victim priority); with it, both low
    pods of gpu-1 and one mid."""
    c = fprio
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "db", "namespace": NS},
           "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "db"}}}}
    base = f"/apis/policy/v1beta1/namespaces/{NS}/poddisruptionbudgets"
    r = c.api("POST", base, body=pdb)
    assert r.status_code == 201, r.text
    try:
        # what the disruption controller (not running here) would write
        obj = r.json()
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 4, "desiredHealthy": 4,
                         "expectedPods": 4, "observedGeneration": obj["metadata"]["generation"]}
        r = c.api("PUT", f"{base}/db/status", body=obj)
        assert r.status_code == 200, r.text
        objs = []
        for i in range(6):
            node, app = ("gpu-0", "db") if i < 4 else ("gpu-1", "web")
            o = scale.pod(f"low-{i}", scale.WHOLE1, priority_class="e2e-low",
                          labels={"e2e": "1", "app": app})
            o["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            objs.append(o)
        for i in range(2):
            o = scale.pod(f"mid-{i}", scale.WHOLE1, priority_class="e2e-mid")
            o["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-1"}
            objs.append(o)
        scale.create_pods(c, objs)
        c.wait(lambda: len(scale.pods_by_name(c, NS)) == 8 and
               all(p["spec"].get("nodeName") for p in scale.pods_by_name(c, NS).values()),
               60, "8 low/mid pods bound")
        before = scale.pods_by_name(c, NS)
        assert {n: p["spec"]["nodeName"] for n, p in before.items()} == {
            **{f"low-{i}": "gpu-0" for i in range(4)}, "low-4": "gpu-1", "low-5": "gpu-1",
            "mid-0": "gpu-1", "mid-1": "gpu-1"}
        done = c.extender_metric(0, "gpusched_extender_decisions_total",
                                 {"verb": "preempt", "result": "from_filter"})
        scale.create_pods(c, [scale.pod("high3", {"nvidia.com/gpu": "3"},
                                        priority_class="e2e-high")])
        # the victims have grace 0: they are gone at once, and high3 binds
        high = c.wait(lambda: bound(c, "high3"), 60, "the preemptor bound", interval=0.2,
                      proc=c.extenders[0])
        after = scale.pods_by_name(c, NS)
        gone = set(before) - set(after)
        assert high["spec"]["nodeName"] == "gpu-1", (high["spec"]["nodeName"], sorted(gone))
        assert len(gone) == 3 and {"low-4", "low-5"} < gone, sorted(gone)
        assert all(f"low-{i}" in after for i in range(4)), sorted(gone)
        assert c.extender_metric(0, "gpusched_extender_decisions_total",
                                 {"verb": "preempt", "result": "from_filter"}) == done + 1
        scale.check_assignments(after, scale.inventories(c, "gpu"))
        print(f"filter preemption with a budget: {sorted(gone)} on gpu-1, gpu-0's "
              f"protected pods kept")
    finally:
        c.api("DELETE", f"{base}/db")
        c.force_delete_all(NS, "e2e=1")
