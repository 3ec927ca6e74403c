"""The scheduler extender in cluster mode, against the fake kube-apiserver.

Binds write the assignment annotations and the Binding; a restart, a dropped
watch and a 410 Gone all rebuild the state from pod annotations with nothing
lost; a failed Binding leaves no GPU held; two replicas elect one leader and
the other refuses /bind; freed GPUs nudge pending pods; a stale
inventory takes a node out; pods that fit nowhere get an Event.
"""
import calendar
import json
import os
import signal
import threading
import time

import pytest
import requests

from conftest import run
from fake_apiserver import FakeApiServer
from test_extender import Extender, bound, gpu_node, pod, refused

PREFIX = "gpusched.io/"


def wait_for(fn, timeout=20, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.5) as a:
        a.add_node("g1", **node_kwargs("g1"))
        a.add_node("g2", **node_kwargs("g2"))
        yield a


def node_kwargs(name, n=2, updated_at=None):
    n_ = gpu_node(name, n=n, updated_at=updated_at)
    return {"labels": {}, "annotations": n_["metadata"]["annotations"],
            "capacity": n_["status"]["allocatable"]}


def add_gpu_pod(api, name, gpus="1", **kw):
    p = pod(name, {"nvidia.com/gpu": gpus})
    return api.add_pod("default", name, containers=p["spec"]["containers"], **kw)


def start(bin_, api, tmp_path, *extra, name="kubeconfig", verify=None):
    kc = api.write_kubeconfig(tmp_path / name)
    e = Extender(bin_, ["--kubeconfig", kc, "--inventory-ttl", "0", *extra], verify=verify)
    e.wait_ready(path="/readyz")
    return e


def learned_pods(e):
    """Pods the learned target workload counts (GET /debug/workload)."""
    return requests.get(e.url + "/debug/workload", timeout=5).json()["pods"]


def schedule(e, api, name, nodes=("g1", "g2")):
    p = api.get("pods", name, "default")
    f = e.filter(p, list(nodes))
    assert f["Error"] == "" and f["NodeNames"], f
    r = e.bind(p, f["NodeNames"][0])
    return f["NodeNames"][0], r


def test_bind_writes_annotations_then_binding(gpusched_bin, api, tmp_path):
    p = add_gpu_pod(api, "train", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "train", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        node, r = schedule(e, api, "train")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        got = api.get("pods", "train", "default")
        ann = got["metadata"]["annotations"]
        assert got["spec"]["nodeName"] == node
        assert ann[PREFIX + "node"] == node
        assert ann[PREFIX + "request-kind"] == "whole"
        assert len(ann[PREFIX + "gpu-uuids"].split(",")) == 2
        # the patch came before the Binding (a nudge of the pending pod, which
        # a replica that starts leading sends, may come first: not counted)
        def nudge(body):
            ann = ((body or {}).get("metadata") or {}).get("annotations") or {}
            return set(ann) == {PREFIX + "retry-at"}
        kinds = [(m, path) for m, path, body in api.requests
                 if "/pods/train" in path and m != "GET" and not nudge(body)]
        assert kinds[0][0] == "PATCH" and kinds[1][1].endswith("/binding"), kinds
        assert p["metadata"]["uid"] == got["metadata"]["uid"]
    finally:
        e.stop()


def test_a_pod_asking_for_zero_gpus_is_bound(gpusched_bin, api, tmp_path):
    # nvidia.com/gpu: "0" (a chart's templated count): kube-scheduler sends it
    # to the extender, which passes every node and must bind it too
    add_gpu_pod(api, "cpu-only", "0")
    e = start(gpusched_bin, api, tmp_path)
    try:
        p = api.get("pods", "cpu-only", "default")
        assert e.filter(p, ["g1", "g2"])["NodeNames"] == ["g1", "g2"]
        r = e.bind(p, "g2")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        got = api.get("pods", "cpu-only", "default")
        assert got["spec"]["nodeName"] == "g2"
        assert PREFIX + "node" not in (got["metadata"].get("annotations") or {})
        assert requests.get(e.url + "/allocations/default/cpu-only", timeout=5).status_code \
            in (404, 405)
        assert e.metric("gpusched_allocations") == 0
    finally:
        e.stop()


def test_restart_rebuilds_from_annotations(gpusched_bin, api, tmp_path):
    for i in range(2):
        add_gpu_pod(api, f"p{i}", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        for i in range(2):
            wait_for(lambda: e.filter(api.get("pods", f"p{i}", "default"), ["g1"])["NodeNames"]
                     is not None, what="pod cached")
            node, r = schedule(e, api, f"p{i}")
            assert bound(r), r.text
    finally:
        e.stop()
    add_gpu_pod(api, "late", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric("gpusched_allocations") == 2
        f = e.filter(api.get("pods", "late", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [] and set(f["FailedNodes"]) == {"g1", "g2"}
        assert e.metric("gpusched_extender_rebuilds_total") >= 1
        # GPUs are freed by deleting pods, not by hand
        r = requests.delete(e.url + "/allocations/default/p0", timeout=5)
        assert r.status_code == 405 and "delete the pod" in r.json()["error"]
        assert e.metric("gpusched_allocations") == 2
    finally:
        e.stop()


def saved_workload(api):
    cm = api.get("configmaps", "gpusched-workload", "default")
    return json.loads(cm["data"]["workload.json"]) if cm else None


def test_learned_workload_survives_a_restart(gpusched_bin, api, tmp_path):
    """The leader saves what it learned from pods that have ended; a replica
    started later adds it to the live pods, each pod counted once, so a
    restart or a rolling update does not change cpufrag's target workload."""
    for i, gpus in enumerate(("1", "1", "2")):
        add_gpu_pod(api, f"w{i}", gpus)
    e = start(gpusched_bin, api, tmp_path, "--workload-save", "1")
    try:
        for i in range(3):
            wait_for(lambda: e.filter(api.get("pods", f"w{i}", "default"), ["g1"])["NodeNames"]
                     is not None, what="pod cached")
            assert bound(schedule(e, api, f"w{i}", ("g1", "g2"))[1])
        api.delete("pods", "w0", "default")  # ends: still counted, no longer live
        wait_for(lambda: e.metric("gpusched_allocations") == 2, what="w0 released")
        assert learned_pods(e) == 3
        before = requests.get(e.url + "/debug/workload", timeout=5).json()
        # only the ended pod is saved: the live ones count themselves on restore
        wait_for(lambda: (saved_workload(api) or {}).get("pods") == 1, what="workload saved")
        w = saved_workload(api)
        assert w["classes"] == [{"cpu_milli": 0, "num_gpu": 1, "milli": 1000, "models": [],
                                 "pods": 1}], w
        # a refused save is counted and tried again at the next interval
        api.fail("PUT", r"/configmaps/gpusched-workload", 403)
        api.delete("pods", "w1", "default")
        wait_for(lambda: e.metric('gpusched_extender_workload_saves_total{result="error"}') == 1,
                 what="the refused save counted")
        wait_for(lambda: saved_workload(api)["pods"] == 2, what="the save tried again")
        w = saved_workload(api)
        before = requests.get(e.url + "/debug/workload", timeout=5).json()
    finally:
        e.stop()
    # the API server does not answer the first read: the replica tries again
    api.fail("GET", r"/configmaps/gpusched-workload", 503)
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: learned_pods(e) == 3, what="the saved pod learned again")
        assert requests.get(e.url + "/debug/workload", timeout=5).json() == before
        assert e.metric("gpusched_allocations") == 1
    finally:
        e.stop()
    # a damaged save is refused whole, naming the field, and the replica learns
    # from the live pods
    w["classes"].append({"cpu_milli": 1000, "num_gpu": 1, "milli": 2000, "models": [],
                         "pods": 5})
    api.update("configmaps", "gpusched-workload", "default",
               lambda cm: cm["data"].update({"workload.json": json.dumps(w)}))
    e = start(gpusched_bin, api, tmp_path, "--workload-save", "1")
    try:
        time.sleep(1.5)
        assert learned_pods(e) == 1
    finally:
        e.stop()
    assert "classes[1].milli: 2000 is outside 1..1000; not used" in e.proc_err, e.proc_err[-2000:]
    # ... and its next save, as leader, holds what it knows (nothing ended yet)
    assert saved_workload(api)["pods"] == 0


def run_to_the_end(e, api, name):
    """Binds GPU pod `name` to g1, then deletes it: a pod that has ended, and
    that the learned workload counts."""
    wait_for(lambda: e.filter(api.get("pods", name, "default"), ["g1"])["NodeNames"],
             what="pod cached")
    assert bound(schedule(e, api, name, ("g1",))[1])
    api.delete("pods", name, "default")
    wait_for(lambda: e.metric("gpusched_allocations") == 0, what=f"{name} released")


def test_a_refused_read_of_the_saved_workload_saves_nothing(gpusched_bin, api, tmp_path):
    """A replica that may not read the saved workload (403) learns from the live
    pods and never saves: a save would replace the history it could not read."""
    api.create("/api/v1/namespaces/default/configmaps", {
        "metadata": {"name": "gpusched-workload", "namespace": "default"},
        "data": {"workload.json": json.dumps({"pods": 7, "classes": []})}})
    add_gpu_pod(api, "r0", "1")
    api.fail("GET", r"/configmaps/gpusched-workload", 403)
    e = start(gpusched_bin, api, tmp_path, "--workload-save", "1")
    try:
        run_to_the_end(e, api, "r0")
        time.sleep(2.5)  # two save intervals
    finally:
        e.stop()
    assert "not saving" in e.proc_err, e.proc_err[-2000:]
    assert not [m for m, path, _ in api.requests
                if m in ("PUT", "POST") and "gpusched-workload" in path]
    assert saved_workload(api)["pods"] == 7


def test_a_rotated_token_file_is_read_again_at_a_401(gpusched_bin, api, tmp_path):
    """kubelet rotates a bound service account token, and a Secret's token
    changes with its Secret: a request that gets 401 reads the token file
    again and is sent once more (it was read only every 60 s: binds failed)."""
    add_gpu_pod(api, "t0", "1")
    tok = tmp_path / "token"
    tok.write_text("first\n")
    api.require_token = "first"
    kc = api.write_kubeconfig(tmp_path / "kc-tok", token_file=str(tok))
    e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "0"])
    try:
        e.wait_ready(path="/readyz")
        wait_for(lambda: e.filter(api.get("pods", "t0", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        time.sleep(1.1)  # the file was read more than a second ago
        tok.write_text("second\n")
        api.require_token = "second"
        r = e.bind(api.get("pods", "t0", "default"), "g1")
        assert bound(r), r.text
        assert api.get("pods", "t0", "default")["spec"]["nodeName"] == "g1"
    finally:
        e.stop()


def test_leader_saves_the_learned_workload_when_it_stops(gpusched_bin, api, tmp_path):
    """A rolling update stops the leader between two saves: what ended since the
    last one is saved at the clean stop, for the replica that leads next."""
    add_gpu_pod(api, "s0", "1")
    e = start(gpusched_bin, api, tmp_path, "--workload-save", "3600")
    try:
        run_to_the_end(e, api, "s0")
        # it read what was saved (nothing), and no save is due for an hour
        wait_for(lambda: any(m == "GET" and "/configmaps/gpusched-workload" in path
                             for m, path, _ in api.requests), what="the saved workload read")
        time.sleep(0.5)
        assert saved_workload(api) is None
    finally:
        e.stop()
    assert saved_workload(api)["pods"] == 1


def assignment(node, uuids):
    return {PREFIX + "node": node, PREFIX + "request-kind": "whole",
            PREFIX + "gpu-uuids": ",".join(uuids),
            PREFIX + "gpu-indices": ",".join(u.rsplit("-", 1)[1] for u in uuids),
            PREFIX + "gpu-memory": "81920", PREFIX + "gpu-milli": "1000",
            PREFIX + "assigned-at": "2026-11-22T15:20:01.000000Z"}


def test_assignment_without_binding_is_nudged_and_replaced(gpusched_bin, api, tmp_path):
    """An extender that died between a pod's assignment annotations and its Binding
    leaves the pod Pending with an assignment. The extender that starts (or takes the
    Lease) reads it back, nudges the pod with the other pending ones (not the bound
    one), and the pod's next /bind replaces it, on its node or another, with a
    Binding; before, a bind elsewhere was refused 409 and one to the same node was
    answered 200 without a Binding."""
    add_gpu_pod(api, "same", "1", annotations=assignment("g1", ["GPU-g1-0"]))
    add_gpu_pod(api, "other", "1", annotations=assignment("g1", ["GPU-g1-1"]))
    add_gpu_pod(api, "bound", "1", node="g2", annotations=assignment("g2", ["GPU-g2-0"]))
    add_gpu_pod(api, "new", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric("gpusched_allocations") == 3
        for n in ("same", "other", "new"):
            wait_for(lambda: PREFIX + "retry-at" in
                     api.get("pods", n, "default")["metadata"]["annotations"],
                     timeout=5, what=f"{n} nudged at the start")
        assert PREFIX + "retry-at" not in api.get("pods", "bound", "default")["metadata"][
            "annotations"]
        for n, node in (("same", "g1"), ("other", "g2")):
            r = e.bind(api.get("pods", n, "default"), node)
            assert r.status_code == 200 and r.json()["Error"] == "", r.text
            p = api.get("pods", n, "default")
            assert p["spec"].get("nodeName") == node, p["spec"]
            ann = p["metadata"]["annotations"]
            assert ann[PREFIX + "node"] == node
            assert ann[PREFIX + "gpu-uuids"].startswith(f"GPU-{node}-"), ann
        # the GPUs "other" was assigned on g1 are free again; g2 holds bound's and other's
        wait_for(lambda: e.metric('gpusched_gpus_allocated{node="g1"') == 1, what="g1 freed")
        assert e.metric('gpusched_gpus_allocated{node="g2"') == 2
    except BaseException:
        e.stop()
        raise
    assert "left without a Binding" in e.stop()


def test_a_stale_filter_body_does_not_free_a_bound_pods_gpus(gpusched_bin, api, tmp_path):
    """kube-scheduler may /filter a copy of a pod from before its bind (1.20
    requeues its queue's copy after a bind it saw fail, though the Binding
    was made). The watch saw the pod bound with its assignment: that copy,
    without nodeName and annotations, must not make its GPUs look orphaned
    and free them to the next pod (a GPU given twice)."""
    add_gpu_pod(api, "x", "2", node="g1",
                annotations=assignment("g1", ["GPU-g1-0", "GPU-g1-1"]))
    add_gpu_pod(api, "y", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
        stale = api.get("pods", "x", "default")
        stale["spec"].pop("nodeName")
        stale["metadata"]["annotations"] = {}
        e.filter(stale, ["g1", "g2"])
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
        f = e.filter(api.get("pods", "y", "default"), ["g1", "g2"])
        assert f["NodeNames"] == ["g2"], f
    finally:
        e.stop()


def test_assignment_without_binding_is_free_for_its_own_pod(gpusched_bin, api, tmp_path):
    """A pod left with an assignment and no Binding, on a node whose other GPUs are
    taken since, still fits that node: its /filter drops the assignment (kube-scheduler
    is placing it afresh), so its own GPU counts as free. Before, the node read "0 free
    GPUs" to the pod itself, and a pod held there by a nodeSelector never ran (seen in
    e2e test_ha.py)."""
    add_gpu_pod(api, "bound", "1", node="g1", annotations=assignment("g1", ["GPU-g1-0"]))
    add_gpu_pod(api, "orphan", "1", annotations=assignment("g1", ["GPU-g1-1"]))
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric("gpusched_allocations") == 2
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
        p = api.get("pods", "orphan", "default")
        f = e.filter(p, ["g1"])
        assert f["Error"] == "" and f["NodeNames"] == ["g1"], f
        r = e.bind(p, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        got = api.get("pods", "orphan", "default")
        assert got["spec"].get("nodeName") == "g1", got["spec"]
        assert got["metadata"]["annotations"][PREFIX + "gpu-uuids"] == "GPU-g1-1"
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
    except BaseException:
        e.stop()
        raise
    assert "filter drops its assignment on g1, left without a Binding" in e.stop()


def test_hand_written_assignment_holds_nothing(gpusched_bin, api, tmp_path):
    """Assignment annotations that do not match the pod's own request were not
    written by a bind (a CPU-only pod carrying them, a one-GPU pod claiming two):
    they reserve nothing, so nobody can block GPUs by writing annotations."""
    api.add_pod("default", "cpu-only", node="g1", phase="Running",
                annotations=assignment("g1", ["GPU-g1-0", "GPU-g1-1"]))
    add_gpu_pod(api, "one", "1", node="g2", phase="Running",
                annotations=assignment("g2", ["GPU-g2-0", "GPU-g2-1"]))
    add_gpu_pod(api, "real", "1", node="g2", phase="Running",
                annotations=assignment("g2", ["GPU-g2-1"]))
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric("gpusched_allocations") == 1  # only "real"
        assert e.metric('gpusched_gpus_allocated{node="g2"') == 1
    finally:
        err = e.stop()
    # the warning names the pod and why
    assert "default/cpu-only" in err and "do not match its request" in err, err


def test_dropped_watch_and_gone_lose_nothing(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "a", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "a", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        node, r = schedule(e, api, "a", ["g1"])
        assert bound(r), r.text
        api.drop_watches()
        api.delete("pods", "a", "default")  # happens while the stream is down
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="GPUs freed after drop")
        wait_for(lambda: e.metric("gpusched_extender_watch_restarts_total") >= 2,
                 what="watch restarts counted")
        add_gpu_pod(api, "b", "2", node="g2",
                    annotations={PREFIX + "node": "g2", PREFIX + "request-kind": "whole",
                                 PREFIX + "gpu-uuids": "GPU-g2-0,GPU-g2-1",
                                 PREFIX + "gpu-indices": "0,1", PREFIX + "gpu-memory": "81920",
                                 PREFIX + "gpu-milli": "1000",
                                 PREFIX + "assigned-at": "2026-11-22T15:20:01.000000Z"})
        wait_for(lambda: e.metric("gpusched_allocations") == 1, what="b seen by the watch")
        api.drop_watches(gone=True)
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") >= 2, what="relist")
        wait_for(lambda: e.metric("gpusched_allocations") == 1, what="rebuilt allocation")
        assert e.metric('gpusched_gpus_allocated{node="g2"') == 2
        # the learned workload counts a (gone) and b once each: a relist does not
        # count again the pods it rebuilds
        assert learned_pods(e) == 2
        # b ends while the pod watch is away and the history is gone: the relist
        # does not find it, and it still counts, as an ended pod (it was placed)
        api.delay("GET", r"/api/v1/pods\?.*watch=1", 2.0)
        api.drop_watches()
        api.delete("pods", "b", "default")
        api.compact()
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") >= 3, what="relist")
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="b gone after the relist")
        assert learned_pods(e) == 2
    finally:
        e.stop()


def test_failed_binding_holds_nothing(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "f", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "f", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        api.fail("POST", r"/pods/f/binding$", 500)
        node, r = schedule(e, api, "f", ["g1"])
        refused(r, "Binding")
        got = api.get("pods", "f", "default")
        assert PREFIX + "node" not in got["metadata"]["annotations"]
        assert not got["spec"].get("nodeName")
        # once the watch has delivered the patch and its undo, nothing is held
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="nothing held")
        node, r = schedule(e, api, "f", ["g1"])  # kube-scheduler retries
        assert bound(r), r.text
        assert learned_pods(e) == 1  # the failed bind is not learned
    finally:
        e.stop()


def test_binding_whose_answer_was_lost_is_kept(gpusched_bin, api, tmp_path):
    """The apiserver makes the Binding but its answer never arrives (a timeout,
    a 5xx from a proxy): the pod is bound, so its assignment and GPUs must stay,
    or it would run on GPUs the extender hands to the next pod."""
    add_gpu_pod(api, "f", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "f", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        api.fail("POST", r"/pods/f/binding$", 504, after=True)
        node, r = schedule(e, api, "f", ["g1"])
        assert bound(r), r.text
        got = api.get("pods", "f", "default")
        assert got["spec"]["nodeName"] == "g1"
        assert got["metadata"]["annotations"][PREFIX + "node"] == "g1"
        wait_for(lambda: e.metric("gpusched_allocations") == 1, what="f holds its GPUs")
        add_gpu_pod(api, "g", "1")
        wait_for(lambda: e.filter(api.get("pods", "g", "default"), ["g1"])["Error"] == "",
                 what="g cached")
        assert e.filter(api.get("pods", "g", "default"), ["g1"])["NodeNames"] == []
    finally:
        e.stop()


def test_a_failed_binding_takes_back_only_its_own_assignment(gpusched_bin, api, tmp_path):
    """A Binding refused with 409 is settled by reading the pod back; what the
    bind wrote is taken back only if it is still there and the pod is the one
    it bound. While each Binding is held, another bind (a new leader) binds f
    elsewhere with its own assignment, and h is deleted and created again with
    a new UID that its own bind annotated: both assignments stay (before, the
    undo wiped them: f with no precondition, h with the new pod's own
    resourceVersion)."""
    add_gpu_pod(api, "f", "1")
    add_gpu_pod(api, "h", "1")
    e = start(gpusched_bin, api, tmp_path)
    theirs = {PREFIX + "node": "g2", PREFIX + "gpu-uuids": "GPU-theirs"}
    try:
        for n in ("f", "h"):
            wait_for(lambda: e.filter(api.get("pods", n, "default"), ["g1"])["NodeNames"],
                     what=f"{n} cached")

        def bound_elsewhere():
            def to_g2(o):
                o["spec"]["nodeName"] = "g2"
                o["metadata"]["annotations"].update(theirs)
            api.update("pods", "f", "default", fn=to_g2)

        def recreated():
            api.delete("pods", "h", "default")
            add_gpu_pod(api, "h", "1", annotations=dict(theirs, **{PREFIX + "node": "g1"}))

        for n, meanwhile in (("f", bound_elsewhere), ("h", recreated)):
            api.delay("POST", rf"/pods/{n}/binding$", 1.5)
            api.fail("POST", rf"/pods/{n}/binding$", 409)
            p = api.get("pods", n, "default")
            out = {}
            t = threading.Thread(target=lambda: out.__setitem__("r", e.bind(p, "g1")))
            t.start()
            wait_for(lambda: any(m == "POST" and path.endswith(f"/pods/{n}/binding")
                                 for m, path, _ in api.requests), what=f"{n}'s Binding sent")
            meanwhile()
            t.join(20)
            refused(out["r"], "Binding")
            ann = api.get("pods", n, "default")["metadata"]["annotations"]
            assert ann.get(PREFIX + "gpu-uuids") == "GPU-theirs", (n, ann)
    finally:
        err = e.stop()
    assert "another bind's now" in err and "replaced (another UID)" in err, err[-3000:]


def test_a_binding_of_unknown_outcome_keeps_the_gpus_until_the_pod_says(gpusched_bin, api,
                                                                        tmp_path):
    """The Binding got no answer and the pod cannot be read back: it may be bound,
    so its GPUs are not handed to the next pod (before, they were freed at once).
    The pod, seen unbound at its next /filter, gets them back."""
    add_gpu_pod(api, "f", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "f", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        api.fail("POST", r"/pods/f/binding$", 504)
        api.fail("GET", r"/pods/f$", 503)
        p = api.get("pods", "f", "default")
        refused(e.bind(p, "g1"), "Binding", "unknown")
        assert not api.get("pods", "f", "default")["spec"].get("nodeName")
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
        # kube-scheduler tries the pod again: unbound, its reservation is dropped
        node, r = schedule(e, api, "f", ["g1"])
        assert bound(r), r.text
        assert api.get("pods", "f", "default")["spec"]["nodeName"] == "g1"
        wait_for(lambda: e.metric('gpusched_gpus_allocated{node="g1"') == 2, what="f's 2 GPUs")
    finally:
        err = e.stop()
    assert "stay reserved" in err and "drops its assignment" in err


def test_a_slow_bind_holds_no_other_connection(gpusched_bin, api, tmp_path):
    """A /bind waiting on a slow API server runs off the HTTP worker: with one
    worker, requests on other kept-alive connections are answered meanwhile (a
    worker answers its connections one request at a time: on it, a /filter of
    the next pod waited out the whole bind)."""
    add_gpu_pod(api, "f", "2")
    add_gpu_pod(api, "g", "1")
    e = start(gpusched_bin, api, tmp_path, "--threads", "1")
    try:
        other = requests.Session()  # one connection, kept alive

        def filter_g():
            return other.post(e.url + "/filter", json={
                "Pod": api.get("pods", "g", "default"), "NodeNames": ["g1"], "Nodes": None},
                timeout=10)
        wait_for(lambda: filter_g().json()["NodeNames"], what="g cached")
        wait_for(lambda: e.filter(api.get("pods", "f", "default"), ["g1"])["NodeNames"],
                 what="f cached")
        api.delay("PATCH", r"/pods/f$", 4.0, body_has="gpu-uuids")  # the bind's, not a nudge
        res = {}
        t = threading.Thread(target=lambda: res.__setitem__(
            "f", e.bind(api.get("pods", "f", "default"), "g1")))
        t.start()
        wait_for(lambda: e.metric('gpusched_gpus_allocated{node="g1"') == 2, what="f reserved")
        t0 = time.monotonic()
        r = filter_g()
        assert r.status_code == 200 and time.monotonic() - t0 < 2, time.monotonic() - t0
        assert "f" not in res  # answered while f's bind still waited
        t.join(timeout=30)
        assert bound(res["f"]), res["f"].text
    finally:
        e.stop()


def test_a_bind_asked_again_while_it_commits_waits_for_it(gpusched_bin, api, tmp_path):
    """kube-scheduler gave up on a slow /bind and asks again: the second answer
    must not say "bound" before the first one's Binding exists."""
    add_gpu_pod(api, "f", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "f", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        api.delay("PATCH", r"/pods/f$", 5.0, body_has="gpu-uuids")  # long enough under ASan
        api.fail("POST", r"/pods/f/binding$", 500)
        res = {}
        t = threading.Thread(target=lambda: res.__setitem__(
            "first", e.bind(api.get("pods", "f", "default"), "g1")))
        t.start()
        wait_for(lambda: e.metric('gpusched_gpus_allocated{node="g1"') == 2, what="f reserved")
        refused(e.bind(api.get("pods", "f", "default"), "g1"), "still being committed")
        t.join(timeout=30)
        refused(res["first"], "Binding")
        assert not api.get("pods", "f", "default")["spec"].get("nodeName")
    finally:
        e.stop()


def two_pods_for_g1(bin_, api, tmp_path):
    """Pods x and y, each wanting both of g1's GPUs, seen by a started extender."""
    add_gpu_pod(api, "x", "2")
    add_gpu_pod(api, "y", "2")
    e = start(bin_, api, tmp_path)
    try:
        for n in ("x", "y"):
            wait_for(lambda: e.filter(api.get("pods", n, "default"), ["g1"])["NodeNames"],
                     what="pods cached")
    except BaseException:
        e.stop()
        raise
    return e


def test_race_for_the_last_gpu_in_cluster(gpusched_bin, api, tmp_path):
    e = two_pods_for_g1(gpusched_bin, api, tmp_path)
    try:
        res = {}
        ts = [threading.Thread(target=lambda n=n: res.__setitem__(
            n, e.bind(api.get("pods", n, "default"), "g1"))) for n in ("x", "y")]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=30)
        won = [n for n, r in res.items() if bound(r)]
        assert len(won) == 1, [r.text for r in res.values()]
        refused(res[({"x", "y"} - set(won)).pop()])
        on = [n for n in ("x", "y") if api.get("pods", n, "default")["spec"].get("nodeName")]
        assert on == won
    finally:
        e.stop()


def test_relist_during_a_bind_keeps_its_gpus(gpusched_bin, api, tmp_path):
    """A 410 relist whose list predates a bind's annotations must not drop
    the GPUs that bind holds: a second pod then finds them taken."""
    e = two_pods_for_g1(gpusched_bin, api, tmp_path)
    try:
        api.delay("PATCH", r"/pods/x$", 2.0, body_has="gpu-uuids")  # the bind's patch is slow
        res = {}
        t = threading.Thread(target=lambda: res.__setitem__(
            "x", e.bind(api.get("pods", "x", "default"), "g1")))
        t.start()
        wait_for(lambda: e.metric('gpusched_gpus_allocated{node="g1"') == 2, what="x reserved")
        rebuilds = e.metric("gpusched_extender_rebuilds_total")
        api.drop_watches(gone=True)  # relist while x's patch is still held
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") > rebuilds, what="relist")
        assert e.metric('gpusched_gpus_allocated{node="g1"') == 2
        refused(e.bind(api.get("pods", "y", "default"), "g1"))
        t.join(timeout=30)
        assert bound(res["x"]), res["x"].text
        assert api.get("pods", "x", "default")["spec"]["nodeName"] == "g1"
        assert not api.get("pods", "y", "default")["spec"].get("nodeName")
        # a relist taken after the commit: still exactly one allocation
        api.drop_watches(gone=True)
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") > rebuilds + 1,
                 what="second relist")
        assert e.metric("gpusched_allocations") == 1
        # and the pod's deletion frees the GPUs
        api.delete("pods", "x", "default")
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="x freed")
    finally:
        e.stop()


def test_a_pod_bound_while_the_pods_are_listed_keeps_its_gpus(gpusched_bin, api, tmp_path):
    """A relist's pages all come from the snapshot its first page took: a pod made
    and bound after it is not in the list, and the watch that follows brings it.
    Its GPUs stay taken meanwhile (they were freed to the next pod until then)."""
    for i in range(501):  # two pages of 500
        api.add_pod("default", f"cpu{i}")
    add_gpu_pod(api, "y", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "y", "default"), ["g1"])["NodeNames"],
                 what="y seen")
        api.delay("GET", r"/api/v1/pods\?.*continue=", 3.0)  # the list's second page
        api.delay("GET", r"/api/v1/pods\?.*watch=", 3.0)     # and the watch after it
        rebuilds = e.metric("gpusched_extender_rebuilds_total")
        n_req = len(api.requests)
        api.drop_watches(gone=True)
        wait_for(lambda: any(m == "GET" and "/api/v1/pods?" in p and "continue=" in p
                             for m, p, _ in list(api.requests)[n_req:]),
                 what="the first page served")
        add_gpu_pod(api, "x", "2")
        assert e.filter(api.get("pods", "x", "default"), ["g1"])["NodeNames"] == ["g1"]
        assert bound(e.bind(api.get("pods", "x", "default"), "g1"))
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") > rebuilds, what="relist")
        f = e.filter(api.get("pods", "y", "default"), ["g1"])
        assert f["NodeNames"] == [], f
        assert e.metric("gpusched_allocations") == 1
        # the watch brings x: still one allocation, and y still kept off g1
        wait_for(lambda: any(m == "GET" and "/api/v1/pods?" in p and "watch=" in p
                             for m, p, _ in list(api.requests)[n_req:]), what="the watch")
        time.sleep(3.5)
        assert e.metric("gpusched_allocations") == 1
        assert e.filter(api.get("pods", "y", "default"), ["g1"])["NodeNames"] == []
        api.delete("pods", "x", "default")
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="x freed")
    finally:
        e.stop()


def test_a_pod_bound_and_deleted_before_the_list_snapshot_frees_its_gpus(gpusched_bin, api,
                                                                        tmp_path):
    """A pod bound after a relist began and deleted before the list's snapshot
    is not in the list, and the watch that follows (from the snapshot) never
    brings its deletion: the extender looks such pods up after the list, and
    frees their GPUs (they stayed taken until the next relist)."""
    e = two_pods_for_g1(gpusched_bin, api, tmp_path)
    try:
        api.delay("GET", r"/api/v1/pods\?(?!.*watch=)", 6.0)  # the list, before its snapshot
        rebuilds = e.metric("gpusched_extender_rebuilds_total")
        n_req = len(api.requests)
        api.drop_watches(gone=True)
        wait_for(lambda: any(m == "GET" and "/api/v1/pods?" in p and "watch=" not in p
                             for m, p, _ in list(api.requests)[n_req:]), what="the list asked")
        assert bound(e.bind(api.get("pods", "x", "default"), "g1"))
        api.delete("pods", "x", "default")
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") > rebuilds, what="relist")
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="x freed")
        assert any(m == "GET" and p == "/api/v1/namespaces/default/pods/x"
                   for m, p, _ in list(api.requests)[n_req:])
        f = e.filter(api.get("pods", "y", "default"), ["g1"])
        assert f["NodeNames"] == ["g1"], f
    finally:
        e.stop()


def test_leader_election(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "l", "1")
    args = ["--leader-elect", "--lease-duration", "5", "--lease-namespace", "kube-system"]
    a = start(gpusched_bin, api, tmp_path, *args, "--identity", "a", name="kc-a")
    wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
    b = start(gpusched_bin, api, tmp_path, *args, "--identity", "b", name="kc-b")
    try:
        wait_for(lambda: b.filter(api.get("pods", "l", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        refused(b.bind(api.get("pods", "l", "default"), "g1"), "leader")
        assert b.metric("gpusched_extender_leader") == 0
        a.stop()  # releases the lease
        wait_for(lambda: b.metric("gpusched_extender_leader") == 1, what="b takes over")
        r = b.bind(api.get("pods", "l", "default"), "g1")
        assert bound(r), r.text
        lease = api.get("leases", "gpusched-extender", "kube-system",
                        prefix="/apis/coordination.k8s.io/v1")
        assert lease["spec"]["holderIdentity"] == "b"
    finally:
        a.stop()
        b.stop()


def test_a_failed_lease_renew_is_tried_again_soon(gpusched_bin, api, tmp_path):
    """A leader whose renew fails (an API server rolling, a 503) tries again
    after 2 s, not at the next renew: two failures in a row left it no try
    before its deadline (2/3 of the lease), and it stepped down. With a 15 s
    lease: renews at 5 s (fails), 7 s (fails), 9 s, against a deadline at
    10 s (before, the second try came at 10 s, past it: a step-down). Only a
    failure past the deadline steps down, so the step-down is what is
    checked, not the gauge (a late renew on a loaded machine)."""
    args = ["--leader-elect", "--lease-duration", "15", "--lease-namespace", "kube-system"]
    a = start(gpusched_bin, api, tmp_path, *args, "--identity", "a", name="kc-a")
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        n = len(api.requests)
        api.fail("PUT", r"/leases/gpusched-extender$", 503, times=2)
        wait_for(lambda: len([1 for m, p, _ in list(api.requests)[n:]
                              if m == "PUT" and p.endswith("/leases/gpusched-extender")]) >= 3,
                 what="a third renew", timeout=20)
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="leading")
    finally:
        a.stop()
    # a step-down is followed by a new take-over (the next try passes)
    assert a.proc_err.count("a now holds lease") == 1, a.proc_err[-2000:]
    assert a.proc_err.count("a no longer holds lease") == 1  # the stop's


def test_a_refused_watch_says_why(gpusched_bin, api, tmp_path):
    """A watch the API server refuses (RBAC that grants list but not watch, a
    token it no longer takes) is logged with its status and the Status'
    message, and backs off; it was fed to the event decoder and logged as
    "type: missing or not a string"."""
    e = start(gpusched_bin, api, tmp_path)
    try:
        api.fail("GET", r"/api/v1/pods\?.*watch=", 403, times=2,
                 message='pods is forbidden: cannot watch resource "pods"')
        n = len(api.requests)
        api.drop_watches()
        wait_for(lambda: len([1 for m, p, _ in list(api.requests)[n:]
                              if m == "GET" and "/api/v1/pods?" in p and "watch=" in p]) >= 3,
                 what="the watch back after two refusals", timeout=20)
    finally:
        e.stop()
    assert "HTTP 403: pods is forbidden: cannot watch" in e.proc_err, e.proc_err[-2000:]
    assert "type: missing" not in e.proc_err


def micro_now():
    """Now as the extender stamps gpusched.io/retry-at (RFC 3339, microseconds)."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % ((t % 1) * 1e6)


def fill_both_nodes(e, api, on_g1, on_g2):
    """Binds the 2-GPU pods on_g1 and on_g2 to g1 and g2, filling both."""
    for n, node in ((on_g1, "g1"), (on_g2, "g2")):
        wait_for(lambda: e.filter(api.get("pods", n, "default"), [node])["NodeNames"],
                 what="pods cached")
        assert bound(e.bind(api.get("pods", n, "default"), node))


def test_a_relist_keeps_the_pods_it_must_nudge(gpusched_bin, api, tmp_path):
    """A pod whose /filter found no node sits in kube-scheduler's unschedulable
    queue until the extender nudges it. A relist of the pods (410 Gone) keeps that,
    so the pod is nudged when GPUs free up after it; it was forgotten, and the pod
    waited for kube-scheduler's periodic flush (60 s, up to 5 min)."""
    add_gpu_pod(api, "big1", "2")
    add_gpu_pod(api, "big2", "2")
    add_gpu_pod(api, "waiting", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        fill_both_nodes(e, api, "big1", "big2")
        assert e.filter(api.get("pods", "waiting", "default"), ["g1", "g2"])["NodeNames"] == []
        rebuilds = e.metric("gpusched_extender_rebuilds_total")
        api.drop_watches(gone=True)
        wait_for(lambda: e.metric("gpusched_extender_rebuilds_total") > rebuilds, what="relist")
        time.sleep(1.5)  # a nudge for the relist itself has come by now
        freed_at = micro_now()
        api.update("pods", "big1", "default",
                   fn=lambda p: p["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: api.get("pods", "waiting", "default")["metadata"]["annotations"]
                 .get(PREFIX + "retry-at", "") >= freed_at, timeout=8,
                 what="nudge after the free")
    finally:
        e.stop()


def test_freed_gpus_nudge_pending_pods_and_events(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "big1", "2")
    add_gpu_pod(api, "big2", "2")
    add_gpu_pod(api, "waiting", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        fill_both_nodes(e, api, "big1", "big2")
        f = e.filter(api.get("pods", "waiting", "default"), ["g1", "g2"])
        assert f["NodeNames"] == []
        ev = wait_for(lambda: [x for x in api.list("events")
                               if x["involvedObject"]["name"] == "waiting"], what="event")
        assert ev[0]["reason"] == "GPUUnschedulable" and "0/2 nodes" in ev[0]["message"]
        # The extender may also nudge once at start-up (GPUs may have been
        # freed while it was away), so look for a nudge stamped after the free.
        freed_at = micro_now()
        api.update("pods", "big1", "default",
                   fn=lambda p: p["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: api.get("pods", "waiting", "default")["metadata"]["annotations"]
                 .get(PREFIX + "retry-at", "") >= freed_at, what="nudge after the free")
        wait_for(lambda: e.metric("gpusched_allocations") == 1, what="big1's GPUs freed")
    finally:
        e.stop()


def test_deleted_pod_frees_its_gpus_once_its_containers_stopped(gpusched_bin, api, tmp_path):
    """A pod being deleted holds its GPUs while a container still runs; once kubelet
    reports every container terminated they are free (kubelet gives them to the next
    pod then), before the object goes, and the pending pods are nudged."""
    add_gpu_pod(api, "old", "2")
    add_gpu_pod(api, "other", "2")
    add_gpu_pod(api, "next", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        fill_both_nodes(e, api, "old", "other")
        assert e.filter(api.get("pods", "next", "default"), ["g1", "g2"])["NodeNames"] == []

        def deleting(states):
            def fn(p):
                p["metadata"]["deletionTimestamp"] = "2026-11-25T10:00:00Z"
                p["status"]["containerStatuses"] = [
                    {"name": f"c{i}", "state": st} for i, st in enumerate(states)]
            return fn
        stopped = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        api.update("pods", "old", "default", fn=deleting([stopped, {"running": {}}]))
        time.sleep(0.5)
        assert e.metric("gpusched_allocations") == 2  # one container still runs
        assert e.filter(api.get("pods", "next", "default"), ["g1", "g2"])["NodeNames"] == []
        freed_at = micro_now()
        api.update("pods", "old", "default", fn=deleting([stopped, stopped]))
        wait_for(lambda: e.metric("gpusched_allocations") == 1, what="old's GPUs freed")
        wait_for(lambda: api.get("pods", "next", "default")["metadata"]["annotations"]
                 .get(PREFIX + "retry-at", "") >= freed_at, what="nudge after the free")
        p = api.get("pods", "next", "default")
        assert e.filter(p, ["g1", "g2"])["NodeNames"] == ["g1"]
        assert bound(e.bind(p, "g1"))
    finally:
        e.stop()


def test_stale_inventory_makes_a_node_unavailable(gpusched_bin, api, tmp_path):
    api.add_node("old", **node_kwargs("old", updated_at="2020-01-01T00:00:00Z"))
    add_gpu_pod(api, "s", "1")
    kc = api.write_kubeconfig(tmp_path / "kc")
    e = Extender(gpusched_bin, ["--kubeconfig", kc, "--inventory-ttl", "60"])
    try:
        e.wait_ready(path="/readyz")
        wait_for(lambda: e.metric("gpusched_nodes_stale") == 1, what="stale node")
        f = e.filter(api.get("pods", "s", "default"), ["g1", "old"])
        assert f["NodeNames"] == ["g1"]
        assert "old" in {**f["FailedNodes"], **f["FailedAndUnresolvableNodes"]}
    finally:
        e.stop()


def test_api_server_errors_do_not_stop_serving(gpusched_bin, api, tmp_path):
    api.fail("GET", r"/api/v1/pods\?", 500, times=2)
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert requests.get(e.url + "/readyz", timeout=5).status_code == 200
        assert e.metric('gpusched_extender_lists_total{resource="pods"') == 1
    finally:
        e.stop()


def zero_gpu_quota_applies(e, api):
    """Once pod default/q is cached, a GPUQuota of 0 GPUs in its namespace: /filter
    refuses every node naming the quota."""
    wait_for(lambda: e.filter(api.get("pods", "q", "default"), ["g1"])["NodeNames"],
             what="pod cached")
    api.create("/apis/gpusched.io/v1/namespaces/default/gpuquotas",
               {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                "metadata": {"name": "none", "namespace": "default"},
                "spec": {"total": {"gpus": 0}}})
    f = wait_for(lambda: (lambda r: r if not r["NodeNames"] else None)(
        e.filter(api.get("pods", "q", "default"), ["g1", "g2"])),
        what="quota applied")
    assert all("GPUQuota default/none" in r for r in f["FailedNodes"].values()), f


def test_gpuquota_objects_are_watched(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "q", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        zero_gpu_quota_applies(e, api)
        refused(e.bind(api.get("pods", "q", "default"), "g1"), "GPUQuota")
        api.delete("gpuquotas", "none", "default", prefix="/apis/gpusched.io/v1")
        wait_for(lambda: e.filter(api.get("pods", "q", "default"), ["g1"])["NodeNames"],
                 what="quota removed")
    finally:
        e.stop()


def test_gpuquota_crd_installed_after_the_start_counts(gpusched_bin, api, tmp_path):
    """A GPUQuota CRD installed after the extender started (here: its API answers 404 to
    the start's probe and the next three lists) is found by the watch's next lists,
    without a restart."""
    add_gpu_pod(api, "q", "1")
    api.fail("GET", r"/apis/gpusched\.io/v1/gpuquotas", 404, times=4,
             message="the server could not find the requested resource")
    e = start(gpusched_bin, api, tmp_path)
    try:
        zero_gpu_quota_applies(e, api)
    finally:
        err = e.stop()
    assert "GPUQuota CRD is not installed" in err, err
    assert "list /apis/gpusched.io/v1/gpuquotas" not in err  # 404s are not warned about


def _self_signed(tmp_path, cn):
    import subprocess as sp
    cert, key = tmp_path / f"{cn}.crt", tmp_path / f"{cn}.key"
    sp.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", f"/CN={cn}", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def test_tls_is_verified(gpusched_bin, tmp_path):
    cert, key = _self_signed(tmp_path, "apiserver")
    other, _ = _self_signed(tmp_path, "someone-else")
    with FakeApiServer(tls=(cert, key)) as api:
        api.add_node("g1", **node_kwargs("g1"))
        good = api.write_kubeconfig(tmp_path / "good", ca_file=cert)
        e = Extender(gpusched_bin, ["--kubeconfig", good, "--inventory-ttl", "0"])
        try:
            e.wait_ready(path="/readyz")
            assert e.metric("gpusched_gpus") == 2
        finally:
            e.stop()
        # a server whose certificate the CA did not sign is never trusted
        bad = api.write_kubeconfig(tmp_path / "bad", ca_file=other)
        seen = len(api.requests)
        port = __import__("conftest").free_port()
        import subprocess as sp
        proc = sp.Popen([gpusched_bin, "extender", "--kubeconfig", bad, "--listen",
                         f"127.0.0.1:{port}"], stderr=sp.PIPE, text=True)
        try:
            proc.wait(timeout=3)  # it may give up at once on an untrusted server ...
        except sp.TimeoutExpired:  # ... or keep retrying, never ready
            assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 503
            proc.terminate()
            proc.wait(timeout=10)
        err = proc.stderr.read()
        assert "SSL" in err or "certificate" in err.lower(), err
        assert len(api.requests) == seen  # not one request got past the handshake


def test_extender_serves_https(gpusched_bin, tmp_path):
    from test_extender import STANDARD_NODES, write_nodes
    cert, key = _self_signed(tmp_path, "extender")
    nodes = write_nodes(tmp_path / "nodes.json", STANDARD_NODES)
    port = __import__("conftest").free_port()
    import subprocess as sp
    proc = sp.Popen([gpusched_bin, "extender", "--nodes", nodes, "--listen", f"127.0.0.1:{port}",
                     "--tls-cert", cert, "--tls-key", key], stderr=sp.PIPE, text=True)
    try:
        r = wait_for(lambda: _get(f"https://127.0.0.1:{port}/healthz", cert), what="https")
        assert r.text == "ok\n"
        r = requests.post(f"https://127.0.0.1:{port}/filter", verify=cert, timeout=5,
                          json={"Pod": pod("t", {"nvidia.com/gpu": "1"}), "NodeNames": ["a100-1"]})
        assert r.json()["NodeNames"] == ["a100-1"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get(url, ca):
    try:
        return requests.get(url, verify=ca, timeout=2)
    except requests.exceptions.ConnectionError:
        return None


def test_pods_without_gpus_take_their_nodes_cpu(gpusched_bin, api, tmp_path):
    """A pod bound without an assignment (a CPU-only pod, a DaemonSet's) takes its CPU,
    memory and pod slot on its node, as kube-scheduler counts them: the filters and
    the policy see what it leaves, until it ends; a restart counts it again from the
    list; /preempt counts kube-scheduler's victims without GPUs as gone."""
    cpu = [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "60", "memory": "100Gi"}}}]
    api.add_pod("default", "web", containers=cpu, node="g1", phase="Running")
    gpu = [{"name": "c", "image": "cuda", "resources": {"requests": {"cpu": "8"},
                                                      "limits": {"nvidia.com/gpu": "1"}}}]
    api.add_pod("default", "train", containers=gpu)
    web_uid = api.get("pods", "web", "default")["metadata"]["uid"]

    def hosts(e):
        r = e.debug(api.get("pods", "train", "default"))
        assert r.status_code == 200, r.text
        return {n["node"]: n["host"] for n in r.json()["nodes"]}

    def check_counted(e):
        wait_for(lambda: hosts(e)["g1"]["other_pods"] == 1, what="web counted on g1")
        assert e.metric("gpusched_extender_other_pods") == 1
        h = hosts(e)
        assert h["g1"] == {"free_cpu_milli": 4000, "free_memory_mib": 412 * 1024, "pods": 1,
                           "other_pods": 1}, h
        assert h["g2"]["free_cpu_milli"] == 64000 and h["g2"]["other_pods"] == 0, h
        f = e.filter(api.get("pods", "train", "default"), ["g1", "g2"])
        assert f["NodeNames"] == ["g2"], f
        assert "node has 4000m CPU free of 64000m, pod needs 8000m" in f["FailedNodes"]["g1"]

    e = start(gpusched_bin, api, tmp_path)
    try:
        check_counted(e)
        # kube-scheduler's victims without GPUs count as gone for /preempt, and
        # nothing stays taken off afterwards
        high = api.get("pods", "train", "default")
        high["spec"]["priority"] = 1000
        r = e.post("preempt", {"Pod": high, "NodeNameToMetaVictims": {
            "g1": {"Pods": [{"UID": web_uid}], "NumPDBViolations": 0}}})
        assert r.json()["NodeNameToMetaVictims"]["g1"]["Pods"] == [{"UID": web_uid}], r.text
        r = e.post("preempt", {"Pod": high, "NodeNameToMetaVictims": {
            "g1": {"Pods": [], "NumPDBViolations": 0}}})
        assert r.json()["NodeNameToMetaVictims"] == {}, r.text
        check_counted(e)
    finally:
        e.stop()
    e = start(gpusched_bin, api, tmp_path)  # the list counts it again
    try:
        check_counted(e)
        api.update("pods", "web", "default",
                   fn=lambda p: p["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: hosts(e)["g1"]["free_cpu_milli"] == 64000, what="web's CPU freed")
        assert hosts(e)["g1"]["pods"] == 0
        # moved to g2 (a new pod object under the same UID does not happen; a
        # delete and a new pod does)
        api.add_pod("default", "batch", containers=cpu, node="g2", phase="Pending")
        wait_for(lambda: hosts(e)["g2"]["other_pods"] == 1, what="batch counted on g2")
        node, r = schedule(e, api, "train")
        assert node == "g1" and bound(r), (node, r.text)
        api.delete("pods", "batch", "default")
        wait_for(lambda: hosts(e)["g2"]["free_cpu_milli"] == 64000, what="batch's CPU freed")
    finally:
        e.stop()


def ranked_on(e, p, nodes):
    """The node of pod p's top /prioritize score among nodes, and each node's
    preference (its soft score, /debug/pods; 0 where none applies)."""
    r = e.post("prioritize", {"Pod": p, "NodeNames": nodes})
    assert r.status_code == 200, r.text
    pref = {n["node"]: n.get("preference") or 0 for n in e.debug(p).json()["nodes"]}
    return max(r.json(), key=lambda h: h["Score"])["Host"], pref


def test_pods_without_gpus_count_for_pod_affinity(gpusched_bin, api, tmp_path):
    """Preferred pod (anti-)affinity picks pods without GPUs too, as kube-scheduler's
    InterPodAffinity counts every pod: a GPU pod that prefers its CPU-only cache's
    node goes there, one that prefers to avoid it goes to the other node."""
    H = "kubernetes.io/hostname"
    for n in ("h1", "h2"):
        kw = node_kwargs(n)
        kw["labels"] = {H: n}
        api.add_node(n, **kw)
    api.add_pod("default", "cache", node="h2", phase="Running", labels={"app": "cache"},
                containers=[{"name": "c", "image": "x",
                             "resources": {"requests": {"cpu": "1"}}}])

    def prefers(name, kind):
        p = pod(name, {"nvidia.com/gpu": "1"})
        p["spec"]["affinity"] = {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": H}}]}}
        return api.create("/api/v1/namespaces/default/pods", p)

    near, away = prefers("near", "podAffinity"), prefers("away", "podAntiAffinity")
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.debug(near).status_code == 200, what="pods seen")

        def ranked(p):
            return ranked_on(e, p, ["h1", "h2"])
        best, pref = ranked(near)
        assert best == "h2" and pref["h2"] > pref["h1"], (best, pref)
        best, pref = ranked(away)
        assert best == "h1" and pref["h1"] > pref["h2"], (best, pref)
        # relabelled, the cache is picked no more, at once (the same pod asked
        # again, nothing else changed)
        api.update("pods", "cache", "default",
                   fn=lambda q: q["metadata"].__setitem__("labels", {"app": "old"}))
        wait_for(lambda: len(set(ranked(near)[1].values())) == 1, what="cache relabelled")
        api.update("pods", "cache", "default",
                   fn=lambda q: q["metadata"].__setitem__("labels", {"app": "cache"}))
        wait_for(lambda: ranked(near)[0] == "h2", what="cache picked again")
        # so for a GPU pod placed: a pod that prefers to avoid it goes to the
        # other node until it is relabelled, and then where the policy packs it
        # (the kept /prioritize reply is not kept across the relabel)
        gp = pod("gcache", {"nvidia.com/gpu": "1"})
        gp["metadata"]["labels"] = {"app": "gcache"}
        gp = api.create("/api/v1/namespaces/default/pods", gp)
        wait_for(lambda: e.filter(gp, ["h1"])["NodeNames"], what="gcache seen")
        assert bound(e.bind(gp, "h1"))
        p2 = pod("near2", {"nvidia.com/gpu": "1"})
        p2["spec"]["affinity"] = {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "gcache"}}, "topologyKey": H}}]}}
        p2 = api.create("/api/v1/namespaces/default/pods", p2)
        wait_for(lambda: e.debug(p2).status_code == 200 and ranked(p2)[0] == "h2",
                 what="near2 avoids gcache's node")
        assert ranked(p2)[0] == "h2"  # asked again: the kept reply
        api.update("pods", "gcache", "default",
                   fn=lambda q: q["metadata"].__setitem__("labels", {"app": "old"}))
        wait_for(lambda: len(set(ranked(p2)[1].values())) == 1, what="gcache relabelled")
        assert ranked(p2)[0] == "h1", "a kept reply from before the relabel"  # packed
        # the cache ends: nothing picks any more, the two rank alike
        api.update("pods", "cache", "default",
                   fn=lambda q: q["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: len(set(ranked(near)[1].values())) == 1, what="cache no longer counted")
    finally:
        e.stop()


def test_a_lagging_pod_copy_sets_no_nomination(gpusched_bin, api, tmp_path):
    """kube-scheduler sends its informer's copy of a pod, which may lag the watch:
    a /filter or /prioritize whose Pod still names a nomination the watch has
    withdrawn does not set it again (it would keep the node's GPUs for that pod
    until its next change), nor does one naming a nomination the watch has not
    told. Only the watch sets and withdraws them."""
    add_gpu_pod(api, "high", "2", priority=1000)
    add_gpu_pod(api, "low", "2", priority=100)
    e = start(gpusched_bin, api, tmp_path)

    def nominated():
        return e.metric("gpusched_extender_nominated_pods")

    def low_fits_g1():
        return e.filter(api.get("pods", "low", "default"), ["g1"])["NodeNames"] == ["g1"]
    try:
        wait_for(low_fits_g1, what="low seen")
        api.update("pods", "high", "default",
                   fn=lambda p: p["status"].__setitem__("nominatedNodeName", "g1"))
        stale = api.get("pods", "high", "default")
        wait_for(lambda: nominated() == 1, what="high nominated")
        assert not low_fits_g1()  # g1's 2 GPUs kept for high
        api.update("pods", "high", "default",
                   fn=lambda p: p["status"].pop("nominatedNodeName"))
        wait_for(lambda: nominated() == 0, what="the nomination withdrawn")
        for verb in ("filter", "prioritize"):  # kube-scheduler's lagging copy
            assert e.post(verb, {"Pod": stale, "NodeNames": ["g1", "g2"]}).status_code == 200
            assert nominated() == 0, verb
            assert low_fits_g1(), verb
        ahead = api.get("pods", "high", "default")
        ahead["status"]["nominatedNodeName"] = "g1"
        e.filter(ahead, ["g1", "g2"])
        assert nominated() == 0 and low_fits_g1()
    finally:
        e.stop()


def test_placed_pods_terms_pick_the_pods_to_come(gpusched_bin, api, tmp_path):
    """kube-scheduler's symmetric half of InterPodAffinity: the terms of pods already
    placed that pick an incoming pod rank the nodes for it, though it has no terms of
    its own. A CPU-only guard that prefers no app=noisy beside it keeps a noisy GPU pod
    off its node (weight -100), where the policy packs a plain pod of the same shape;
    a GPU pod bound with such a term does the same; a
    required podAffinity term adds hardPodAffinityWeight (1). Kept answers never mix
    the two pods. A term picks in its own pod's namespace unless it names others."""
    H = "kubernetes.io/hostname"
    for n in ("h1", "h2"):
        kw = node_kwargs(n)
        kw["labels"] = {H: n}
        api.add_node(n, **kw)

    def term(kind, app, weight=None):
        t = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": H}
        if weight is None:
            return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "podAffinityTerm": t}]}}

    def cpu_pod(name, node, affinity, ns="default"):  # (a pod's affinity never changes)
        api.create(f"/api/v1/namespaces/{ns}/pods", {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "affinity": affinity, "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}})

    def gpu(name, labels=None, affinity=None):
        p = pod(name, {"nvidia.com/gpu": "1"})
        p["metadata"]["labels"] = labels or {}
        p["metadata"]["annotations"] = {PREFIX + "policy": "binpack"}
        if affinity:
            p["spec"]["affinity"] = affinity
        return api.create("/api/v1/namespaces/default/pods", p)

    cpu_pod("guard", "h2", term("podAntiAffinity", "noisy", 100))
    noisy, plain = gpu("noisy", {"app": "noisy"}), gpu("plain", {"app": "quiet"})
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.debug(noisy).status_code == 200, what="pods seen")

        def ranked(p):
            return ranked_on(e, p, ["h1", "h2"])

        def alike(p):
            return len(set(ranked(p)[1].values())) == 1

        def scores(p, nodes):
            r = e.post("prioritize", {"Pod": p, "NodeNames": nodes})
            return {h["Host"]: h["Score"] for h in r.json()}

        # a GPU pod on h2: the policy packs the next one there
        base = gpu("base")
        wait_for(lambda: e.filter(base, ["h2"])["NodeNames"], what="base seen")
        assert bound(e.bind(base, "h2"))
        wait_for(lambda: ranked(noisy)[0] == "h1", what="noisy kept off the guard's node")
        assert e.metric("gpusched_extender_pod_term_owners") == 1  # the guard
        best, pref = ranked(noisy)
        assert pref["h1"] > pref["h2"], pref
        for _ in range(2):  # asked in turn: a kept answer for one is not the other's
            assert alike(plain), ranked(plain)
            # the same shape, another label: not noisy's kept reply (a list only
            # plain is asked with has none)
            assert scores(plain, ["h1", "h2"]) == scores(plain, ["h2", "h1"])
            assert ranked(plain)[0] == "h2"  # packed
            assert ranked(noisy)[0] == "h1"
        # the guard ends: its term goes with it
        api.update("pods", "guard", "default",
                   fn=lambda q: q["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: alike(noisy), what="the guard's term gone")
        # a required podAffinity term adds 1 to its node's domain
        cpu_pod("buddy", "h2", term("podAffinity", "noisy"))
        wait_for(lambda: ranked(noisy)[1]["h2"] > ranked(noisy)[1]["h1"], what="buddy's pull")
        assert ranked(noisy)[0] == "h2" and alike(plain)
        api.delete("pods", "buddy", "default")
        wait_for(lambda: alike(noisy), what="buddy deleted")
        # a GPU pod bound with an anti-affinity term: its node is avoided; once it
        # ends, not
        g = gpu("gguard", affinity=term("podAntiAffinity", "noisy", 50))
        wait_for(lambda: e.filter(g, ["h1"])["NodeNames"], what="gguard seen")
        assert bound(e.bind(g, "h1"))
        wait_for(lambda: ranked(noisy)[0] == "h2", what="noisy kept off gguard's node")
        assert ranked(noisy)[1]["h2"] > ranked(noisy)[1]["h1"] and alike(plain)
        api.update("pods", "gguard", "default",
                   fn=lambda q: q["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: alike(noisy), what="gguard's term gone")
        assert e.metric("gpusched_extender_pod_term_owners") == 0
        # a term picks in its own pod's namespace unless it names others
        cpu_pod("guard-b", "h2", term("podAntiAffinity", "noisy", 100), ns="team-b")
        wait_for(lambda: e.metric("gpusched_extender_pod_term_owners") == 1, what="guard-b")
        assert alike(noisy) and ranked(noisy)[0] == "h2"  # packed beside base
        named = term("podAntiAffinity", "noisy", 100)
        named["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "podAffinityTerm"]["namespaces"] = ["default"]
        cpu_pod("guard-c", "h2", named, ns="team-c")
        wait_for(lambda: ranked(noisy)[0] == "h1", what="guard-c's term, naming default")
        assert alike(plain)
    finally:
        e.stop()


def test_hard_pod_affinity_weight_follows_the_scheduler(gpusched_bin, api, tmp_path):
    """hard_pod_affinity_weight is kube-scheduler's InterPodAffinityArgs
    hardPodAffinityWeight: what a placed pod's required podAffinity term adds
    for the pods it picks. On h1 a pod requires app=noisy beside it (+W) and
    another prefers it away (-5): at the default 1 noisy goes to h2 (-4 < 0),
    at 10 to h1 (+5 > 0); 0 leaves the required term out (-5). A weight out
    of kube-scheduler's 0..100 is refused at start, naming the key."""
    H = "kubernetes.io/hostname"
    for n in ("h1", "h2"):
        kw = node_kwargs(n)
        kw["labels"] = {H: n}
        api.add_node(n, **kw)
    t = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": H}
    for name, aff in (
            ("buddy", {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}),
            ("guard", {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": t}]}})):
        api.create("/api/v1/namespaces/default/pods", {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "h1", "affinity": aff, "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}})
    p = pod("noisy", {"nvidia.com/gpu": "1"})
    p["metadata"]["labels"] = {"app": "noisy"}
    p["metadata"]["annotations"] = {PREFIX + "policy": "binpack"}
    noisy = api.create("/api/v1/namespaces/default/pods", p)
    for extra, best, h1, owners in (
            ((), "h2", -4, 2), (("--hard-pod-affinity-weight", "10"), "h1", 5, 2),
            (("--hard-pod-affinity-weight", "0"), "h2", -5, 1)):  # buddy's term left out
        e = start(gpusched_bin, api, tmp_path, *extra)
        try:
            wait_for(lambda: e.metric("gpusched_extender_pod_term_owners") == owners,
                     what="the placed pods' terms")
            got, pref = ranked_on(e, noisy, ["h1", "h2"])
            assert (got, pref["h1"] - pref["h2"] < 0) == (best, h1 < 0), (extra, got, pref)
        finally:
            e.stop()
    kc = api.write_kubeconfig(tmp_path / "kc-bad")
    r = run(gpusched_bin, "extender", "--kubeconfig", kc, "--hard-pod-affinity-weight", "101",
            timeout=10)
    assert r.returncode == 2 and "--hard-pod-affinity-weight: 101" in r.stderr, r.stderr


def test_a_replica_that_does_not_lead_nudges_the_pods_it_refused(gpusched_bin, api, tmp_path):
    """A non-leader answers a /filter itself when it cannot reach the leader (here b
    cannot: a's identity names no address); only b knows that the pod found no node,
    so b nudges it when GPUs free up, or it waits for kube-scheduler's flush."""
    for n in ("big1", "big2", "waiting"):
        add_gpu_pod(api, n, "2")
    args = ["--leader-elect", "--lease-duration", "30", "--lease-namespace", "kube-system"]
    a = start(gpusched_bin, api, tmp_path, *args, "--identity", "a", name="kc-a")
    wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
    # a leading nudges the pods pending at its start, once
    wait_for(lambda: a.metric("gpusched_extender_nudges_total") == 3, what="a's first nudge")
    b = start(gpusched_bin, api, tmp_path, *args, "--identity", "b", name="kc-b")
    try:
        fill_both_nodes(a, api, "big1", "big2")
        wait_for(lambda: b.metric("gpusched_allocations") == 2, what="b sees the binds")
        assert b.filter(api.get("pods", "waiting", "default"), ["g1", "g2"])["NodeNames"] == []
        freed_at, a_nudges = micro_now(), a.metric("gpusched_extender_nudges_total")
        api.update("pods", "big1", "default",
                   fn=lambda p: p["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: api.get("pods", "waiting", "default")["metadata"]["annotations"]
                 .get(PREFIX + "retry-at", "") >= freed_at, what="b's nudge after the free")
        assert b.metric("gpusched_extender_nudges_total") >= 1
        assert a.metric("gpusched_extender_nudges_total") == a_nudges  # a never refused it
    finally:
        a.stop()
        b.stop()


def test_pods_without_gpus_asking_past_any_node_lose_nothing(gpusched_bin, api, tmp_path):
    """Requests the API server takes but no node holds (7Ei of memory, twice on one
    node: more than an int64 together): the sums do not overflow, the node refuses
    GPU pods with a clear reason, and once both pods go the node is whole again. A
    request past an int64 (8Ei) is refused by the parser and counts nothing, without
    taking the extender down."""
    huge = [{"name": "c", "image": "x", "resources": {"requests": {"memory": "7Ei"}}}]
    for n in ("huge-1", "huge-2"):
        api.add_pod("default", n, containers=huge, node="g1", phase="Running")
    api.add_pod("default", "past", node="g2", phase="Running", containers=[
        {"name": "c", "image": "x", "resources": {"requests": {"memory": "8Ei"}}}])
    add_gpu_pod(api, "train", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        def host(node):
            r = e.debug(api.get("pods", "train", "default")).json()
            return next(n["host"] for n in r["nodes"] if n["node"] == node)
        wait_for(lambda: host("g1")["other_pods"] == 2, what="both counted")
        assert host("g2")["other_pods"] == 0
        f = e.filter(api.get("pods", "train", "default"), ["g1", "g2"])
        assert f["NodeNames"] == ["g2"] and "MiB memory free" in f["FailedNodes"]["g1"], f
        for n in ("huge-1", "huge-2"):
            api.delete("pods", n, "default")
        wait_for(lambda: host("g1")["other_pods"] == 0, what="both gone")
        assert host("g1")["free_memory_mib"] == 512 * 1024
        assert e.filter(api.get("pods", "train", "default"), ["g1"])["NodeNames"] == ["g1"]
    finally:
        e.stop()


def test_gpus_of_a_nominated_pod_are_kept_for_it(gpusched_bin, api, tmp_path):
    """After a preemption kube-scheduler nominates the preemptor to the victims'
    node and keeps pods of lower or equal priority off its CPU there, but not off
    its GPUs (ignoredByScheduler): the extender keeps them. While the victim still
    terminates, the node is refused to the pods the nominated one outranks; once it
    is gone they may take only what the nominated pod leaves; a pod of higher
    priority is not held off; the nominated pod itself is not held off by its own
    nomination. /bind refuses what /filter would, /preempt does not offer the
    node to them, /debug/pods says why, and a withdrawn nomination nudges the pods
    it held off."""
    add_gpu_pod(api, "victim", "1", priority=100)
    add_gpu_pod(api, "mid", "2", priority=500)
    add_gpu_pod(api, "high", "2", priority=1000)
    add_gpu_pod(api, "low", "1", priority=100)
    add_gpu_pod(api, "peer", "2", priority=1000)
    add_gpu_pod(api, "top", "1", priority=2000)
    e = start(gpusched_bin, api, tmp_path)
    try:
        for name, node in (("victim", "g1"), ("mid", "g2")):
            wait_for(lambda: e.filter(api.get("pods", name, "default"), [node])["NodeNames"],
                     what=f"{name} seen")
            assert bound(e.bind(api.get("pods", name, "default"), node))
        low = api.get("pods", "low", "default")
        assert e.filter(low, ["g1", "g2"])["NodeNames"] == ["g1"]  # one GPU free there
        # kube-scheduler's preemption for high: the victim is deleted (it
        # terminates for a while) and high is nominated to g1
        api.update("pods", "victim", "default",
                   fn=lambda p: p["metadata"].__setitem__("deletionTimestamp", micro_now()))
        api.update("pods", "high", "default",
                   fn=lambda p: p["status"].__setitem__("nominatedNodeName", "g1"))
        f = wait_for(lambda: (lambda f: f if not f["NodeNames"] else None)(
            e.filter(api.get("pods", "low", "default"), ["g1", "g2"])), what="g1 kept")
        assert "node kept for pod default/high (priority 1000), nominated to it by a " \
               "preemption, which does not fit there yet" in f["FailedNodes"]["g1"], f
        assert e.metric("gpusched_extender_nominated_pods") == 1
        # equal priority is held off too (kube-scheduler adds nominated pods of
        # priority >= the pod's); a higher one is not; nor is high itself
        assert e.filter(api.get("pods", "peer", "default"), ["g1"])["NodeNames"] == []
        # /preempt does not offer peer the node kept for high (it would evict the
        # victim for it), only mid's node
        r = e.post("preempt", {"Pod": api.get("pods", "peer", "default"), "NodeNameToMetaVictims": {
            n: {"Pods": [], "NumPDBViolations": 0} for n in ("g1", "g2")}})
        mid_uid = api.get("pods", "mid", "default")["metadata"]["uid"]
        assert r.json()["NodeNameToMetaVictims"] == {
            "g2": {"Pods": [{"UID": mid_uid}], "NumPDBViolations": 0}}, r.text
        assert e.filter(api.get("pods", "top", "default"), ["g1"])["NodeNames"] == ["g1"]
        fh = e.filter(api.get("pods", "high", "default"), ["g1"])
        assert fh["NodeNames"] == [] and "nominated" not in fh["FailedNodes"]["g1"], fh
        # the Nodes form, with nodes the extender learns from the request itself
        r = e.post("filter", {"Pod": api.get("pods", "low", "default"), "NodeNames": None,
                              "Nodes": {"items": [gpu_node(f"x{i}") for i in range(3)]}})
        assert r.status_code == 200 and len(r.json()["Nodes"]["items"]) == 3, r.text
        r = e.debug(api.get("pods", "low", "default")).json()
        g1 = [n for n in r["nodes"] if n["node"] == "g1"][0]
        assert not g1["fits"] and g1["filter"] == "NominatedPods", g1
        # a bind kube-scheduler decided before the nomination is refused too
        refused(e.bind(api.get("pods", "low", "default"), "g1"), "nominated")
        # the victim is gone: high fits, and what it leaves is still not enough
        api.delete("pods", "victim", "default")
        wait_for(lambda: e.filter(api.get("pods", "high", "default"), ["g1"])["NodeNames"],
                 what="the victim's GPU freed")
        f = e.filter(api.get("pods", "low", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [] and "GPUs kept for pod default/high (priority 1000), " \
            "nominated to this node by a preemption" in f["FailedNodes"]["g1"], f
        # high is deleted: its nomination goes, low is nudged and fits g1
        gone_at = micro_now()
        api.delete("pods", "high", "default")
        wait_for(lambda: api.get("pods", "low", "default")["metadata"]["annotations"]
                 .get(PREFIX + "retry-at", "") >= gone_at, what="nudge after the nomination went")
        assert e.filter(api.get("pods", "low", "default"), ["g1", "g2"])["NodeNames"] == ["g1"]
        assert e.metric("gpusched_extender_nominated_pods") == 0
        assert bound(e.bind(api.get("pods", "low", "default"), "g1"))
    finally:
        e.stop()


def test_filter_preemption_deletes_the_victims_and_keeps_the_node(gpusched_bin, api, tmp_path):
    """--filter-preemption (kube-scheduler 1.22+ never asks /preempt when GPUs alone
    keep a pod out): a GPU pod that no node fits has the leader choose the victims
    and the node as kube-scheduler would (lowest highest victim priority first),
    delete them with their UID as a precondition, post Preempted events and
    nominate the pod there; the node is kept for it from the start. A /filter of
    the pod while its preemption is under way preempts nothing more, /preempt
    offers it nothing, a failed delete forgets the preemption (the node is not
    kept) and a pod with preemptionPolicy Never preempts nothing."""
    for name, prio in (("a", 100), ("b", 500), ("c", 100), ("d", 100)):
        add_gpu_pod(api, name, "1", priority=prio)
    add_gpu_pod(api, "high", "2", priority=1000)
    add_gpu_pod(api, "late", "1", priority=100)
    never = pod("never", {"nvidia.com/gpu": "2"})
    api.add_pod("default", "never", containers=never["spec"]["containers"], priority=2000)
    api.update("pods", "never", "default",
               fn=lambda p: p["spec"].__setitem__("preemptionPolicy", "Never"))
    e = start(gpusched_bin, api, tmp_path, "--filter-preemption")
    try:
        for name, node in (("a", "g1"), ("b", "g1"), ("c", "g2"), ("d", "g2")):
            wait_for(lambda: e.filter(api.get("pods", name, "default"), [node])["NodeNames"],
                     what=f"{name} seen")
            assert bound(e.bind(api.get("pods", name, "default"), node))
        names = lambda: sorted(p["metadata"]["name"] for p in api.list("pods"))
        # Never: no node, nothing deleted
        f = e.filter(api.get("pods", "never", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [] and names() == ["a", "b", "c", "d", "high", "late", "never"]
        # a failed delete: nothing kept, nothing nominated, tried again next time
        api.fail("DELETE", "/pods/", 403, message="pods is forbidden")
        assert e.filter(api.get("pods", "high", "default"), ["g1", "g2"])["NodeNames"] == []
        wait_for(lambda: e.metric('gpusched_extender_decisions_total{verb="preempt",'
                                  'result="from_filter_error"}') == 1, what="the delete failed")
        assert e.metric("gpusched_extender_nominated_pods") == 0
        assert names() == ["a", "b", "c", "d", "high", "late", "never"]
        assert not api.get("pods", "high", "default")["status"].get("nominatedNodeName")
        # g1 would cost a 500, g2 two 100s: g2. The deletes are slow and go on
        # after /filter answers (off the HTTP worker, whose other connections
        # would wait behind them: the second /filter below, sent on one of
        # them, was once answered after the victims were gone). Meanwhile a
        # second /filter preempts nothing more and gets no node, /preempt
        # offers nothing
        api.delay("DELETE", "/pods/", 6.0, times=2)
        t0 = time.monotonic()
        f = e.filter(api.get("pods", "high", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [] and time.monotonic() - t0 < 4.5, f
        assert e.metric("gpusched_extender_nominated_pods") == 1  # kept from the start
        f = e.filter(api.get("pods", "high", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [], f
        r = e.post("preempt", {"Pod": api.get("pods", "high", "default"),
                               "NodeNameToMetaVictims": {
                                   n: {"Pods": [], "NumPDBViolations": 0} for n in ("g1", "g2")}})
        assert r.json()["NodeNameToMetaVictims"] == {}, r.text
        assert time.monotonic() - t0 < 5.0, "answered while the first delete is under way"
        wait_for(lambda: names() == ["a", "b", "high", "late", "never"], what="the victims gone")
        wait_for(lambda: e.metric('gpusched_extender_decisions_total{verb="preempt",'
                                  'result="from_filter"}') == 1, what="the preemption done")
        assert api.get("pods", "high", "default")["status"]["nominatedNodeName"] == "g2"
        reasons = [(ev["involvedObject"]["name"], ev["reason"], ev["message"])
                   for ev in api.list("events") if ev["reason"] == "Preempted"]
        assert sorted(reasons) == [(v, "Preempted", "Preempted by default/high on node g2")
                                   for v in ("c", "d")], reasons
        assert e.metric('gpusched_extender_decisions_total{verb="preempt",'
                        'result="from_filter"}') == 1
        assert e.metric('gpusched_extender_decisions_total{verb="preempt",'
                        'result="from_filter_error"}') == 1
        # kube-scheduler 1.22+ clears the nomination when it finds no victim of
        # its own: the extender keeps the node for high all the same
        api.update("pods", "high", "default", fn=lambda p: p["status"].pop("nominatedNodeName"))
        # and across a relist of the pods (410 Gone), which forgets and lists
        # every pending pod again
        lists = e.metric('gpusched_extender_lists_total{resource="pods"}')
        api.drop_watches(gone=True)
        wait_for(lambda: e.metric('gpusched_extender_lists_total{resource="pods"}') > lists,
                 what="the pods listed again")
        assert not api.get("pods", "high", "default")["status"].get("nominatedNodeName")
        assert e.metric("gpusched_extender_nominated_pods") == 1
        # the victims are gone: high fits g2, late is kept off it, and nothing
        # more was deleted
        wait_for(lambda: e.filter(api.get("pods", "high", "default"), ["g1", "g2"])["NodeNames"]
                 == ["g2"], what="high fits g2")
        f = e.filter(api.get("pods", "late", "default"), ["g1", "g2"])
        assert f["NodeNames"] == [] and "kept for pod default/high" in f["FailedNodes"]["g2"], f
        assert names() == ["a", "b", "high", "late", "never"]
        assert bound(e.bind(api.get("pods", "high", "default"), "g2"))
        wait_for(lambda: e.metric("gpusched_extender_nominated_pods") == 0,
                 what="the nomination ends with the bind")
    finally:
        e.stop()


def test_bind_drops_a_copied_allocated_mark(gpusched_bin, api, tmp_path):
    """A pod copied with its annotations (kubectl debug --copy-to, a saved manifest)
    can carry the device plugin's allocated-at mark: the device plugin would take the
    new pod as served and find no pod for kubelet's Allocate (the pod fails
    admission), and the node lock would not wait for it. The bind removes it."""
    add_gpu_pod(api, "copy", "1", annotations={PREFIX + "allocated-at": "2026-01-01T00:00:00Z",
                                               "team": "a"})
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "copy", "default"), ["g1"])["NodeNames"],
                 what="copy seen")
        assert bound(e.bind(api.get("pods", "copy", "default"), "g1"))
        ann = api.get("pods", "copy", "default")["metadata"]["annotations"]
        assert PREFIX + "allocated-at" not in ann and ann["team"] == "a", ann
        assert ann[PREFIX + "node"] == "g1"
    finally:
        e.stop()


def test_a_bind_of_a_new_pod_under_a_bound_pods_name_is_not_taken_for_it(gpusched_bin, api,
                                                                            tmp_path):
    """A StatefulSet's pod made again under its name is a new pod (a new UID). Its
    /bind, reaching a replica that has not seen it in /filter (nor the old one's
    deletion yet), is refused as unknown; it was taken for the old pod of the name,
    which holds GPUs on that node, and answered "bound" with no Binding made."""
    add_gpu_pod(api, "s", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert schedule(e, api, "s", ("g1",))[1].json()["Error"] == ""
        old = api.get("pods", "s", "default")
        r = e.post("bind", {"PodName": "s", "PodNamespace": "default",
                            "PodUID": old["metadata"]["uid"] + "-new", "Node": "g1"})
        assert "is unknown" in r.json()["Error"], r.text
        # the old pod's own bind, sent again, is still answered bound
        assert bound(e.bind(old, "g1"))
    finally:
        e.stop()


def test_a_bind_sent_while_the_extender_stops_is_refused(gpusched_bin, api, tmp_path):
    """Stopping, the extender lets its bind threads finish the binds they hold and
    hands them no more: a /bind that arrives meanwhile is refused (kube-scheduler
    tries the pod again, with the next leader), not carried out on the HTTP worker,
    where its API calls would hold that worker's other connections and the stop."""
    add_gpu_pod(api, "a", "1")
    add_gpu_pod(api, "b", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        for name, node in (("a", "g1"), ("b", "g2")):
            wait_for(lambda: e.filter(api.get("pods", name, "default"), [node])["NodeNames"],
                     what=f"{name} seen")
        api.delay("POST", r"/pods/a/binding$", 6.0)
        out = {}
        t = threading.Thread(target=lambda: out.update(
            a=e.bind(api.get("pods", "a", "default"), "g1")))
        t.start()
        wait_for(lambda: any(m == "POST" and p.endswith("/pods/a/binding")
                             for m, p, _ in list(api.requests)), what="a's bind under way")
        e.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)  # the stop has begun: it waits for a's bind thread
        r = e.bind(api.get("pods", "b", "default"), "g2")
        assert "stopping" in r.json()["Error"], r.text
        t.join()
        assert bound(out["a"])
        assert api.get("pods", "a", "default")["spec"]["nodeName"] == "g1"
        assert not api.get("pods", "b", "default")["spec"].get("nodeName")
    finally:
        e.stop()


def test_pods_keep_their_gpus_when_the_node_changes(gpusched_bin, api, tmp_path):
    """A node's GPU list changes under running pods (GPU 0 leaves the bus and NVML
    numbers the others from 0): each pod keeps the GPU it holds, found by UUID, and
    the next pod gets the free one, not a held one at the held one's old place. A node
    deleted and registered again (its pods kept) gets its pods' GPUs back from their
    annotations."""
    api.add_node("g3", **node_kwargs("g3", n=3))
    add_gpu_pod(api, "held", "1", node="g3", annotations=assignment("g3", ["GPU-g3-1"]))
    add_gpu_pod(api, "b", "1")
    add_gpu_pod(api, "c", "1")
    e = start(gpusched_bin, api, tmp_path)
    try:
        assert e.metric("gpusched_allocations") == 1
        inv = json.loads(node_kwargs("g3", n=3)["annotations"][PREFIX + "gpu-inventory"])
        inv["gpus"] = inv["gpus"][1:]
        for i, g in enumerate(inv["gpus"]):
            g["index"] = i
            g["links"] = [{"gpu": 1 - i, "type": "nvlink"}]
        two = json.dumps(inv)
        api.update("nodes", "g3",
                   fn=lambda o: o["metadata"]["annotations"].update({PREFIX + "gpu-inventory": two}))
        wait_for(lambda: e.metric('gpusched_gpus{node="g3"') == 2, what="g3's 2 GPUs seen")
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g3"])["NodeNames"],
                 what="b cached")
        assert bound(schedule(e, api, "b", ("g3",))[1])
        got = api.get("pods", "b", "default")["metadata"]["annotations"]
        assert got[PREFIX + "gpu-uuids"] == "GPU-g3-2", got
        assert e.filter(api.get("pods", "c", "default"), ["g3"])["NodeNames"] == []
        # deleted and registered again: both pods hold their GPUs once more
        api.delete("nodes", "g3")
        wait_for(lambda: e.metric("gpusched_allocations") == 0, what="g3's pods let go")
        api.add_node("g3", labels={}, annotations={PREFIX + "gpu-inventory": two},
                     capacity=node_kwargs("g3")["capacity"])
        wait_for(lambda: e.metric("gpusched_allocations") == 2, what="g3's pods restored")
        assert e.filter(api.get("pods", "c", "default"), ["g3"])["NodeNames"] == []
    finally:
        e.stop()


def nudged_since(api, name, since):
    return api.get("pods", name, "default")["metadata"]["annotations"].get(
        PREFIX + "retry-at", "") >= since


def test_every_waiting_pod_is_nudged_however_many(gpusched_bin, api, tmp_path):
    """A free nudges every pod /filter refused, not the first 64 of a fixed
    order (the rest waited for kube-scheduler's flush, at every free); a nudge
    that fails is tried again a second later."""
    add_gpu_pod(api, "big1", "2")
    add_gpu_pod(api, "big2", "2")
    names = [f"w{i:02d}" for i in range(70)]
    for n in names:
        add_gpu_pod(api, n, "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        fill_both_nodes(e, api, "big1", "big2")
        for n in names:
            wait_for(lambda: e.filter(api.get("pods", n, "default"), ["g1", "g2"])[
                "NodeNames"] == [], what=f"{n} refused")
        time.sleep(1.5)  # a nudge for the start has come by now
        freed_at = micro_now()
        api.fail("PATCH", r"/pods/w07$", 500, times=1)  # its first nudge fails
        api.update("pods", "big1", "default",
                   fn=lambda p: p["status"].__setitem__("phase", "Succeeded"))
        wait_for(lambda: all(nudged_since(api, n, freed_at) for n in names), timeout=10,
                 what="all 70 nudged")
    finally:
        e.stop()


def test_a_refused_bind_is_nudged(gpusched_bin, api, tmp_path):
    """kube-scheduler parks a pod whose /bind was refused (here the Binding
    failed) in its unschedulable queue, and nothing frees GPUs for it: the
    extender nudges it a second later, or it waited for the 60 s flush."""
    add_gpu_pod(api, "p", "2")
    e = start(gpusched_bin, api, tmp_path)
    try:
        pod = api.get("pods", "p", "default")
        wait_for(lambda: e.filter(pod, ["g1"])["NodeNames"], what="p cached")
        time.sleep(1.5)  # a nudge for the start has come by now
        refused_at = micro_now()
        api.fail("POST", r"/pods/p/binding", 500, times=1)
        assert not bound(e.bind(pod, "g1"))
        answered = time.time()
        wait_for(lambda: nudged_since(api, "p", refused_at), timeout=5, what="p nudged")
        stamp = api.get("pods", "p", "default")["metadata"]["annotations"][PREFIX + "retry-at"]
        at = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(stamp[19:-1])
        assert at >= answered + 0.8, (at, answered)  # once kube-scheduler has let it go
    finally:
        e.stop()


def cpu_seconds(pid):
    """User + system CPU time of process pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_extender_sleeps(gpusched_bin, api, tmp_path):
    """The housekeeping thread wakes once a second: a free it does not act on
    (nudges off) once kept it from sleeping at all, a CPU at 100 %."""
    add_gpu_pod(api, "p", "1")
    e = start(gpusched_bin, api, tmp_path, "--no-nudge")
    try:
        time.sleep(0.5)
        before = cpu_seconds(e.proc.pid)
        time.sleep(2)
        assert cpu_seconds(e.proc.pid) - before < 0.5
    finally:
        e.stop()
