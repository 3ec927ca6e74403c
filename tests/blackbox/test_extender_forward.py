"""Two extender replicas behind one URL (ext/forward.h), against the fake
kube-apiserver: when the Lease holder's identity names its address
(NAME@HOST:PORT), a replica that does not lead hands /filter, /prioritize and
/bind to the leader and relays its answers, so kube-scheduler's bind succeeds
whichever replica a Service picked, on a node chosen from the leader's view; a
request already forwarded is never forwarded again; a leader that died leaves
the follower refusing /bind (and answering /filter from its own view) until the
lease expires, then the follower binds itself and nudges the pods left
waiting; identities without an address keep the plain refusal; every forwarded
verb waits for the leader off the follower's HTTP workers."""
import http.server
import json
import os
import signal
import threading
import time

import pytest
import requests

import test_extender
from test_extender import refused
from test_extender_cluster import add_gpu_pod, api, start, wait_for  # noqa: F401

PREFIX = "gpusched.io/"
FWD = 'gpusched_extender_forwarded_total{verb="%s",code="%s"'
ARGS = ["--leader-elect", "--lease-duration", "3", "--lease-namespace", "kube-system"]


def start_as(bin_, api_, tmp_path, ident, name, *extra, verify=None):
    """An extender whose Lease identity carries its own address."""
    port = test_extender.free_port()
    orig = test_extender.free_port
    test_extender.free_port = lambda: port
    try:
        return start(bin_, api_, tmp_path, *ARGS, *extra, "--identity",
                     f"{ident}@127.0.0.1:{port}", name=name, verify=verify)
    finally:
        test_extender.free_port = orig


def test_follower_forwards_bind_to_leader(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "f1", "1")
    add_gpu_pod(api, "f2", "1")
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a")
    wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
    b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b")
    try:
        p = api.get("pods", "f1", "default")
        # b's /filter is the leader's answer once b has read the Lease
        wait_for(lambda: b.filter(p, ["g1"])["NodeNames"] and
                 b.metric(FWD % ("filter", "200")) >= 1, what="b forwards to a")
        assert b.metric("gpusched_extender_leader") == 0
        prio = {"Pod": p, "NodeNames": ["g1"]}
        assert b.post("prioritize", prio).json() == a.post("prioritize", prio).json()
        assert b.metric(FWD % ("prioritize", "200")) == 1
        r = b.bind(p, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        ann = api.get("pods", "f1", "default")["metadata"]["annotations"]
        assert ann[PREFIX + "node"] == "g1"
        assert b.metric(FWD % ("bind", "200")) == 1
        assert a.metric("gpusched_extender_forwarded_total") == 0
        # the leader did the bind: its state holds the GPU at once
        assert a.allocation(p)[PREFIX + "node"] == "g1"

        # a request another replica already forwarded is answered here (no loops)
        q = api.get("pods", "f2", "default")
        wait_for(lambda: b.filter(q, ["g1"])["NodeNames"], what="b has seen f2")
        r = requests.post(b.url + "/bind", timeout=10,
                          headers={"X-Gpusched-Forwarded-By": "c"},
                          json={"PodName": "f2", "PodNamespace": "default",
                                "PodUID": q["metadata"]["uid"], "Node": "g1"})
        refused(r, "leader")

        # the leader dies without releasing the lease: 503 (the forward fails),
        # then b takes over and binds itself
        def retry_at(name):
            return api.get("pods", name, "default")["metadata"].get("annotations", {}).get(
                PREFIX + "retry-at")
        f1_at, f2_at = retry_at("f1"), retry_at("f2")  # a's nudge when it started leading
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        r = b.bind(q, "g1")
        refused(r, "did not answer")
        # /filter is answered from b's own view, without asking the dead leader
        # again for a while
        assert b.filter(q, ["g1"])["NodeNames"] == ["g1"]
        assert b.filter(q, ["g1"])["NodeNames"] == ["g1"]
        assert b.metric(FWD % ("filter", "0")) <= 1
        wait_for(lambda: b.metric("gpusched_extender_leader") == 1, timeout=20,
                 what="b takes over")
        # the new leader nudges the pods left waiting (refused binds put them in
        # kube-scheduler's unschedulable queue), not the bound one
        wait_for(lambda: retry_at("f2") != f2_at, what="f2 nudged by the new leader")
        assert retry_at("f1") == f1_at
        r = b.bind(q, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert api.get("pods", "f2", "default")["metadata"]["annotations"][PREFIX + "node"] \
            == "g1"
    finally:
        if a.proc.poll() is None:
            a.stop()
        else:
            a.proc.communicate()
        b.stop()


def test_follower_forwards_over_https_to_a_leader_with_its_key(gpusched_bin, api, tmp_path):
    """Replicas serving HTTPS forward over HTTPS. The leader's address is its pod IP,
    which its certificate need not name: it is trusted for presenting this replica's
    own public key (deploy/ mounts one Secret in both). A replica with other keys gets
    no answer from it: its /bind is refused, naming the pinned key."""
    from test_webhook import gen_certs

    def tls(d):
        return ["--tls-cert", str(d / "tls.crt"), "--tls-key", str(d / "tls.key")]
    certs = gen_certs(gpusched_bin, tmp_path / "certs")
    add_gpu_pod(api, "s1", "1")
    add_gpu_pod(api, "s2", "1")
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a", *tls(certs),
                 verify=str(certs / "ca.crt"))
    b = c = None
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b", *tls(certs),
                     verify=str(certs / "ca.crt"))
        p = api.get("pods", "s1", "default")
        wait_for(lambda: b.filter(p, ["g1"])["NodeNames"] and
                 b.metric(FWD % ("filter", "200")) >= 1, what="b forwards to a over https")
        r = b.bind(p, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert api.get("pods", "s1", "default")["metadata"]["annotations"][PREFIX + "node"] == "g1"
        assert b.metric(FWD % ("bind", "200")) == 1
        other = gen_certs(gpusched_bin, tmp_path / "other")
        c = start_as(gpusched_bin, api, tmp_path, "c", "kc-c", *tls(other),
                     verify=str(other / "ca.crt"))
        p2 = api.get("pods", "s2", "default")
        wait_for(lambda: c.filter(p2, ["g1"])["NodeNames"], what="c knows s2")
        r = c.bind(p2, "g1")
        refused(r, "public key")
        assert c.metric(FWD % ("bind", "0")) >= 1
        assert a.metric("gpusched_extender_forwarded_total") == 0
    finally:
        for e in (c, b, a):
            if e:
                e.stop()


def test_rotated_certificate_is_served_and_pinned(gpusched_bin, api, tmp_path):
    """A rotated Secret (new key in place of the mounted files) is served without a
    restart, and forwarding follows it: a replica that reloaded first still accepts a
    leader on the previous key, then the new one. A request on a connection opened
    before the rotation is answered on it and closes it; a broken pair is refused and
    the old one kept."""
    import shutil
    import socket
    import ssl
    from test_webhook import gen_certs, recv_http

    old = gen_certs(gpusched_bin, tmp_path / "old")
    new = gen_certs(gpusched_bin, tmp_path / "new")
    bundle = tmp_path / "cas.crt"
    bundle.write_text((old / "ca.crt").read_text() + (new / "ca.crt").read_text())
    live = {}
    for r in ("a", "b"):  # each replica's own mount of the Secret
        live[r] = tmp_path / f"live-{r}"
        live[r].mkdir()
        for f in ("tls.crt", "tls.key"):
            shutil.copy(old / f, live[r] / f)

    def tls(r):
        return ["--tls-cert", str(live[r] / "tls.crt"), "--tls-key", str(live[r] / "tls.key")]

    def rotate(r, src):  # as kubelet updates a Secret volume: new files in place
        for f in ("tls.key", "tls.crt"):
            shutil.copy(src / f, live[r] / (f + ".tmp"))
            os.replace(live[r] / (f + ".tmp"), live[r] / f)

    def served(e):
        return ssl.get_server_certificate(("127.0.0.1", e.port))

    reloads = 'gpusched_extender_tls_reloads_total{result="%s"}'
    for n in ("r1", "r2", "r3"):
        add_gpu_pod(api, n, "1")
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a", *tls("a"), verify=str(bundle))
    b = None
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b", *tls("b"), verify=str(bundle))
        before = served(a)
        assert before == served(b)
        # a request begun on a's old daemon: headers and half the body sent
        body = json.dumps({"Pod": api.get("pods", "r1", "default"), "NodeNames": ["g1"]})
        ctx = ssl.create_default_context(cafile=str(bundle))
        ctx.check_hostname = False
        held = ctx.wrap_socket(socket.create_connection(("127.0.0.1", a.port)))
        held.sendall(f"POST /filter HTTP/1.1\r\nHost: a\r\nContent-Type: application/json"
                     f"\r\nContent-Length: {len(body)}\r\n\r\n{body[:20]}".encode())

        # b first: it serves the new key and still accepts a, on the old one
        rotate("b", new)
        wait_for(lambda: served(b) != before, what="b serves the new certificate")
        assert b.metric(reloads % "ok") == 1
        p = api.get("pods", "r1", "default")
        r = b.bind(p, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert b.metric(FWD % ("bind", "200")) == 1
        # then a, the leader
        rotate("a", new)
        wait_for(lambda: served(a) == served(b), what="a serves the new certificate")
        held.sendall(body[20:].encode())
        answer = recv_http(held)
        assert answer.startswith("HTTP/1.1 200"), answer[:300]
        assert "Connection: close" in answer, answer[:300]
        held.close()
        r = b.bind(api.get("pods", "r2", "default"), "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert b.metric(FWD % ("bind", "200")) == 2
        # the old CA no longer verifies a
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(a.url + "/healthz", verify=str(old / "ca.crt"), timeout=5)
        # a broken pair: counted, logged, the new pair kept
        (live["a"] / "tls.crt").write_text("garbage")
        wait_for(lambda: a.metric(reloads % "error") == 1, what="a refuses a broken pair")
        assert served(a) == served(b)
        r = b.bind(api.get("pods", "r3", "default"), "g2")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        logs, a = a.stop(), None
        assert "TLS certificate reloaded" in logs and "keeping the old" in logs, logs[-2000:]
    finally:
        for e in (b, a):
            if e:
                e.stop()


def test_leader_rotated_first_is_trusted_through_the_ca(gpusched_bin, api, tmp_path):
    """With tls_ca, a follower trusts a leader whose certificate that CA signed: the
    leader's Secret copy may turn first (a new key, the same CA: gen-certs --ca) and
    the follower, still on the old pair, forwards to it. A replica without tls_ca,
    which trusts only its own keys, is refused naming the key."""
    import shutil
    import ssl
    from test_webhook import gen_certs

    old = gen_certs(gpusched_bin, tmp_path / "old")
    new = gen_certs(gpusched_bin, tmp_path / "new", "--ca", str(tmp_path / "old"))
    assert (new / "ca.crt").read_text() == (old / "ca.crt").read_text()
    live = {}
    for r in ("a", "b", "c"):
        live[r] = tmp_path / f"live-{r}"
        live[r].mkdir()
        for f in ("tls.crt", "tls.key"):
            shutil.copy(old / f, live[r] / f)

    def tls(r, ca=True):
        args = ["--tls-cert", str(live[r] / "tls.crt"), "--tls-key", str(live[r] / "tls.key")]
        return args + (["--tls-ca", str(old / "ca.crt")] if ca else [])

    for n in ("ca1", "ca2"):
        add_gpu_pod(api, n, "1")
    verify = str(old / "ca.crt")
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a", *tls("a"), verify=verify)
    b = c = None
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b", *tls("b"), verify=verify)
        c = start_as(gpusched_bin, api, tmp_path, "c", "kc-c", *tls("c", ca=False),
                     verify=verify)
        before = ssl.get_server_certificate(("127.0.0.1", a.port))
        for f in ("tls.key", "tls.crt"):
            shutil.copy(new / f, live["a"] / f)
        wait_for(lambda: ssl.get_server_certificate(("127.0.0.1", a.port)) != before,
                 what="the leader serves the new pair")
        p = api.get("pods", "ca1", "default")
        wait_for(lambda: b.filter(p, ["g1"])["NodeNames"], what="b knows ca1")
        r = b.bind(p, "g1")
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        assert b.metric(FWD % ("bind", "200")) == 1
        p2 = api.get("pods", "ca2", "default")
        wait_for(lambda: c.filter(p2, ["g1"])["NodeNames"], what="c knows ca2")
        r = c.bind(p2, "g1")
        refused(r, "public key")
    finally:
        for e in (c, b, a):
            if e:
                e.stop()


def test_identity_without_address_is_not_forwarded(gpusched_bin, api, tmp_path):
    add_gpu_pod(api, "n1", "1")
    a = start(gpusched_bin, api, tmp_path, *ARGS, "--identity", "a", name="kc-a")
    wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
    b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b")
    try:
        p = api.get("pods", "n1", "default")
        wait_for(lambda: b.filter(p, ["g1"])["NodeNames"], what="b has seen the pod")
        r = b.bind(p, "g1")
        refused(r, "leader")
        assert b.metric("gpusched_extender_forwarded_total") == 0
    finally:
        a.stop()
        b.stop()


def test_forwarded_bind_holds_no_http_worker(gpusched_bin, api, tmp_path):
    """The leader can take seconds over a /bind (a node held for kubelet, a slow API
    server). A follower with one HTTP worker, which answers its connections one request
    at a time, still answers /filter while a /bind it forwarded waits: the forwarded
    bind runs off the worker (parked), else kube-scheduler's next pods would wait."""
    add_gpu_pod(api, "s1", "1")
    add_gpu_pod(api, "s2", "1")
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a")
    wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
    b = None
    try:
        b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b", "--threads", "1")
        p, q = api.get("pods", "s1", "default"), api.get("pods", "s2", "default")
        # b has read the Lease (else its /bind is its own 503 "not the leader")
        wait_for(lambda: b.filter(q, ["g1"])["NodeNames"] and
                 b.metric(FWD % ("filter", "200")) >= 1, what="b forwards to a")
        api.delay("POST", r"/pods/s1/binding$", 3)
        out = {}

        def bind():
            t0 = time.time()
            out["r"] = b.bind(p, "g1")
            out["took"] = time.time() - t0
        t = threading.Thread(target=bind)
        t.start()
        time.sleep(0.5)  # the bind is at the leader, held by the API server
        t0 = time.time()
        f = b.filter(q, ["g1", "g2"])
        took = time.time() - t0
        t.join()
        assert f["NodeNames"], f
        assert took < 1.5, f"/filter waited {took:.1f} s behind a forwarded /bind"
        assert out["r"].status_code == 200 and out["r"].json()["Error"] == "", out["r"].text
        assert out["took"] >= 2.5, out
        assert b.metric(FWD % ("bind", "200")) == 1
    finally:
        a.stop()
        if b:
            b.stop()


class SlowLeader:
    """A stand-in leader at 127.0.0.1:port: answers /filter at once (every node it was
    asked about) and /prioritize and /preempt after `hold` seconds, with answers of its
    own that a follower can only have relayed; /bind gets a proxy's 502 page."""

    def __init__(self, hold):
        leader = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                with leader.lock:
                    leader.asked[verb] = leader.asked.get(verb, 0) + 1
                if verb == "filter":
                    out = {"NodeNames": body["NodeNames"], "FailedNodes": {}, "Error": ""}
                elif verb == "bind":
                    page = b"<html>502 Bad Gateway</html>"
                    self.send_response(502)
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                elif verb == "prioritize":
                    time.sleep(hold)
                    out = [{"Host": n, "Score": 7} for n in body["NodeNames"]]
                else:
                    time.sleep(hold)
                    out = {"NodeNameToMetaVictims": {"from-the-leader": {"Pods": []}}}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.lock = threading.Lock()
        self.asked = {}
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_forwarded_prioritize_and_preempt_hold_no_http_worker(gpusched_bin, api, tmp_path):
    """A busy leader may take long over /prioritize or /preempt. A follower with one
    HTTP worker still answers /filter while one it forwarded waits: they run off the
    worker too (parked), so a /bind or /filter on another of the worker's connections
    is not held behind them. The leader here is a stand-in holding a live Lease."""
    add_gpu_pod(api, "h1", "1")
    leader = SlowLeader(hold=3)
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    api.create("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gpusched-extender"},
        "spec": {"holderIdentity": f"slow@127.0.0.1:{leader.port}", "leaseDurationSeconds": 60,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
    b = None
    try:
        b = start_as(gpusched_bin, api, tmp_path, "b", "kc-b", "--threads", "1")
        p = api.get("pods", "h1", "default")
        wait_for(lambda: b.filter(p, ["g1"])["NodeNames"] and leader.asked.get("filter"),
                 what="b forwards to the stand-in leader")
        for verb, body, want in (
                ("prioritize", {"Pod": p, "NodeNames": ["g1", "g2"]},
                 [{"Host": "g1", "Score": 7}, {"Host": "g2", "Score": 7}]),
                ("preempt", {"Pod": p, "NodeNameToMetaVictims": {}, "NodeNameToVictims": {}},
                 {"NodeNameToMetaVictims": {"from-the-leader": {"Pods": []}}})):
            out = {}

            def ask():
                t0 = time.time()
                out["r"] = b.post(verb, body)
                out["took"] = time.time() - t0
            t = threading.Thread(target=ask)
            t.start()
            time.sleep(0.5)  # at the leader, held
            t0 = time.time()
            f = b.filter(p, ["g1", "g2"])
            took = time.time() - t0
            t.join()
            assert f["NodeNames"] == ["g1", "g2"], f
            assert took < 1.5, f"/filter waited {took:.1f} s behind a forwarded /{verb}"
            assert out["r"].status_code == 200 and out["r"].json() == want, out["r"].text
            assert out["took"] >= 2.5, out
            assert b.metric(FWD % (verb, "200")) == 1
        # a leader's /bind answer without an Error still reaches kube-scheduler's event
        refused(b.bind(p, "g1"), "the leader answered /bind with status 502")
        assert b.metric(FWD % ("bind", "502")) == 1
    finally:
        if b:
            b.stop()
        leader.stop()


def test_a_bind_running_when_the_lease_is_lost_is_answered_not_forwarded(
        gpusched_bin, api, tmp_path):
    """A /bind that a leader handed to a bind thread is answered by that replica
    even if it lost the Lease while the bind ran: its Binding may already be
    posted, and forwarded, the new leader would bind the pod a second time. Here
    the Lease passes to a stand-in while a's annotation patch is held 4 s; the
    stand-in must never be asked for the /bind, and a, no longer leading, must
    not create the Binding either."""
    add_gpu_pod(api, "f", "1")
    leader = SlowLeader(hold=0)
    a = start_as(gpusched_bin, api, tmp_path, "a", "kc-a")
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        p = api.get("pods", "f", "default")
        wait_for(lambda: a.filter(p, ["g1"])["NodeNames"], what="f cached")
        api.delay("PATCH", r"/pods/f$", 4.0, body_has="gpu-uuids")  # the bind's, not a nudge
        out = {}
        t = threading.Thread(target=lambda: out.__setitem__("r", a.bind(p, "g1")))
        t.start()
        wait_for(lambda: a.metric('gpusched_gpus_allocated{node="g1"') == 1, what="f reserved")

        def to_stand_in(lease):
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            lease["spec"].update({"holderIdentity": f"slow@127.0.0.1:{leader.port}",
                                  "leaseDurationSeconds": 60, "renewTime": now,
                                  "acquireTime": now})
        api.update("leases", "gpusched-extender", "kube-system", fn=to_stand_in,
                   prefix="/apis/coordination.k8s.io/v1")
        wait_for(lambda: a.metric("gpusched_extender_leader") == 0, what="a lost the lease")
        assert "r" not in out  # still in its annotation patch
        t.join(timeout=30)
        assert "r" in out and out["r"].status_code == 200, out
        assert leader.asked.get("bind", 0) == 0, leader.asked
        assert a.metric(FWD % ("bind", "502")) == 0
        # nor does a create the Binding, having lost the lease while it patched: the
        # new leader binds when kube-scheduler retries; a takes its patch back
        refused(out["r"], "stopped leading")
        assert not any(m == "POST" and path.endswith("/pods/f/binding")
                       for m, path, _ in api.requests)
        got = api.get("pods", "f", "default")
        assert not got["spec"].get("nodeName")
        assert PREFIX + "node" not in got["metadata"]["annotations"], got["metadata"]
    finally:
        a.stop()
        leader.stop()


def test_a_leader_restarted_in_place_binds_only_once_it_knows_the_pods(gpusched_bin, api,
                                                                       tmp_path):
    # its container restarts (OOM, liveness): the same identity renews the
    # Lease at once, before the pod list is in, when every GPU looks free
    add_gpu_pod(api, "first", "2")
    add_gpu_pod(api, "second", "1")
    port = test_extender.free_port()
    kc = api.write_kubeconfig(tmp_path / "kc")
    args = ["--kubeconfig", kc, "--inventory-ttl", "0", *ARGS, "--identity",
            f"a@127.0.0.1:{port}"]

    def launch():
        orig = test_extender.free_port
        test_extender.free_port = lambda: port
        try:
            return test_extender.Extender(gpusched_bin, args)
        finally:
            test_extender.free_port = orig
    a = launch()
    try:
        a.wait_ready(path="/readyz")
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads")
        p = api.get("pods", "first", "default")
        assert a.filter(p, ["g1"])["NodeNames"] == ["g1"]
        assert test_extender.bound(a.bind(p, "g1"))
    finally:
        a.stop(signal.SIGKILL)
    api.delay("GET", r"/api/v1/pods\?(?!.*watch=1)", 6.0)
    a = launch()
    try:
        wait_for(lambda: a.metric("gpusched_extender_leader") == 1, what="a leads again")
        assert requests.get(a.url + "/readyz", timeout=5).status_code == 503
        q = api.get("pods", "second", "default")
        a.filter(q, ["g1"])
        refused(a.bind(q, "g1"), "has not listed the cluster's nodes and pods")
        ann = api.get("pods", "second", "default")["metadata"].get("annotations") or {}
        assert PREFIX + "node" not in ann, "bound on a GPU the first pod holds"
        a.wait_ready(path="/readyz")
        assert a.filter(q, ["g1"])["NodeNames"] == [], "g1 is full"
    finally:
        a.stop()
