"""The admission webhook called by the real kube-apiserver (registered with its
caBundle from deploy/webhook.yaml's configurations): an impossible pod refused at
create time naming container and field, a pod over a GPUQuota refused, a GPU pod
without schedulerName given gpu-scheduler, and a GPU share in an init container
refused because the nodes run kubelet 1.20 (learned from their nodeInfo), a GPU
assignment written by anyone but the extender refused on create and on update, and
one copied onto a pod created without a node removed with a warning, and no update
of a CPU-only pod sent to it."""
import os
import signal
import time

import pytest

from conftest import NS, READY, gpu_pod

QNS = "e2e-quota"


def create(cluster, obj):
    ns = obj["metadata"]["namespace"]
    return cluster.api("POST", f"/api/v1/namespaces/{ns}/pods", body=obj)


def test_impossible_pod_refused_naming_container_and_field(cluster):
    obj = gpu_pod("impossible", {"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "150"})
    obj["spec"]["containers"][0]["name"] = "train"
    r = create(cluster, obj)
    try:
        assert r.status_code == 400 or r.status_code == 403 or r.status_code == 422, r.text
        msg = r.json().get("message", "")
        assert "validate.gpusched.io" in msg, msg
        assert "containers[0].limits[nvidia.com/gpu-cores]" in msg, msg
        assert "'train'" in msg, msg
        assert cluster.pod(NS, "impossible") is None
    finally:
        if r.status_code in (200, 201):
            cluster.delete_pods(NS, ["impossible"])


@pytest.fixture
def quota_ns(cluster):
    cluster.kubectl("create", "namespace", QNS)
    cluster.apply({"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                   "metadata": {"name": "small", "namespace": QNS},
                   "spec": {"total": {"gpus": 1}}})
    yield QNS
    cluster.kubectl("delete", "namespace", QNS, "--wait=false")


def test_pod_over_gpuquota_refused(cluster, quota_ns):
    over = gpu_pod("over-quota", {"nvidia.com/gpu": "2"}, ns=quota_ns)

    # the webhook learns the GPUQuota through its watch: wait until it refuses
    def refused():
        r = create(cluster, over)
        if r.status_code in (200, 201):
            cluster.delete_pods(quota_ns, ["over-quota"])
            return None
        return [r]          # a 403 Response is falsy
    r = cluster.wait(refused, 15, "the webhook to refuse a pod over the GPUQuota")[0]
    assert r.status_code == 403, r.text
    msg = r.json().get("message", "")
    assert "validate.gpusched.io" in msg and "small" in msg, msg
    # within the quota it is admitted
    ok = gpu_pod("within-quota", {"nvidia.com/gpu": "1"}, ns=quota_ns)
    r = create(cluster, ok)
    assert r.status_code == 201, r.text
    cluster.delete_pods(quota_ns, ["within-quota"])


def test_gpu_pod_without_scheduler_name_gets_it(cluster):
    obj = gpu_pod("no-sched", {"nvidia.com/gpu": "1"}, scheduler=None)
    obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}  # stay Pending
    r = create(cluster, obj)
    try:
        assert r.status_code == 201, r.text
        p = r.json()
        assert p["spec"]["schedulerName"] == "gpu-scheduler"
        assert p["metadata"]["annotations"]["gpusched.io/request"] == "kind=whole,gpus=1"
        assert p["metadata"]["labels"] == {"e2e": "1", "gpusched.io/gpu-pod": "true"}
        # a pod without a GPU request keeps the default scheduler
        plain = gpu_pod("no-gpu", {"cpu": "10m"}, scheduler=None)
        plain["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
        r2 = create(cluster, plain)
        assert r2.status_code == 201, r2.text
        assert r2.json()["spec"]["schedulerName"] == "default-scheduler"
        assert r2.json()["metadata"]["labels"] == {"e2e": "1"}
    finally:
        cluster.delete_pods(NS, ["no-sched", "no-gpu"])


def test_init_container_share_refused_on_kubelet_1_20(cluster):
    """kubelet 1.20 fails a pod whose init container asks for gpu-cores
    (OutOfnvidia.com/gpu-cores: it drops unadvertised resources for app containers
    only, kubernetes#124255). The webhook reads the nodes' kubelet version and
    refuses such a pod at create time; a whole GPU in the init container is admitted."""
    obj = gpu_pod("init-share", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1Gi"})
    obj["spec"]["initContainers"] = [{
        "name": "warm", "image": obj["spec"]["containers"][0]["image"],
        "imagePullPolicy": "Never", "command": ["true"],
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "20"}}}]
    created = []
    try:
        r = create(cluster, obj)
        if r.status_code in (200, 201):
            created.append("init-share")
        assert r.status_code == 422, r.text  # Invalid, as docs/webhook.md says
        msg = r.json().get("message", "")
        assert "validate.gpusched.io" in msg, msg
        assert "initContainers[0].limits[nvidia.com/gpu-cores]" in msg, msg
        assert "the oldest GPU node runs kubelet 1.20" in msg and "'warm'" in msg, msg
        whole = gpu_pod("init-whole", {"nvidia.com/gpu": "1"})
        whole["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
        whole["spec"]["initContainers"] = [dict(obj["spec"]["initContainers"][0],
                                                resources={"limits": {"nvidia.com/gpu": "1"}})]
        r = create(cluster, whole)
        if r.status_code in (200, 201):
            created.append("init-whole")
        assert r.status_code == 201, r.text
    finally:
        cluster.delete_pods(NS, created)


def test_only_the_extender_writes_assignments(cluster):
    """A user (impersonated: authorised for everything, but not an --assigners user)
    cannot create a pod on a node with a GPU assignment or change a placed pod's,
    while the extender's bind patches pass the same webhook (docs/annotations.md).
    The same assignment copied onto a pod created without a node (a pod's YAML
    replayed, a backup restored) is removed by the mutating webhook, with a warning
    kubectl would print, and the pod is placed afresh."""
    alice = {"Impersonate-User": "alice", "Impersonate-Group": "system:masters"}
    copied = {"gpusched.io/node": "e2e-node-a", "gpusched.io/request-kind": "whole",
              "gpusched.io/gpu-uuids": "GPU-0", "gpusched.io/gpu-indices": "0",
              "gpusched.io/gpu-memory": "1", "gpusched.io/gpu-milli": "1000",
              "gpusched.io/assigned-at": "2026-11-24T10:00:00.000000000Z"}
    forged = gpu_pod("forged", {"nvidia.com/gpu": "1"}, annotations=copied)
    forged["spec"]["nodeName"] = "e2e-node-a"
    r = cluster.api("POST", f"/api/v1/namespaces/{NS}/pods", body=forged, headers=alice)
    made = ["forged"] if r.status_code in (200, 201) else []
    try:
        assert r.status_code == 403, r.text
        msg = r.json().get("message", "")
        assert "validate.gpusched.io" in msg and "user 'alice' may not set it" in msg, msg
        replayed = gpu_pod("replayed", {"nvidia.com/gpu": "1"},
                           annotations=dict(copied, note="kept"))
        r = cluster.api("POST", f"/api/v1/namespaces/{NS}/pods", body=replayed, headers=alice)
        if r.status_code in (200, 201):
            made.append("replayed")
        assert r.status_code == 201, r.text
        warning = r.headers.get("Warning", "")
        assert "GPU assignment removed (gpusched.io/" in warning and "and 6 more)" in warning \
            and "the extender writes it at bind" in warning, r.headers
        ann = r.json()["metadata"]["annotations"]
        assert ann["note"] == "kept" and not set(copied) & set(ann), ann
        got = cluster.wait(lambda: cluster.pod(NS, "replayed")["metadata"].get(
            "annotations", {}).get("gpusched.io/gpu-uuids"), 60, "replayed pod placed")
        assert got.startswith("GPU-") and got != "GPU-0", got
        honest = gpu_pod("honest", {"nvidia.com/gpu": "1"})
        made.append("honest")
        cluster.apply(honest)
        uuids = cluster.wait(lambda: cluster.pod(NS, "honest")["metadata"].get(
            "annotations", {}).get("gpusched.io/gpu-uuids"), 60, "honest pod placed")
        path = f"/api/v1/namespaces/{NS}/pods/honest"

        def patch(annotations):
            return cluster.api("PATCH", path, body={"metadata": {"annotations": annotations}},
                               content_type="application/merge-patch+json", headers=alice)
        r = patch({"gpusched.io/gpu-uuids": uuids + ",GPU-other"})
        assert r.status_code == 403 and "may not change it" in r.json().get("message", ""), r.text
        r = patch({"note": "mine"})  # other annotations stay the user's
        assert r.status_code == 200, r.text
        ann = cluster.pod(NS, "honest")["metadata"]["annotations"]
        assert ann["gpusched.io/gpu-uuids"] == uuids and ann["note"] == "mine"
    finally:
        cluster.delete_pods(NS, made)


def test_a_webhook_outage_stops_no_update_of_a_cpu_only_pod(cluster):
    """deploy/webhook.yaml sends pod UPDATEs to the webhook for GPU pods only: /mutate
    labels them gpusched.io/gpu-pod and the update rule selects that label. With the
    webhook stopped (SIGSTOP: every call times out), the real apiserver changes a
    CPU-only pod at once, while a change to a GPU pod fails closed (failurePolicy Fail,
    its assignment stays guarded) until the webhook is back; the label cannot be
    removed to escape the rule."""
    names = ["outage-gpu", "outage-cpu"]
    for name, limits, sched in ((names[0], {"nvidia.com/gpu": "1"}, "gpu-scheduler"),
                                (names[1], {"cpu": "10m"}, None)):
        r = create(cluster, gpu_pod(name, limits, node="no-such-node", scheduler=sched))
        assert r.status_code == 201, r.text
    alice = {"Impersonate-User": "alice", "Impersonate-Group": "system:masters"}
    # docs/webhook.md's listing of the pods to label after an upgrade
    listed = cluster.kubectl("get", "pods", "-n", NS, "-o", "jsonpath={range .items[?(@.metadata."
                             "annotations.gpusched\\.io/request)]}{.metadata.namespace} "
                             "{.metadata.name}{\"\\n\"}{end}").stdout.splitlines()
    assert f"{NS} {names[0]}" in listed and not any(names[1] in x for x in listed), listed

    def patch(name, labels, headers=None):
        t0 = time.monotonic()
        r = cluster.api("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}",
                        body={"metadata": {"labels": labels}},
                        content_type="application/merge-patch+json", headers=headers)
        return r, time.monotonic() - t0
    try:
        r, _ = patch(names[0], {"gpusched.io/gpu-pod": None}, alice)
        assert r.status_code == 403, r.text
        msg = r.json().get("message", "")
        assert "assignments.gpusched.io" in msg and "may not remove it" in msg, msg
        os.killpg(cluster.webhook.pid, signal.SIGSTOP)
        try:
            r, took = patch(names[1], {"step": "during-outage"})
            assert r.status_code == 200, r.text
            assert took < 3, took  # the webhook's timeout is 5 s: it was never called
            r, took = patch(names[0], {"step": "during-outage"})
            assert r.status_code >= 500, r.text
            assert "assignments.gpusched.io" in r.json().get("message", ""), r.text
        finally:
            os.killpg(cluster.webhook.pid, signal.SIGCONT)

        def updated():
            return patch(names[0], {"step": "after"})[0].status_code == 200
        cluster.wait(updated, 30, "the GPU pod updated once the webhook is back")
        assert cluster.pod(NS, names[0])["metadata"]["labels"]["step"] == "after"
    finally:
        cluster.delete_pods(NS, names)


def test_a_pod_carrying_nul_is_admitted_scheduled_and_watched(cluster):
    """Kubernetes stores a NUL in an annotation value and sends it as \\u0000. A pod
    carrying one passes the webhook (under failurePolicy Fail a body it could not
    read would refuse the pod), a GPU pod carrying one is placed (kube-scheduler sends
    it to /filter and /bind), and neither breaks the extenders' pod watch, which
    would otherwise re-open on the same event, again and again, and see no pod
    change after it."""
    names = ["nul-cpu", "nul-gpu"]

    def restarts():
        return sum(cluster.extender_metric(i, "gpusched_extender_watch_restarts_total",
                                           {"resource": "pods"})
                   for i in range(cluster.extender_replicas))
    before = restarts()
    try:
        cpu = gpu_pod(names[0], {"cpu": "10m"}, node="no-such-node", scheduler=None,
                      annotations={"note": "a\u0000b"})
        r = create(cluster, cpu)
        assert r.status_code == 201, r.text
        assert cluster.pod(NS, names[0])["metadata"]["annotations"]["note"] == "a\u0000b"
        r = create(cluster, gpu_pod(names[1], {"nvidia.com/gpu": "1"},
                                    annotations={"note": "c\u0000d"}))
        assert r.status_code == 201, r.text
        p = cluster.wait_pods(NS, [names[1]], ready_log=READY)[names[1]]
        assert p["metadata"]["annotations"].get("gpusched.io/gpu-uuids"), p["metadata"]
        time.sleep(2)  # a watch that choked on the events would have re-opened by now
        assert restarts() == before
    finally:
        cluster.delete_pods(NS, names)
