"""The extender remembers NodeNames arrays between requests (ext/namelist.h):
a request repeating an array's bytes skips scanning and looking up its names.
Over real HTTP: a repeated body gets the same reply bytes as its first
sending and as the same request written with other whitespace (scanned
afresh), and the answers to the very same bytes follow every bind and
release.
"""
import json

import requests

from conftest import free_port  # noqa: F401  (conftest's fixtures come with it)
from test_extender import Extender, bound, gpu_node, pod, write_nodes

NODES = [gpu_node(f"n{i}", n=1) for i in range(4)]
NAMES = [n["metadata"]["name"] for n in NODES] + ["ghost"]


def body(p, names, **dump):
    return json.dumps({"Pod": p, "NodeNames": names, "Nodes": None}, **dump).encode()


def test_repeated_bytes_same_reply_and_fresh_state(gpusched_bin, tmp_path):
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "nodes.json", NODES)])
    try:
        q = pod("q", {"nvidia.com/gpu": "1"})
        raw = body(q, NAMES)
        first = e.post("filter", None, raw=raw)
        again = e.post("filter", None, raw=raw)
        spaced = e.post("filter", None, raw=body(q, NAMES, indent=2))
        assert first.status_code == again.status_code == spaced.status_code == 200
        assert first.content == again.content == spaced.content
        f = first.json()
        assert f["NodeNames"] == NAMES[:4]
        assert f["FailedNodes"]["ghost"].startswith("node is unknown")
        # /prioritize gets /filter's answer: the same bytes twice, the same scores
        pr = body(q, f["NodeNames"])
        p1, p2 = e.post("prioritize", None, raw=pr), e.post("prioritize", None, raw=pr)
        assert p1.status_code == 200 and p1.content == p2.content
        assert [h["Host"] for h in p1.json()] == NAMES[:4]

        # each node has one GPU: bind q to n2, then the same bytes must reject n2
        assert bound(e.bind(q, "n2"))
        f = e.post("filter", None, raw=raw).json()
        assert f["NodeNames"] == ["n0", "n1", "n3"]
        assert "n2" in f["FailedNodes"] or "n2" in f["FailedAndUnresolvableNodes"]
        # another pod with the same names array: n2 stays taken
        r = pod("r", {"nvidia.com/gpu": "1"})
        assert e.filter(r, NAMES)["NodeNames"] == ["n0", "n1", "n3"]
        assert bound(e.bind(r, "n0"))
        assert e.post("filter", None, raw=body(r, NAMES)).json()["NodeNames"] == ["n1", "n3"]

        # released: the same bytes find the GPU free again
        assert requests.delete(f"{e.url}/allocations/default/q", timeout=10).status_code == 200
        f = e.post("filter", None, raw=raw).json()
        assert f["NodeNames"] == ["n1", "n2", "n3"]
    finally:
        e.stop()


def test_bad_bytes_after_a_cached_array_are_refused(gpusched_bin, tmp_path):
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "nodes.json", NODES)])
    try:
        q = pod("q", {"nvidia.com/gpu": "1"})
        raw = body(q, NAMES)
        assert e.post("filter", None, raw=raw).status_code == 200
        for bad, why in [(raw[:-1], "expected"), (raw + b"x", "trailing"),
                         (raw[:-1] + b',"NodeNames":[]}', "given twice")]:
            r = e.post("filter", None, raw=bad)
            assert r.status_code == 400, bad[-40:]
            assert why in r.json()["error"]
        assert e.post("filter", None, raw=raw).json()["NodeNames"] == NAMES[:4]
    finally:
        e.stop()
