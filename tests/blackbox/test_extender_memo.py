"""The extender keeps its /filter and /prioritize answers per NodeNames
array and pod shape (ext/memo.h) and decides again only what changed.
Over real HTTP: every answer to a repeated body is byte for byte the answer
to the same question written with other whitespace (a new array, decided
afresh), after binds and releases under concurrent load in standalone mode,
and after watch events in cluster mode (a node's GPUs turning unhealthy, a
taint, a deleted pod freeing its GPUs).
"""
import json
import threading

import requests

from conftest import free_port  # noqa: F401  (conftest's fixtures come with it)
from fake_apiserver import FakeApiServer
from test_extender import Extender, bound, gpu_node, inventory, pod, write_nodes
from test_extender_cluster import node_kwargs, start, wait_for

NODES = [gpu_node(f"n{i}", n=2) for i in range(6)]
NAMES = [n["metadata"]["name"] for n in NODES]


def body(p, names, indent=None):
    return json.dumps({"Pod": p, "NodeNames": names, "Nodes": None}, indent=indent).encode()


class Asker:
    """Asks one question twice as the same bytes (kept) and once afresh."""

    def __init__(self, e):
        self.e, self.fresh = e, 0

    def same(self, verb, p, names):
        kept = body(p, names)
        self.fresh += 1
        r1 = self.e.post(verb, None, raw=kept)
        r2 = self.e.post(verb, None, raw=kept)
        r3 = self.e.post(verb, None, raw=body(p, names, indent=self.fresh))
        assert r1.status_code == r2.status_code == r3.status_code == 200
        assert r1.content == r2.content == r3.content, (r2.content[:300], r3.content[:300])
        return r2.json()


def test_kept_answers_follow_binds_under_load(gpusched_bin, tmp_path):
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "nodes.json", NODES),
                                "--threads", "4"])
    a = Asker(e)
    try:
        shape = {"nvidia.com/gpu": "1"}
        q = pod("q", shape)
        assert a.same("filter", q, NAMES)["NodeNames"] == NAMES
        a.same("prioritize", q, NAMES)
        # four clients repeat the same bodies while pods are bound one by one
        stop, errors = threading.Event(), []
        raws = [("filter", body(q, NAMES)), ("prioritize", body(q, NAMES))]

        def hammer(verb, raw):
            while not stop.is_set():
                r = e.post(verb, None, raw=raw)
                if r.status_code != 200:
                    errors.append(r.text)

        threads = [threading.Thread(target=hammer, args=raws[i % 2]) for i in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(9):  # first fit: n0-n3 full, one GPU of n4 taken
                p = pod(f"b{i}", shape)
                f = e.filter(p, NAMES)
                node = f["NodeNames"][0]
                assert bound(e.bind(p, node))
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not errors, errors[:3]
        f = a.same("filter", q, NAMES)
        full = [n for n in NAMES if n not in f["NodeNames"]]
        assert f["NodeNames"] == ["n4", "n5"] and full == ["n0", "n1", "n2", "n3"]
        for n in full:
            assert f["FailedNodes"][n] == "node has 0 free GPUs, pod needs 1"
        a.same("prioritize", q, NAMES)
        a.same("prioritize", q, f["NodeNames"])
        # two GPUs on one node: only n5 has both free
        two = pod("two", {"nvidia.com/gpu": "2"})
        f = a.same("filter", two, NAMES)
        assert f["NodeNames"] == ["n5"]
        assert f["FailedNodes"]["n4"] == "node has 1 free GPUs, pod needs 2"
        # b0 (on n0) released: the kept answer has the GPU back
        assert requests.delete(f"{e.url}/allocations/default/b0", timeout=10).status_code == 200
        assert a.same("filter", q, NAMES)["NodeNames"] == ["n0", "n4", "n5"]
        a.same("prioritize", q, NAMES)
    finally:
        e.stop()


def unhealthy(name):
    def fn(obj):
        inv = json.loads(inventory(name, 2, "NVIDIA A100-SXM4-80GB", 81920))
        for g in inv["gpus"]:
            g["healthy"] = False
        obj["metadata"]["annotations"]["gpusched.io/gpu-inventory"] = json.dumps(inv)
    return fn


def taint(obj):
    obj.setdefault("spec", {})["taints"] = [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]


def test_kept_answers_follow_watch_events(gpusched_bin, tmp_path):
    with FakeApiServer(bookmark_interval=0.5) as api:
        for n in ("g1", "g2", "g3"):
            api.add_node(n, **node_kwargs(n))
        e = start(gpusched_bin, api, tmp_path)
        a = Asker(e)
        names = ["g1", "g2", "g3"]
        try:
            q = pod("q", {"nvidia.com/gpu": "1"})
            wait_for(lambda: a.same("filter", q, names)["NodeNames"] == names, what="nodes")
            raw = body(q, names)

            def kept():
                return e.post("filter", None, raw=raw).json()

            # an inventory update turns g1's GPUs unhealthy
            api.update("nodes", "g1", fn=unhealthy("g1"))
            wait_for(lambda: "g1" not in kept()["NodeNames"], what="g1 unhealthy")
            f = a.same("filter", q, names)
            assert "g1" in f["FailedAndUnresolvableNodes"]
            assert f["NodeNames"] == ["g2", "g3"]
            a.same("prioritize", q, names)
            # a taint on g2: rejected for q, not for a pod that tolerates it
            api.update("nodes", "g2", fn=taint)
            wait_for(lambda: "g2" not in kept()["NodeNames"], what="g2 tainted")
            f = a.same("filter", q, names)
            assert "taint gpu=x:NoSchedule" in f["FailedAndUnresolvableNodes"]["g2"]
            tol = pod("tol", {"nvidia.com/gpu": "1"})
            tol["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
            assert a.same("filter", tol, names)["NodeNames"] == ["g2", "g3"]
            # two pods fill g3; deleting one frees a GPU the kept answer sees
            for name in ("p1", "p2"):
                p = pod(name, {"nvidia.com/gpu": "1"})
                api.add_pod("default", name, containers=p["spec"]["containers"])
                got = api.get("pods", name, "default")
                wait_for(lambda: e.filter(got, ["g3"])["NodeNames"] == ["g3"], what=name)
                assert bound(e.bind(got, "g3"))
            f = a.same("filter", q, names)
            assert f["NodeNames"] == [] and "0 free GPUs" in f["FailedNodes"]["g3"]
            api.delete("pods", "p1", "default")
            wait_for(lambda: kept()["NodeNames"] == ["g3"], what="g3 freed")
            assert a.same("filter", q, names)["NodeNames"] == ["g3"]
            a.same("prioritize", q, ["g3"])
        finally:
            e.stop()


def test_kept_answers_are_counted(gpusched_bin, tmp_path):
    """/metrics tells how often a kept answer was sent and how many nodes
    /filter decided: all six for a new question, one after a bind."""
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "nodes.json", NODES)])
    try:
        q = pod("q", {"nvidia.com/gpu": "1"})
        raw = body(q, NAMES)

        def kept(verb):
            return e.metric('gpusched_extender_kept_answers_total{verb="%s"}' % verb)

        redecided = "gpusched_extender_redecided_nodes_total"
        assert e.post("filter", None, raw=raw).status_code == 200
        assert e.metric(redecided) == 6 and kept("filter") == 0
        for verb in ("filter", "filter", "prioritize", "prioritize"):
            assert e.post(verb, None, raw=raw).status_code == 200
        assert kept("filter") == 2 and kept("prioritize") == 1
        p = pod("b", {"nvidia.com/gpu": "1"})
        node = e.filter(p, NAMES)["NodeNames"][0]
        assert bound(e.bind(p, node))
        before = e.metric(redecided)
        assert e.post("filter", None, raw=raw).status_code == 200
        assert e.metric(redecided) - before == 1      # only the node the bind changed
        assert kept("filter") == 4                    # "b" asked the same; n0 still fits
    finally:
        e.stop()
