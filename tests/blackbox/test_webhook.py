"""`gpusched webhook`: real AdmissionReview v1 JSON over TLS.

Certificates come from `gpusched webhook gen-certs`; the tests check allowed /
denied / JSONPatch answers, quota refusals from a quota file, bad input,
certificate reload and the start-up errors for missing, mismatched or expired
certificates.
"""
import base64
import copy
import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest
import requests

from conftest import free_port, run
from fake_apiserver import FakeApiServer

QUOTAS = """\
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: team, namespace: ml}
  spec:
    total: {gpus: 4, memory: 40Gi}
    models:
    - {model: H100, gpus: 2}
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: broken, namespace: ml}
  spec: {total: {gpu: 1}}
"""


def gen_certs(bin_, out, *extra):
    r = run(bin_, "webhook", "gen-certs", "--out", str(out), "--ip", "127.0.0.1",
            "--dns", "localhost", *extra)
    assert r.returncode == 0, r.stderr
    return out


class Webhook:
    def __init__(self, bin_, tmp, certs, *extra):
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.certs = certs
        self.log = open(os.path.join(tmp, f"webhook-{self.port}.log"), "w+")
        self.proc = subprocess.Popen(
            [bin_, "webhook", "--listen", f"127.0.0.1:{self.port}",
             "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"), *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if self.get("/healthz").text == "ok\n":
                    return
            except requests.ConnectionError:
                pass
            assert self.proc.poll() is None, self.logs()
            time.sleep(0.05)
        raise AssertionError("webhook did not start: " + self.logs())

    def get(self, path):
        return requests.get(self.url + path, verify=str(self.certs / "ca.crt"), timeout=5)

    def post(self, path, body, **kw):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return requests.post(self.url + path, data=data, verify=str(self.certs / "ca.crt"),
                             headers={"Content-Type": "application/json"}, timeout=5, **kw)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def env(gpusched_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("webhook")
    certs = gen_certs(gpusched_bin, tmp / "certs")
    quotas = tmp / "quotas.yaml"
    quotas.write_text(QUOTAS)
    nodes = tmp / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": [
        {"metadata": {"name": "a", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                              "nvidia.com/gpu.memory": "40960"}},
         "status": {"capacity": {"nvidia.com/gpu": "8"}}},
        {"metadata": {"name": "t", "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                              "nvidia.com/gpu.memory": "15360"}},
         "status": {"capacity": {"nvidia.com/gpu": "4"}}},
    ]}))
    wh = Webhook(gpusched_bin, str(tmp), certs, "--quotas", str(quotas), "--nodes", str(nodes),
                 "--default-policy", "ml=binpack")
    yield {"wh": wh, "tmp": tmp, "quotas": quotas, "certs": certs}
    assert wh.stop() == 0


def review(obj, ns="default", op="CREATE", kind="Pod", group="", uid="uid-1", user=None,
           old=None):
    r = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
         "request": {"uid": uid, "kind": {"group": group, "version": "v1", "kind": kind},
                     "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
                     "operation": op, "namespace": ns, "name": "",
                     "object": obj}}
    if user is not None:
        r["request"]["userInfo"] = {"username": user, "groups": ["system:authenticated"]}
    if old is not None:
        r["request"]["oldObject"] = old
    return r


def pod(limits=None, requests_=None, name="p", annotations=None, scheduler=None, init=None,
        labels=None):
    res = {}
    if limits is not None:
        res["limits"] = limits
    if requests_ is not None:
        res["requests"] = requests_
    spec = {"containers": [{"name": "train", "image": "cuda", "resources": res}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if init:
        spec["initContainers"] = init
    meta = {"name": name}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def answer(r, uid="uid-1"):
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == uid
    return body["response"]


def validate(env, obj, **kw):
    return answer(env["wh"].post("/validate", review(obj, **kw)), kw.get("uid", "uid-1"))


def apply_patch(doc, patch):
    """A small RFC 6902 'add' and 'remove' applier: enough for the webhook's patches."""
    doc = copy.deepcopy(doc)
    for op in patch:
        assert op["op"] in ("add", "remove"), op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if op["op"] == "remove":
            del target[parts[-1]]  # a missing member fails the patch, as in the API server
        elif isinstance(target, list):
            target[int(parts[-1])] = op["value"]  # the webhook only replaces list items
        else:
            target[parts[-1]] = op["value"]
    return doc


def mutate(env, obj, ns="default"):
    resp = answer(env["wh"].post("/mutate", review(obj, ns=ns)))
    assert resp["allowed"] is True
    if "patch" not in resp:
        return obj, []
    assert resp["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(resp["patch"]))
    return apply_patch(obj, patch), patch


# ---- validation ------------------------------------------------------------------

def test_valid_requests_are_allowed(env):
    for limits in ({"nvidia.com/gpu": "2"},
                   {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                    "nvidia.com/gpu-cores": "30"},
                   {"nvidia.com/mig-1g.10gb": "1"},
                   {"cpu": "1"}):
        resp = validate(env, pod(limits))
        assert resp["allowed"] is True, (limits, resp)


def test_a_pod_mutation_missed_is_refused(env):
    """/mutate's failurePolicy is Ignore: a tkestack container that reaches
    validation was not rewritten, and kubelet would start it without a GPU. It is
    refused naming the field and the remedy; rewritten by /mutate, it passes."""
    obj = pod({"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "8"})
    resp = validate(env, obj)
    assert resp["allowed"] is False and resp["status"]["code"] == 422, resp
    msg = resp["status"]["message"]
    assert msg.startswith("containers[0].limits[nvidia.com/vcuda-core]: not rewritten as "
                          "nvidia.com/gpu, so kubelet would start the container without a GPU: "
                          "the mutating webhook (/mutate) did not run on this pod"), msg
    out, _ = mutate(env, obj)
    assert validate(env, out)["allowed"] is True


@pytest.mark.parametrize("limits,want", [
    ({"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "150"},
     "containers[0].limits[nvidia.com/gpu-cores]: '150' is out of range 1..100 (container 'train')"),
    ({"nvidia.com/vcuda-core": "150"},
     "containers[0].limits[nvidia.com/vcuda-core]: '150' must be below 100"),
    ({"nvidia.com/gpu": "-1"}, "limits[nvidia.com/gpu]: '-1' is negative"),
    ({"nvidia.com/gpu": "1x"}, "limits[nvidia.com/gpu]: '1x' has an unknown suffix"),
    ({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"},
     "limits[nvidia.com/gpu]: cannot be combined with MIG instances"),
    ({"nvidia.com/gpu-memory": "4Gi"}, "needs nvidia.com/gpu"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "48Gi"},
     "containers[0].limits[nvidia.com/gpu-memory]: asks for 48Gi per GPU, but the largest GPU "
     "in the cluster (NVIDIA-A100-SXM4-40GB) has 40Gi (container 'train')"),
    ({"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "200"},
     "limits[nvidia.com/vcuda-memory]: asks for 50Gi per GPU"),
    ({"nvidia.com/gpu": "9"}, "the pod asks for 9 GPUs on one node, but the largest node has 8"),
])
def test_impossible_requests_are_denied(env, limits, want):
    resp = validate(env, pod(limits))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert want in resp["status"]["message"]


def test_requests_must_match_limits(env):
    resp = validate(env, pod({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}))
    assert resp["allowed"] is False
    assert "requests[nvidia.com/gpu]: '1' differs from limits '2'" in resp["status"]["message"]
    resp = validate(env, pod(None, {"nvidia.com/gpu": "1"}))
    assert resp["allowed"] is False
    assert "requests[nvidia.com/gpu]: set without limits" in resp["status"]["message"]


def test_quota_refuses_a_request_that_alone_exceeds_it(env):
    # ns ml: 4 whole GPUs and 40Gi. Whole GPUs hold all their memory, at least the
    # 15Gi of the T4 (the smallest GPU of the nodes): 2 fit, 3 do not, 5 are over
    # the GPU count first; other namespaces are free
    assert validate(env, pod({"nvidia.com/gpu": "2"}), ns="ml")["allowed"] is True
    resp = validate(env, pod({"nvidia.com/gpu": "3"}), ns="ml")
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert resp["status"]["message"] == (
        "GPUQuota ml/team: GPU memory: the pod asks for 45Gi, 0Mi already in use, limit 40Gi "
        "(whole GPUs count all their memory, and the smallest GPU the pod accepts has 15Gi)")
    resp = validate(env, pod({"nvidia.com/gpu": "5"}), ns="ml")
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert "GPUQuota ml/team: whole GPUs: the pod asks for 5" in resp["status"]["message"]
    assert "limit 4" in resp["status"]["message"]
    assert validate(env, pod({"nvidia.com/gpu": "5"}), ns="other")["allowed"] is True
    # held to A100 (40Gi each): 2 are 80Gi
    resp = validate(env, pod({"nvidia.com/gpu": "2"},
                             annotations={"gpusched.io/gpu-type": "A100"}), ns="ml")
    assert resp["allowed"] is False and "asks for 80Gi" in resp["status"]["message"], resp
    # pinned to H100 (limit 2): 3 refused
    resp = validate(env, pod({"nvidia.com/gpu": "3"},
                             annotations={"gpusched.io/gpu-type": "H100"}), ns="ml")
    assert resp["allowed"] is False
    assert "whole GPUs on H100: the pod asks for 3" in resp["status"]["message"]
    # shared memory against the 40Gi total
    resp = validate(env, pod({"nvidia.com/gpu": "2", "nvidia.com/gpu-memory": "64Gi"}), ns="ml")
    assert resp["allowed"] is False and "GPU memory" in resp["status"]["message"]


def test_broken_quota_in_file_is_ignored_and_counted(env):
    metrics = env["wh"].get("/metrics").text
    assert "gpusched_quota_objects 1\n" in metrics
    assert "gpusched_quota_objects_broken 1\n" in metrics
    assert "GPUQuota 1 ignored: GPUQuota ml/broken: spec.total.gpu: unknown field" in env["wh"].logs()


def test_gpuquota_objects_are_validated(env):
    good = {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
            "metadata": {"name": "q"}, "spec": {"models": [{"model": "T4", "memory": "64Gi"}]}}
    resp = validate(env, good, ns="ml", kind="GPUQuota", group="gpusched.io")
    assert resp["allowed"] is True
    bad = copy.deepcopy(good)
    bad["spec"]["models"][0]["memroy"] = "1Gi"
    resp = validate(env, bad, ns="ml", kind="GPUQuota", group="gpusched.io", op="UPDATE")
    assert resp["allowed"] is False
    assert "spec.models[0].memroy: unknown field" in resp["status"]["message"]


def test_other_kinds_and_operations_pass(env):
    assert validate(env, {"metadata": {"name": "x"}}, kind="ConfigMap")["allowed"] is True
    assert validate(env, None, op="DELETE")["allowed"] is True
    assert validate(env, pod({"nvidia.com/gpu": "99"}), op="UPDATE")["allowed"] is True


EXTENDER_SA = "system:serviceaccount:gpusched:gpusched-extender"
ASSIGNMENT = {"gpusched.io/node": "a", "gpusched.io/request-kind": "whole",
              "gpusched.io/gpu-uuids": "GPU-a-0", "gpusched.io/gpu-indices": "0",
              "gpusched.io/gpu-memory": "40960", "gpusched.io/gpu-milli": "1000",
              "gpusched.io/assigned-at": "2026-11-24T10:00:00.000000000Z"}
GPU_POD = {"gpusched.io/gpu-pod": "true"}  # what /mutate labels a GPU pod with


def test_only_assigners_write_gpu_assignments(env, gpusched_bin):
    """With --assigners, a pod created with an assignment annotation, or an update that
    sets, changes or removes one, is refused (403) unless the user is an assigner:
    nobody else can claim GPUs by writing annotations (docs/annotations.md). A GPU
    pod must carry the label /mutate sets (deploy/'s update rule selects on it),
    and only an assigner may remove it."""
    wh = Webhook(gpusched_bin, str(env["tmp"]), env["certs"], "--assigners",
                 f"{EXTENDER_SA},admin")
    try:
        def check(obj, user, op="CREATE", old=None):
            return answer(wh.post("/validate", review(obj, op=op, user=user, old=old)))
        gpu = {"nvidia.com/gpu": "1"}
        bare = pod(gpu, annotations={"gpusched.io/gpu-type": "A100"}, labels=GPU_POD)
        placed = pod(gpu, annotations=dict(ASSIGNMENT, **{"gpusched.io/gpu-type": "A100"}),
                     labels=GPU_POD)
        r = check(placed, "alice")
        assert r["allowed"] is False and r["status"]["code"] == 403, r
        msg = r["status"]["message"]
        assert "user 'alice' may not set it" in msg and "gpusched.io/" in msg, msg
        assert check(placed, "admin")["allowed"] is True
        assert check(bare, "alice")["allowed"] is True
        # updates: the extender's bind patch passes; anyone else's change does not
        assert check(placed, EXTENDER_SA, "UPDATE", bare)["allowed"] is True
        assert check(placed, "alice", "UPDATE", placed)["allowed"] is True  # unchanged
        moved = copy.deepcopy(placed)
        moved["metadata"]["annotations"]["gpusched.io/gpu-uuids"] = "GPU-a-1"
        r = check(moved, "alice", "UPDATE", placed)
        assert r["allowed"] is False and "gpusched.io/gpu-uuids" in r["status"]["message"]
        assert "may not change it" in r["status"]["message"]
        r = check(bare, "alice", "UPDATE", placed)
        assert r["allowed"] is False and "may not remove it" in r["status"]["message"], r
        tagged = copy.deepcopy(placed)
        tagged["metadata"]["annotations"]["gpusched.io/retry-at"] = "x"
        assert check(tagged, "alice", "UPDATE", placed)["allowed"] is True
        assert check(placed, "", "UPDATE", bare)["allowed"] is False  # no user named
        unlabelled = pod(gpu, labels={"app": "x"})
        for user in ("alice", "admin"):
            r = check(unlabelled, user)
            assert r["allowed"] is False and r["status"]["code"] == 422, r
            assert r["status"]["message"].startswith(
                "metadata.labels[gpusched.io/gpu-pod]: missing, so no update of this GPU pod "
                "would be checked (webhook --assigners): the mutating webhook (/mutate) did "
                "not run on this pod"), r
        # a request annotation written by the pod's author does not pass for /mutate's work
        posing = pod(gpu, labels={"app": "x"},
                     annotations={"gpusched.io/request": "kind=whole,gpus=1"})
        r = check(posing, "alice")
        assert r["allowed"] is False and r["status"]["code"] == 422, r
        assert "metadata.labels[gpusched.io/gpu-pod]: missing" in r["status"]["message"], r
        r = check(unlabelled, "alice", "UPDATE", bare)
        assert r["allowed"] is False and r["status"]["code"] == 403, r
        assert "metadata.labels[gpusched.io/gpu-pod]" in r["status"]["message"], r
        assert "user 'alice' may not remove it" in r["status"]["message"], r
        assert check(unlabelled, EXTENDER_SA, "UPDATE", bare)["allowed"] is True
        for limits in ({"cpu": "1"}, {"nvidia.com/gpu": "0"}):  # no GPU: no label needed
            cpu = pod(limits)
            assert check(cpu, "alice")["allowed"] is True, limits
            assert check(cpu, "alice", "UPDATE", pod(limits, labels=GPU_POD))["allowed"]
    finally:
        assert wh.stop() == 0
    # without --assigners (the module's webhook) anyone may
    assert validate(env, placed, user="alice")["allowed"] is True


def test_renamed_resources_and_annotations(env, gpusched_bin, tmp_path):
    """--resource-prefix and --annotation-prefix (the device plugin's flags, the extender's
    resource names and annotation_prefix): the webhook checks, routes and guards the names
    the cluster uses, and the default names are nobody's GPUs there."""
    wh = Webhook(gpusched_bin, str(env["tmp"]), env["certs"], "--resource-prefix",
                 "example.com/", "--annotation-prefix", "sched.example.com/", "--assigners",
                 "admin")
    try:
        def call(path, obj, **kw):
            return answer(wh.post(path, review(obj, **kw)))
        r = call("/validate", pod({"example.com/gpu": "1", "example.com/gpu-cores": "150"}))
        assert r["allowed"] is False, r
        assert ("containers[0].limits[example.com/gpu-cores]: '150' is out of range 1..100"
                in r["status"]["message"]), r
        assert call("/validate", pod({"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "150"}))[
            "allowed"] is True
        r = call("/mutate", pod({"example.com/gpu": "1", "example.com/gpu-memory": "2Gi"}))
        out = apply_patch(pod({"example.com/gpu": "1", "example.com/gpu-memory": "2Gi"}),
                          json.loads(base64.b64decode(r["patch"])))
        assert out["spec"]["schedulerName"] == "gpu-scheduler"
        assert out["metadata"]["annotations"]["sched.example.com/request"] == \
            "kind=shared,gpus=1,memory-mib=2048,milli=0", out
        assert "patch" not in call("/mutate", pod({"nvidia.com/gpu": "1"}))
        renamed = {k.replace("gpusched.io/", "sched.example.com/"): v
                   for k, v in ASSIGNMENT.items()}
        label = {"sched.example.com/gpu-pod": "true"}
        assert out["metadata"]["labels"] == label, out
        placed = pod({"example.com/gpu": "1"}, annotations=renamed, labels=label)
        r = call("/validate", placed, user="alice")
        assert r["allowed"] is False and r["status"]["code"] == 403, r
        assert "sched.example.com/" in r["status"]["message"], r
        assert call("/validate", placed, user="admin")["allowed"] is True
        # the default annotations are not the assignment here
        assert call("/validate", pod({"example.com/gpu": "1"}, annotations=ASSIGNMENT,
                                     labels=label), user="alice")["allowed"] is True
        r = call("/validate", pod({"example.com/gpu": "1"}, labels=GPU_POD), user="alice")
        assert "metadata.labels[sched.example.com/gpu-pod]: missing" in r["status"]["message"]
    finally:
        assert wh.stop() == 0
    certs = env["certs"]
    for flag, bad in (("--resource-prefix", "Example.com/"), ("--resource-prefix", "example.com"),
                      ("--annotation-prefix", "-x/"), ("--resource-prefix", "a" * 30 + "/")):
        r = start_fails(gpusched_bin, "--tls-cert", str(certs / "tls.crt"), "--tls-key",
                        str(certs / "tls.key"), flag, bad)
        what = flag[2:].replace("-", " ")
        assert r.returncode == 2 and f"{what} '{bad}': must be a DNS subdomain" in r.stderr, \
            r.stderr


def test_copied_assignment_removed_on_create(env, gpusched_bin):
    """A pod created without a node but with assignment annotations (copied from a
    placed pod: `kubectl get -o yaml` replayed, a backup restored) gets them removed
    by /mutate, with a warning naming them, so /validate then admits it and the
    extender places it afresh; a pod created with spec.nodeName keeps them and is
    refused, an assigner's pod keeps them, and without --assigners nothing is removed."""
    wh = Webhook(gpusched_bin, str(env["tmp"]), env["certs"], "--assigners",
                 f"{EXTENDER_SA},admin", "--scheduler-name", "gpu-scheduler")
    try:
        def call(path, obj, user):
            return answer(wh.post(path, review(obj, user=user)))
        copied = pod({"nvidia.com/gpu": "1"},
                     annotations=dict(ASSIGNMENT, **{"gpusched.io/gpu-type": "A100", "x": "y"}))
        r = call("/mutate", copied, "system:serviceaccount:velero:velero")
        patch = json.loads(base64.b64decode(r["patch"]))
        removed = sorted(op["path"] for op in patch if op["op"] == "remove")
        assert removed == sorted("/metadata/annotations/" + k.replace("/", "~1")
                                 for k in ASSIGNMENT), patch
        out = apply_patch(copied, patch)
        assert out["metadata"]["annotations"] == {
            "gpusched.io/gpu-type": "A100", "x": "y",
            "gpusched.io/request": "kind=whole,gpus=1"}, out
        assert out["spec"]["schedulerName"] == "gpu-scheduler"
        (warning,) = r["warnings"]
        assert warning == ("GPU assignment removed (gpusched.io/node and 6 more): the extender "
                           "writes it at bind; copied from another pod?"), warning
        assert len(warning) <= 120  # API servers may cut warnings past 256 characters
        assert call("/validate", out, "system:serviceaccount:velero:velero")["allowed"] is True
        assert "removed" in wh.logs()

        pinned = copy.deepcopy(copied)
        pinned["spec"]["nodeName"] = "a"
        r = call("/mutate", pinned, "alice")
        assert not any(op["op"] == "remove"
                       for op in json.loads(base64.b64decode(r["patch"]))), r
        assert "warnings" not in r
        assert call("/validate", pinned, "alice")["allowed"] is False
        r = call("/mutate", copied, "admin")
        assert not any(op["op"] == "remove" for op in json.loads(base64.b64decode(r["patch"])))
    finally:
        assert wh.stop() == 0
    out, patch = mutate(env, copied)  # no --assigners: anyone may write them
    assert all(op["op"] == "add" for op in patch) and ASSIGNMENT.items() <= \
        out["metadata"]["annotations"].items()


# ---- mutation ---------------------------------------------------------------------

def test_mutate_sets_scheduler_and_canonical_annotation(env):
    p = pod({"nvidia.com/gpu": "2"}, scheduler="default-scheduler")
    out, patch = mutate(env, p)
    assert out["spec"]["schedulerName"] == "gpu-scheduler"
    assert out["metadata"]["annotations"] == {"gpusched.io/request": "kind=whole,gpus=2"}
    assert out["metadata"]["labels"] == GPU_POD


def test_mutate_keeps_a_chosen_scheduler(env):
    out, _ = mutate(env, pod({"nvidia.com/gpu": "1"}, scheduler="my-scheduler"))
    assert out["spec"]["schedulerName"] == "my-scheduler"


def test_mutate_normalises_tkestack_form(env):
    tke, _ = mutate(env, pod({"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "8"},
                             annotations={"team": "a"}))
    same, _ = mutate(env, pod({"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "2Gi",
                               "nvidia.com/gpu-cores": "50"}))
    want = "kind=shared,gpus=1,memory-mib=2048,milli=500"
    assert tke["metadata"]["annotations"]["gpusched.io/request"] == want
    assert same["metadata"]["annotations"]["gpusched.io/request"] == want
    assert tke["metadata"]["annotations"]["team"] == "a"  # existing annotations kept


def test_mutate_rewrites_tkestack_containers_in_the_native_form(env):
    """kubelet calls the device plugin only for nvidia.com/gpu: a vcuda
    container is rewritten as the same request in the native form (init
    containers: test_init_container_share_refused_unless_every_kubelet_takes_it)."""
    obj = pod({"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "8"},
              requests_={"nvidia.com/vcuda-core": "50", "nvidia.com/vcuda-memory": "8", "cpu": "1"})
    out, patch = mutate(env, obj)
    res = out["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "2048Mi",
                             "nvidia.com/gpu-cores": "50"}
    assert res["requests"] == {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "2048Mi",
                               "nvidia.com/gpu-cores": "50", "cpu": "1"}
    # the same request as before, and a pod the validating webhook admits
    want = "kind=shared,gpus=1,memory-mib=2048,milli=500"
    assert out["metadata"]["annotations"]["gpusched.io/request"] == want
    assert validate(env, out)["allowed"]
    again, patch2 = mutate(env, out)  # nothing left to rewrite
    assert not any("/resources/" in op["path"] for op in patch2)
    whole, _ = mutate(env, pod({"nvidia.com/vcuda-core": "200", "nvidia.com/vcuda-memory": "8"}))
    assert whole["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert whole["metadata"]["annotations"]["gpusched.io/request"] == "kind=whole,gpus=2"


def init_share_pod(form):
    share = ({"nvidia.com/vcuda-core": "20", "nvidia.com/vcuda-memory": "4"} if form == "tke"
             else {"nvidia.com/gpu": "1", "nvidia.com/gpu-cores": "20"})
    return pod({"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1Gi"},
               init=[{"name": "warm", "image": "cuda", "resources": {"limits": share}}])


def test_init_container_share_refused_unless_every_kubelet_takes_it(env, gpusched_bin, tmp_path):
    """kubelets before 1.31 fail a pod whose init container asks for a resource no
    node advertises (gpu-memory, gpu-cores: kubernetes#124255). The webhook refuses
    such a pod unless every node's kubelet is 1.31 or newer, naming the field the
    user wrote (a tkestack one is left unrewritten for that); whole GPUs in init
    containers pass."""
    for form, field in (("native", "limits[nvidia.com/gpu-cores]"),
                        ("tke", "limits[nvidia.com/vcuda-memory]")):
        out, _ = mutate(env, init_share_pod(form))
        assert "nvidia.com/gpu" not in out["spec"]["initContainers"][0]["resources"]["limits"] \
            or form == "native"
        resp = validate(env, out)
        assert not resp["allowed"]
        msg = resp["status"]["message"]
        assert f"initContainers[0].{field}: a GPU share in an init container fails on " \
               "kubelets before 1.31" in msg, msg
        assert "no GPU node's kubelet version is known" in msg and "'warm'" in msg, msg
    whole = pod({"nvidia.com/gpu": "1"}, init=[{"name": "warm", "image": "cuda", "resources": {
        "limits": {"nvidia.com/gpu": "2"}}}])
    assert validate(env, whole)["allowed"]
    certs = env["certs"]
    for version, allowed in (("v1.30.4", False), ("v1.31.0", True)):
        nodes = tmp_path / f"nodes-{version}.json"
        gpus = {"nvidia.com/gpu": "4"}
        nodes.write_text(json.dumps({"kind": "NodeList", "items": [
            {"metadata": {"name": "old"}, "status": {"capacity": gpus,
                                                     "nodeInfo": {"kubeletVersion": version}}},
            {"metadata": {"name": "new"}, "status": {"capacity": gpus,
                                                     "nodeInfo": {"kubeletVersion": "v1.33.1"}}},
            # no GPU: never runs the pod, whatever its kubelet (Windows, a virtual kubelet)
            {"metadata": {"name": "win"}, "status": {"nodeInfo": {"kubeletVersion": "v1.20.2"}}}]}))
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--nodes", str(nodes))
        try:
            e = {"wh": wh}
            out, _ = mutate(e, init_share_pod("tke"))
            resp = validate(e, out)
            assert resp["allowed"] is allowed, resp
            if allowed:  # rewritten in the native form, as app containers are
                assert out["spec"]["initContainers"][0]["resources"]["limits"] == {
                    "nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "1024Mi",
                    "nvidia.com/gpu-cores": "20"}
            else:
                assert "the oldest GPU node runs kubelet 1.30" in resp["status"]["message"]
        finally:
            assert wh.stop() == 0


def test_mutate_applies_namespace_default_policy(env):
    out, _ = mutate(env, pod({"nvidia.com/gpu": "1"}), ns="ml")
    assert out["metadata"]["annotations"]["gpusched.io/policy"] == "binpack"
    out, _ = mutate(env, pod({"nvidia.com/gpu": "1"},
                             annotations={"gpusched.io/policy": "spread"}), ns="ml")
    assert out["metadata"]["annotations"]["gpusched.io/policy"] == "spread"
    out, _ = mutate(env, pod({"nvidia.com/gpu": "1"}), ns="other")
    assert "gpusched.io/policy" not in out["metadata"]["annotations"]


def test_unknown_policy_names_are_refused(gpusched_bin, env):
    # a misspelt policy passed the webhook and then failed every /filter:
    # the pod stayed Pending for good
    certs = env["certs"]
    r = run(gpusched_bin, "webhook", "--default-policy", "ml=binpak", "--listen",
            f"127.0.0.1:{free_port()}", "--tls-cert", str(certs / "tls.crt"), "--tls-key",
            str(certs / "tls.key"), timeout=10)
    assert r.returncode == 2, r.stderr
    assert "--default-policy: 'binpak' is not a known policy (" in r.stderr
    assert "binpack" in r.stderr and "cpufrag" in r.stderr
    resp = validate(env, pod({"nvidia.com/gpu": "1"},
                             annotations={"gpusched.io/policy": "binpak"}))
    assert resp["allowed"] is False
    assert "metadata.annotations[gpusched.io/policy]: 'binpak' is not a known policy" in \
        resp["status"]["message"]


def test_mutate_leaves_cpu_pods_and_broken_pods_alone(env):
    _, patch = mutate(env, pod({"cpu": "1"}))
    assert patch == []
    _, patch = mutate(env, pod({"nvidia.com/gpu-cores": "500"}))
    assert patch == []


# ---- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("body,want", [
    ("not json", "body is not JSON"),
    ("[]", "expected an AdmissionReview object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                 "request": {"uid": "x"}}), "apiVersion: 'admission.k8s.io/v1beta1' is not supported"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}), "is not AdmissionReview"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request: missing"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"kind": {"kind": "Pod"}, "operation": "CREATE"}}), "request.uid"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE"}}),
     "request.object: missing"),
    ("", "empty body"),
])
def test_bad_bodies_get_clear_errors(env, body, want):
    for path in ("/validate", "/mutate"):
        r = env["wh"].post(path, body)
        assert r.status_code == 400, r.text
        assert want in r.json()["error"]


def test_what_any_valid_pod_carries_is_accepted(env):
    """Under failurePolicy Fail a 400 or 413 refuses the pod: strings holding NUL
    (Kubernetes stores them in annotations and env values), a user name of any
    length, and an UPDATE of a pod of over 1 MiB, sent with its old version, are
    read and answered."""
    cpu = pod({"cpu": "1"}, annotations={"note": "a\u0000b"})
    assert validate(env, cpu, user="u" * 5000)["allowed"] is True
    out, patch = mutate(env, pod({"nvidia.com/gpu": "1"}, annotations={"note": "a\u0000b"}))
    assert patch and out["metadata"]["annotations"]["note"] == "a\u0000b"
    gpu = pod({"nvidia.com/gpu": "1"}, annotations={"note": "x" * (1400 << 10)})
    gpu["spec"]["containers"][0]["env"] = [{"name": "A", "value": "\u0000"}]
    r = env["wh"].post("/validate", json.dumps(review(gpu, op="UPDATE", old=gpu)))
    assert r.status_code == 200 and answer(r)["allowed"] is True, r.text[:300]


def test_oversized_and_wrong_method(env):
    r = env["wh"].post("/validate", "x" * (5 << 20))
    assert r.status_code == 413
    assert requests.get(env["wh"].url + "/validate", verify=str(env["certs"] / "ca.crt"),
                        timeout=5).status_code == 405
    assert env["wh"].get("/nope").status_code == 404
    assert env["wh"].get("/healthz").text == "ok\n"  # still serving
    m = env["wh"].get("/metrics").text
    assert 'gpusched_webhook_requests_total{endpoint="validate",result="error"}' in m
    assert 'gpusched_webhook_requests_total{endpoint="mutate",result="patched"}' in m


# ---- reloads --------------------------------------------------------------------------

def recv_http(sock):
    """One HTTP/1.1 answer read off sock: its head and body, as text."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")))
    while len(body) < n:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def served_cert(port):
    return ssl.get_server_certificate(("127.0.0.1", port))


def test_quota_file_reload(gpusched_bin, tmp_path):
    certs = gen_certs(gpusched_bin, tmp_path / "c")
    q = tmp_path / "q.json"
    q.write_text(json.dumps([{"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                              "metadata": {"name": "a", "namespace": "ns"},
                              "spec": {"total": {"gpus": 1}}}]))
    wh = Webhook(gpusched_bin, str(tmp_path), certs, "--quotas", str(q))
    try:
        env = {"wh": wh}
        assert validate(env, pod({"nvidia.com/gpu": "2"}), ns="ns")["allowed"] is False
        q.write_text(json.dumps([{"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                                  "metadata": {"name": "a", "namespace": "ns"},
                                  "spec": {"total": {"gpus": 2}}}]))
        os.utime(q, (time.time() + 5, time.time() + 5))
        deadline = time.time() + 10
        while validate(env, pod({"nvidia.com/gpu": "2"}), ns="ns")["allowed"] is False:
            assert time.time() < deadline, wh.logs()
            time.sleep(0.2)
        # an unreadable new file keeps the quotas in force
        q.write_text("[{")
        os.utime(q, (time.time() + 10, time.time() + 10))
        deadline = time.time() + 10
        while "gpusched_quota_reload_errors_total 1" not in wh.get("/metrics").text:
            assert time.time() < deadline, wh.logs()
            time.sleep(0.2)
        assert validate(env, pod({"nvidia.com/gpu": "3"}), ns="ns")["allowed"] is False
    finally:
        assert wh.stop() == 0


def test_certificate_reload(gpusched_bin, tmp_path):
    live = gen_certs(gpusched_bin, tmp_path / "live")
    wh = Webhook(gpusched_bin, str(tmp_path), live)
    try:
        before = served_cert(wh.port)
        fresh = gen_certs(gpusched_bin, tmp_path / "fresh")
        # a broken pair is refused and the old one kept
        (live / "tls.crt").write_text("garbage")
        deadline = time.time() + 10
        while 'gpusched_webhook_tls_reloads_total{result="error"} 0' in wh.get("/metrics").text:
            assert time.time() < deadline, wh.logs()
            time.sleep(0.2)
        assert served_cert(wh.port) == before
        # a review under way when the Secret turns: headers and half the body sent
        body = json.dumps(review(pod({"nvidia.com/gpu": "1"})))
        ctx = ssl.create_default_context(cafile=str(live / "ca.crt"))
        held = ctx.wrap_socket(socket.create_connection(("127.0.0.1", wh.port)),
                               server_hostname="127.0.0.1")
        held.sendall(f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     f"\r\nContent-Length: {len(body)}\r\n\r\n{body[:20]}".encode())
        # the new pair is picked up; the old CA no longer verifies
        shutil.copy(fresh / "tls.key", live / "tls.key")
        shutil.copy(fresh / "tls.crt", live / "tls.crt")
        deadline = time.time() + 10
        while served_cert(wh.port) == before:
            assert time.time() < deadline, wh.logs()
            time.sleep(0.2)
        # it is answered on its connection, which then closes (the next one
        # gets the new certificate); connections to the new pair stay open
        held.sendall(body[20:].encode())
        answer = recv_http(held)
        held.close()
        assert answer.startswith("HTTP/1.1 200") and '"allowed":true' in answer, answer
        assert "Connection: close" in answer, answer
        r = requests.get(wh.url + "/healthz", verify=str(fresh / "ca.crt"), timeout=5)
        assert "close" not in r.headers.get("Connection", ""), r.headers
        r = requests.get(wh.url + "/healthz", verify=str(fresh / "ca.crt"), timeout=5)
        assert r.text == "ok\n"
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(wh.url + "/healthz", verify=str(live / "ca.crt"), timeout=5)
        assert "TLS certificate reloaded" in wh.logs()
    finally:
        assert wh.stop() == 0


# ---- start-up errors ------------------------------------------------------------------

def expired_pair(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired")])
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now - datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "old.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "old.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return tmp_path / "old.crt", tmp_path / "old.key"


def start_fails(bin_, *args):
    r = run(bin_, "webhook", "--listen", f"127.0.0.1:{free_port()}", *args, timeout=20)
    assert r.returncode != 0
    return r


def test_start_errors(gpusched_bin, tmp_path):
    a = gen_certs(gpusched_bin, tmp_path / "a")
    b = gen_certs(gpusched_bin, tmp_path / "b")
    r = start_fails(gpusched_bin)
    assert r.returncode == 2 and "--tls-cert and --tls-key are required" in r.stderr
    # a number without a unit is bytes: 80 bytes were 0 MiB, which turned the check off
    r = start_fails(gpusched_bin, "--tls-cert", str(a / "tls.crt"), "--tls-key",
                    str(a / "tls.key"), "--max-gpu-memory", "80")
    assert r.returncode == 2 and "'80' is less than 1 MiB" in r.stderr, r.stderr
    r = start_fails(gpusched_bin, "--tls-cert", str(tmp_path / "none.crt"), "--tls-key",
                    str(a / "tls.key"))
    assert "none.crt" in r.stderr
    r = start_fails(gpusched_bin, "--tls-cert", str(a / "tls.crt"), "--tls-key",
                    str(b / "tls.key"))
    assert "not a matching certificate and key" in r.stderr
    r = start_fails(gpusched_bin, "--tls-cert", str(a / "ca-bundle.txt"), "--tls-key",
                    str(a / "tls.key"))
    assert "not a PEM certificate" in r.stderr
    crt, key = expired_pair(tmp_path)
    r = start_fails(gpusched_bin, "--tls-cert", str(crt), "--tls-key", str(key))
    assert "certificate expired at" in r.stderr
    bad = tmp_path / "q.yaml"
    bad.write_text("a: [b\n")
    r = start_fails(gpusched_bin, "--tls-cert", str(a / "tls.crt"), "--tls-key",
                    str(a / "tls.key"), "--quotas", str(bad))
    assert "q.yaml: line 2:" in r.stderr


def test_gen_certs_names_and_errors(gpusched_bin, tmp_path):
    out = gen_certs(gpusched_bin, tmp_path / "c", "--service", "wh", "--namespace", "sys")
    text = (out / "tls.crt").read_text()
    assert text.startswith("-----BEGIN CERTIFICATE-----")
    bundle = (out / "ca-bundle.txt").read_text().strip()
    assert base64.b64decode(bundle).decode() == (out / "ca.crt").read_text()
    assert oct(os.stat(out / "tls.key").st_mode & 0o777) == "0o600"
    r = subprocess.run(["openssl", "x509", "-in", str(out / "tls.crt"), "-noout", "-ext",
                        "subjectAltName"], capture_output=True, text=True)
    if r.returncode == 0:
        for name in ("DNS:wh", "DNS:wh.sys", "DNS:wh.sys.svc", "DNS:wh.sys.svc.cluster.local",
                     "IP Address:127.0.0.1"):
            assert name in r.stdout
    r = run(gpusched_bin, "webhook", "gen-certs", "--out", str(tmp_path / "d"), "--days", "0")
    assert r.returncode == 2 and "--days" in r.stderr
    r = run(gpusched_bin, "webhook", "gen-certs", "--out", str(tmp_path / "d"), "--ip", "nope")
    assert r.returncode == 2 and "'nope' is not an IP address" in r.stderr
    r = run(gpusched_bin, "webhook", "gen-certs")
    assert r.returncode == 2 and "--out DIR is required" in r.stderr
    # --ca: a new serving pair from the same CA (the caBundle stays), no longer
    # valid than the CA; a directory without a CA, or a key of another, is refused
    renewed = gen_certs(gpusched_bin, tmp_path / "renewed", "--service", "wh", "--namespace",
                        "sys", "--ca", str(out), "--days", "3650")
    assert (renewed / "ca-bundle.txt").read_text() == (out / "ca-bundle.txt").read_text()
    assert (renewed / "tls.key").read_text() != (out / "tls.key").read_text()
    r = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.crt"),
                        str(renewed / "tls.crt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", str(renewed / "tls.crt")],
                       capture_output=True, text=True)
    r_ca = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", str(out / "ca.crt")],
                          capture_output=True, text=True)
    assert r.stdout == r_ca.stdout  # cut to the CA's end, not 3650 days
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(out / "tls.crt", bad / "ca.crt")
    shutil.copy(out / "tls.key", bad / "ca.key")
    r = run(gpusched_bin, "webhook", "gen-certs", "--out", str(tmp_path / "e"), "--ca", str(bad))
    assert r.returncode == 2 and "ca.crt: not a CA certificate" in r.stderr, r.stderr
    shutil.copy(out / "ca.crt", bad / "ca.crt")
    r = run(gpusched_bin, "webhook", "gen-certs", "--out", str(tmp_path / "e"), "--ca", str(bad))
    assert r.returncode == 2 and "ca.key is not the key of ca.crt" in r.stderr, r.stderr
    r = run(gpusched_bin, "webhook", "gen-certs", "--out", str(tmp_path / "e"), "--ca",
            str(tmp_path / "none"))
    assert r.returncode == 1 and "none/ca.crt" in r.stderr, r.stderr


def test_quotas_watched_in_a_cluster(gpusched_bin, tmp_path):
    certs = gen_certs(gpusched_bin, tmp_path / "c")
    with FakeApiServer(bookmark_interval=0.5) as api:
        api.create("/apis/gpusched.io/v1/namespaces/ml/gpuquotas",
                   {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                    "metadata": {"name": "q"}, "spec": {"total": {"gpus": 1}}})
        kc = api.write_kubeconfig(tmp_path / "kc")
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc)
        try:
            env = {"wh": wh}
            deadline = time.time() + 10
            while validate(env, pod({"nvidia.com/gpu": "2"}), ns="ml")["allowed"]:
                assert time.time() < deadline, wh.logs()
                time.sleep(0.1)
            resp = validate(env, pod({"nvidia.com/gpu": "2"}), ns="ml")
            assert "GPUQuota ml/q: whole GPUs: the pod asks for 2" in resp["status"]["message"]
            api.update("gpuquotas", "q", "ml", prefix="/apis/gpusched.io/v1",
                       fn=lambda o: o.__setitem__("spec", {"total": {"gpus": 4}}))
            deadline = time.time() + 10
            while not validate(env, pod({"nvidia.com/gpu": "2"}), ns="ml")["allowed"]:
                assert time.time() < deadline, wh.logs()
                time.sleep(0.1)
        finally:
            assert wh.stop() == 0


def test_ready_once_the_nodes_and_quotas_are_listed(gpusched_bin, tmp_path):
    # before the first Node list the oldest kubelet is unknown: a GPU share in
    # an init container would be refused; the Service must not send it there
    certs = gen_certs(gpusched_bin, tmp_path / "c")
    with FakeApiServer(bookmark_interval=0.5) as api:
        api.add_node("a100", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                     "nvidia.com/gpu.memory": "40960"},
                     capacity={"nvidia.com/gpu": "4"})
        api.delay("GET", r"/api/v1/nodes\?(?!.*watch=1)", 3.0)
        kc = api.write_kubeconfig(tmp_path / "kc")
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc)
        try:
            r = wh.get("/readyz")
            assert r.status_code == 503 and "waiting for the first Node list" in r.text
            assert wh.get("/healthz").status_code == 200  # alive all the same
            until(lambda: wh.get("/readyz").status_code == 200, wh, "the Node list")
        finally:
            assert wh.stop() == 0
    # before the first GPUQuota list every pod would be let past its quota
    with FakeApiServer(bookmark_interval=0.5) as api:
        api.create("/apis/gpusched.io/v1/namespaces/ml/gpuquotas",
                   {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                    "metadata": {"name": "q"}, "spec": {"total": {"gpus": 1}}})
        api.delay("GET", r"/apis/gpusched.io/v1/gpuquotas\?limit=(?!1\b)", 3.0)
        kc = api.write_kubeconfig(tmp_path / "kc")
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc)
        try:
            until(lambda: "waiting for the first GPUQuota list" in wh.get("/readyz").text, wh,
                  "the Node list, while the GPUQuota list is held")
            until(lambda: wh.get("/readyz").status_code == 200, wh, "the GPUQuota list")
            resp = validate({"wh": wh}, pod({"nvidia.com/gpu": "2"}), ns="ml")
            assert not resp["allowed"] and "GPUQuota ml/q" in resp["status"]["message"]
        finally:
            assert wh.stop() == 0
        # the CRD not installed: no quotas to wait for
        api.fail("GET", r"/apis/gpusched.io/v1/gpuquotas", 404, times=1)
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc)
        try:
            until(lambda: wh.get("/readyz").status_code == 200, wh, "ready without the CRD")
        finally:
            assert wh.stop() == 0
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": []}))
    wh = Webhook(gpusched_bin, str(tmp_path), certs, "--nodes", str(nodes))
    try:
        assert wh.get("/readyz").status_code == 200  # nothing to wait for
    finally:
        assert wh.stop() == 0


def until(pred, wh, what, timeout=10):
    deadline = time.time() + timeout
    while not pred():
        assert time.time() < deadline, "timed out waiting for %s\n%s" % (what, wh.logs())
        time.sleep(0.1)


def test_largest_gpu_learned_from_the_cluster_nodes(gpusched_bin, tmp_path):
    """With an API server the webhook follows the Nodes: the largest GPU and
    node rise when a bigger node joins and stay when it leaves (a node pool
    scaled to zero comes back for the pods that ask for it: refused, they never
    reach the cluster autoscaler); a flag fixes its value whatever the nodes
    say. The models whole GPUs count against a memory quota follow the nodes."""
    certs = gen_certs(gpusched_bin, tmp_path / "c")
    shared48 = pod({"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "48Gi"})
    whole6 = pod({"nvidia.com/gpu": "6"})
    h100x2 = pod({"nvidia.com/gpu": "2"}, annotations={"gpusched.io/gpu-type": "H100"})

    with FakeApiServer(bookmark_interval=0.5) as api:
        api.add_node("a100", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                     "nvidia.com/gpu.memory": "40960"},
                     capacity={"nvidia.com/gpu": "4"})
        api.add_node("broken", annotations={"gpusched.io/gpu-inventory": "{not json"})
        kc = api.write_kubeconfig(tmp_path / "kc")
        api.create("/apis/gpusched.io/v1/namespaces/ml/gpuquotas",
                   {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                    "metadata": {"name": "m", "namespace": "ml"},
                    "spec": {"total": {"memory": "100Gi"}}})
        wh = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc)
        fixed = Webhook(gpusched_bin, str(tmp_path), certs, "--kubeconfig", kc,
                        "--max-gpus-per-node", "8")
        try:
            env, envf = {"wh": wh}, {"wh": fixed}
            until(lambda: not validate(env, shared48)["allowed"], wh, "the A100 node")
            msg = validate(env, shared48)["status"]["message"]
            assert "asks for 48Gi per GPU, but the largest GPU in the cluster " \
                   "(NVIDIA-A100-SXM4-40GB) has 40Gi" in msg, msg
            assert not validate(env, whole6)["allowed"]          # 4 GPUs per node
            # the flag fixed 8 GPUs per node on the other webhook; memory is still learned
            until(lambda: not validate(envf, shared48)["allowed"], fixed, "the A100 node")
            assert validate(envf, whole6)["allowed"]
            assert "node broken:" in wh.logs() and "counted without GPUs" in wh.logs()
            # an H100 node with 8 GPUs joins: both limits rise, no restart
            api.add_node("h100", annotations={"gpusched.io/gpu-inventory": json.dumps({
                "version": 1, "gpus": [{"index": i, "uuid": "GPU-h-%d" % i,
                                        "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
                                       for i in range(8)]})})
            until(lambda: validate(env, shared48)["allowed"], wh, "the H100 node")
            assert validate(env, whole6)["allowed"]
            r = validate(env, h100x2, ns="ml")  # 2 x 80Gi over the 100Gi
            assert not r["allowed"] and "asks for 163118Mi" in r["status"]["message"], r
            assert "largest NVIDIA H100 80GB HBM3 81559 MiB, 8 GPUs per node (3 nodes); " \
                   "oldest kubelet unknown" in wh.logs()
            # it leaves (its pool scaled to zero): the limits stay
            api.delete("nodes", "h100")
            until(lambda: validate(env, h100x2, ns="ml")["allowed"], wh,
                  "the H100 node to leave")  # no H100 known: not counted
            assert validate(env, shared48)["allowed"]
            assert validate(env, whole6)["allowed"]
        finally:
            assert wh.stop() == 0
            assert fixed.stop() == 0
