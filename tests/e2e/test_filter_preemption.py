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
