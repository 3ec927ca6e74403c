"""One pending GPU pod per node (issue 12, problem 4), against the fake
kube-apiserver with no kubelet admitting bound pods unless the test does.

kubelet's Allocate names devices only, so the device plugin can tell which
pod an Allocate is for only when one GPU pod on the node waits for it. The
extender therefore binds a GPU pod to a node only when no GPU pod bound
there earlier is still waiting for kubelet; a /bind to a held node waits
(parked, holding no HTTP worker) until the holder is marked allocated
(gpusched.io/allocated-at, by the device plugin), admitted (status.startTime),
gone or finished, or stale, and refuses the bind when bind_wait runs out. The
holders are rebuilt from the pods after a restart.
"""
import threading
import time

import pytest
import requests

from fake_apiserver import FakeApiServer
from test_extender import bound, refused
from test_extender_cluster import PREFIX, add_gpu_pod, node_kwargs, start, wait_for


def registered(node):
    """What a kubelet writes when it registers its Node."""
    node["status"]["nodeInfo"] = {"kubeletVersion": "v1.20.2"}


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.5, kubelet_admits=False) as a:
        a.add_node("g1", **node_kwargs("g1", n=8))
        a.update("nodes", "g1", fn=registered)
        yield a


def bind(e, api, name, node="g1"):
    p = api.get("pods", name, "default")
    f = e.filter(p, [node])
    assert f["NodeNames"] == [node], f
    return e.bind(p, node)


def bind_async(e, api, name, out):
    p = api.get("pods", name, "default")
    f = e.filter(p, ["g1"])
    assert f["NodeNames"] == ["g1"], f

    def go():
        t0 = time.monotonic()
        r = e.bind(p, "g1")
        out[name] = (r, time.monotonic() - t0)
    t = threading.Thread(target=go)
    t.start()
    return t


def park_b(e, api):
    """Binds a to g1, then b, whose /bind is parked while a waits for kubelet:
    (thread, out) of bind_async."""
    wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
             what="pods cached")
    assert bound(bind(e, api, "a"))
    out = {}
    t = bind_async(e, api, "b", out)
    time.sleep(0.8)
    assert "b" not in out  # parked while a waits for kubelet
    return t, out


def mark_allocated(api, name):
    api.update("pods", name, "default", lambda o: o["metadata"]["annotations"].update(
        {PREFIX + "allocated-at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


def test_bind_waits_for_the_nodes_pending_pod(gpusched_bin, api, tmp_path):
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path)
    try:
        t, out = park_b(e, api)
        assert api.get("pods", "b", "default")["spec"].get("nodeName") is None
        # the extender still answers meanwhile
        assert requests.get(e.url + "/healthz", timeout=1).status_code == 200
        mark_allocated(api, "a")  # the device plugin answered a's last Allocate
        t.join(5)
        r, took = out["b"]
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert 0.8 < took < 3, took
        assert api.get("pods", "b", "default")["spec"]["nodeName"] == "g1"
        assert e.metric("gpusched_extender_bind_wait_seconds_count") == 1
        assert e.metric("gpusched_extender_bind_wait_timeouts_total") == 0
    finally:
        e.stop()


def test_bind_parked_across_a_certificate_rotation(gpusched_bin, api, tmp_path):
    """A /bind parked on its node when the serving certificate turns is answered on
    its own connection when the node is released; new connections get the new
    certificate meanwhile."""
    import shutil
    import ssl
    from test_webhook import gen_certs

    old = gen_certs(gpusched_bin, tmp_path / "old")
    new = gen_certs(gpusched_bin, tmp_path / "new")
    live = tmp_path / "live"
    live.mkdir()
    for f in ("tls.crt", "tls.key"):
        shutil.copy(old / f, live / f)
    bundle = tmp_path / "cas.crt"
    bundle.write_text((old / "ca.crt").read_text() + (new / "ca.crt").read_text())
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--tls-cert", str(live / "tls.crt"),
              "--tls-key", str(live / "tls.key"), verify=str(bundle))
    try:
        t, out = park_b(e, api)
        before = ssl.get_server_certificate(("127.0.0.1", e.port))
        for f in ("tls.key", "tls.crt"):
            shutil.copy(new / f, live / f)
        wait_for(lambda: ssl.get_server_certificate(("127.0.0.1", e.port)) != before,
                 what="the new certificate served while b is parked")
        assert "b" not in out
        mark_allocated(api, "a")
        t.join(5)
        r, took = out["b"]
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert r.headers.get("Connection") == "close", r.headers
        assert api.get("pods", "b", "default")["spec"]["nodeName"] == "g1"
        assert e.metric('gpusched_extender_tls_reloads_total{result="ok"}') == 1
    finally:
        e.stop()


def test_wait_runs_out_then_admission_releases(gpusched_bin, api, tmp_path):
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--bind-wait", "1")
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
                 what="pods cached")
        assert bound(bind(e, api, "a"))
        t0 = time.monotonic()
        msg = refused(bind(e, api, "b"))
        assert 0.9 < time.monotonic() - t0 < 3
        assert "GPU pod default/a" in msg and "not yet admitted by kubelet" in msg, msg
        assert e.metric("gpusched_extender_bind_wait_timeouts_total") == 1
        # nothing of b was written, nothing held
        assert PREFIX + "node" not in api.get("pods", "b", "default")["metadata"]["annotations"]
        # kubelet admitting a (status.startTime) releases the node too
        api.update("pods", "a", "default", lambda o: o["status"].update(
            startTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        wait_for(lambda: bound(bind(e, api, "b")), timeout=5, what="b bound")
    finally:
        e.stop()


def b_refused_for_held_node(gpusched_bin, api, tmp_path):
    """An extender (bind_wait 0.5 s) that bound pod a to g1 and then answered b's
    /bind refused, g1 being held by a (not yet allocated). The caller stops it."""
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--bind-wait", "0.5")
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
                 what="pods cached")
        time.sleep(1.5)  # past the nudge round that follows the start's pod list
        assert bound(bind(e, api, "a"))
        refused(bind(e, api, "b"), "not yet admitted")
    except BaseException:
        e.stop()
        raise
    return e


def test_pod_whose_wait_ran_out_is_nudged_when_the_node_is_released(gpusched_bin, api,
                                                                   tmp_path):
    """After a 503 kube-scheduler keeps the pod in its unschedulable queue
    until a cluster event (60 s in 1.20); the release of its node is one,
    told by a pod update (gpusched.io/retry-at), as when GPUs free up."""
    e = b_refused_for_held_node(gpusched_bin, api, tmp_path)
    try:
        def retry_at():
            return api.get("pods", "b", "default")["metadata"]["annotations"].get(
                PREFIX + "retry-at")
        before = retry_at()  # the start's nudge of every pending pod, or none
        time.sleep(1.5)
        assert retry_at() == before
        mark_allocated(api, "a")
        wait_for(lambda: retry_at() != before, timeout=5, what="b nudged")
        assert bound(bind(e, api, "b"))
    finally:
        e.stop()


def retry_patches(api, name):
    """The extender's nudges of pod default/NAME: PATCHes that set gpusched.io/retry-at."""
    with api.lock:
        return [b for m, path, b in api.requests
                if m == "PATCH" and path.split("?")[0] == f"/api/v1/namespaces/default/pods/{name}"
                and PREFIX + "retry-at" in ((b or {}).get("metadata") or {}).get("annotations", {})]


def test_pod_on_both_nudge_lists_is_patched_once(gpusched_bin, api, tmp_path):
    """A pod whose bind found its node held (refused) and whose next /filter then found no
    node is on both lists a nudge reads (bind retries and unschedulable pods): the
    release of the node patches it once, not once per list."""
    e = b_refused_for_held_node(gpusched_bin, api, tmp_path)
    try:
        # kube-scheduler tries b again and finds no node this time (only an unknown one
        # is offered): b is unschedulable as well as waiting for its bind's retry
        f = e.filter(api.get("pods", "b", "default"), ["gone"])
        assert f["NodeNames"] == [], f
        time.sleep(1.5)
        n0 = len(retry_patches(api, "b"))  # the start's nudge of every pending pod
        time.sleep(1.5)
        assert len(retry_patches(api, "b")) == n0
        mark_allocated(api, "a")
        wait_for(lambda: len(retry_patches(api, "b")) > n0, timeout=5, what="b nudged")
        time.sleep(1.5)  # a second patch would come in the same nudge round
        assert len(retry_patches(api, "b")) == n0 + 1, retry_patches(api, "b")
    finally:
        e.stop()


def test_holder_rebuilt_after_restart_and_released_by_delete(gpusched_bin, api, tmp_path):
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "a", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        assert bound(bind(e, api, "a"))
    finally:
        e.stop()
    e = start(gpusched_bin, api, tmp_path, "--bind-wait", "0.5")
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
                 what="pod cached")
        r = bind(e, api, "b")
        refused(r, "default/a")
        out = {}
        e2 = e
        t = bind_async(e2, api, "b", out)  # waits again ...
        time.sleep(0.1)
        api.delete("pods", "a", "default")  # ... until the holder is gone
        t.join(5)
        assert bound(out["b"][0]), out["b"][0].text
    finally:
        e.stop()


def test_stale_holder_releases_the_node(gpusched_bin, api, tmp_path):
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--node-lock-timeout", "1.5", "--bind-wait", "5")
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
                 what="pods cached")
        assert bound(bind(e, api, "a"))
        t0 = time.monotonic()
        r = bind(e, api, "b")
        took = time.monotonic() - t0
        assert bound(r), r.text
        assert 1.0 < took < 3.5, took  # a held g1 for node_lock_timeout, not for bind_wait
    finally:
        e.stop()


def test_burst_to_one_node_is_serialised(gpusched_bin, api, tmp_path):
    """Eight pods bound to one node at once, a kubelet that admits each
    bound pod after 0.1 s: all bound, one waiting for kubelet at a time, and
    the parked binds hold no HTTP worker (/filter answers meanwhile)."""
    names = [f"p{i}" for i in range(8)]
    for n in names:
        add_gpu_pod(api, n, annotations={})
    e = start(gpusched_bin, api, tmp_path, "--threads", "2", "--bind-wait", "8")
    worst, stop = [0], threading.Event()

    def kubelet():
        while not stop.is_set():
            pending = [p for p in api.list("pods") if p["spec"].get("nodeName") and
                       PREFIX + "allocated-at" not in p["metadata"]["annotations"]]
            worst[0] = max(worst[0], len(pending))
            for p in pending:
                time.sleep(0.1)
                mark_allocated(api, p["metadata"]["name"])
            time.sleep(0.02)
    k = threading.Thread(target=kubelet)
    try:
        for n in names:
            wait_for(lambda: e.filter(api.get("pods", n, "default"), ["g1"])["NodeNames"],
                     what="pods cached")
        out = {}
        threads = [bind_async(e, api, n, out) for n in names]
        time.sleep(0.3)
        # more binds parked than HTTP workers, and the extender still answers
        t0 = time.monotonic()
        assert e.filter(api.get("pods", "p0", "default"), ["g1"])["Error"] == ""
        assert time.monotonic() - t0 < 1
        k.start()
        for t in threads:
            t.join(15)
        assert all(bound(out[n][0]) for n in names), {n: out[n][0].text for n in names}
        assert worst[0] == 1, worst
        assert e.metric("gpusched_extender_bind_wait_seconds_count") >= 6
    finally:
        stop.set()
        if k.is_alive():
            k.join()
        e.stop()


def test_no_lock_on_a_node_without_a_kubelet(gpusched_bin, api, tmp_path):
    """A Node written through the API alone (no kubelet registered it: no
    status.nodeInfo.kubeletVersion) never gets an Allocate: nothing to wait for."""
    api.add_node("g2", **node_kwargs("g2", n=8))
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path)
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g2"])["NodeNames"],
                 what="pods cached")
        assert bound(bind(e, api, "a", "g2"))
        t0 = time.monotonic()
        assert bound(bind(e, api, "b", "g2"))
        assert time.monotonic() - t0 < 1
    finally:
        e.stop()


def test_no_lock_when_switched_off(gpusched_bin, api, tmp_path):
    for n in ("a", "b"):
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--node-lock-timeout", "0")
    try:
        wait_for(lambda: e.filter(api.get("pods", "b", "default"), ["g1"])["NodeNames"],
                 what="pods cached")
        assert bound(bind(e, api, "a"))
        t0 = time.monotonic()
        assert bound(bind(e, api, "b"))
        assert time.monotonic() - t0 < 1
    finally:
        e.stop()


def test_a_bind_whose_client_left_hands_nothing_to_the_next(gpusched_bin, api, tmp_path):
    """A /bind parked on its held node whose client gives up (kube-scheduler's
    httpTimeout) is woken when the node is released, and ends; what it left
    (its reply from a bind thread, its clock, its node-lock wake) goes with it
    (http's gone hook; unit tests http and ext_bindq). A leftover found by a
    later request that reuses its memory would answer another pod's /bind with
    this one's reply: here every later pod's bind must really bind it. Whether
    the memory comes back cannot be forced from outside: this checks the path
    end to end (the gone pod is bound when its wake comes first), and ASan runs
    it."""
    names = [f"p{i}" for i in range(8)]
    for n in names:
        add_gpu_pod(api, n)
    e = start(gpusched_bin, api, tmp_path, "--threads", "1")
    try:
        wait_for(lambda: e.filter(api.get("pods", names[-1], "default"), ["g1"])["NodeNames"],
                 what="pods cached")
        held = names[0]
        assert bound(bind(e, api, held))
        for k in range(1, len(names) - 1, 2):
            gone, nxt = names[k], names[k + 1]
            p = api.get("pods", gone, "default")
            assert e.filter(p, ["g1"])["NodeNames"] == ["g1"]
            md = p["metadata"]
            with pytest.raises(requests.exceptions.Timeout):  # parked: held is pending
                requests.post(e.url + "/bind", json={
                    "PodName": md["name"], "PodNamespace": md["namespace"],
                    "PodUID": md["uid"], "Node": "g1"}, timeout=0.5)
            mark_allocated(api, held)  # released: the parked request is woken, and ends
            time.sleep(1)
            if api.get("pods", gone, "default")["spec"].get("nodeName"):
                mark_allocated(api, gone)  # it bound before it found its client gone
            r = bind(e, api, nxt)
            assert bound(r), r.text
            wait_for(lambda: api.get("pods", nxt, "default")["spec"].get("nodeName") == "g1",
                     what=f"{nxt} really bound")
            held = nxt
    finally:
        e.stop()
