"""The cpufrag policy through the binary: listed by the simulator, replayed
on a small trace (deterministic per seed), chosen by the extender as its
default or per pod. Its placement logic is covered by
tests/unit/test_pol_cpufrag.c, its openb margin over FGD by
tests/unit/test_pol_openb.c.
"""
import json
import os

from conftest import ROOT, run
from test_extender import Extender, gpu_node, pod

SMALL_NODES = os.path.join(ROOT, "tests", "data", "sim_nodes.csv")
SMALL_PODS = os.path.join(ROOT, "tests", "data", "sim_pods.csv")


def test_listed_once(gpusched_bin):
    r = run(gpusched_bin, "simulate", "--list-policies")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n").count("cpufrag") == 1


def simulate(gpusched_bin, out):
    r = run(gpusched_bin, "simulate", "--nodes", SMALL_NODES, "--pods", SMALL_PODS,
            "--policy", "fgd,cpufrag", "--seeds", "1-3", "--threads", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "cpufrag" in r.stdout
    return {x["policy"]: x for x in json.loads(out.read_text())["results"]}


def test_small_trace_replay(gpusched_bin, tmp_path):
    first = simulate(gpusched_bin, tmp_path / "a.json")
    again = simulate(gpusched_bin, tmp_path / "b.json")
    assert set(first) == {"fgd", "cpufrag"}
    assert json.dumps(first["cpufrag"], sort_keys=True) == \
        json.dumps(again["cpufrag"], sort_keys=True)


def test_extender_default_and_annotation(gpusched_bin, tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": [
        gpu_node("n1", n=4), gpu_node("n2", n=8)]}))
    for args, ann in ((["--policy", "cpufrag"], None),
                      ([], {"gpusched.io/policy": "cpufrag"})):
        ext = Extender(gpusched_bin, ["--nodes", str(nodes), *args])
        try:
            for i in range(12):
                p = pod(f"p{i}", limits={"nvidia.com/gpu": "1"}, annotations=ann)
                f = ext.filter(p, ["n1", "n2"])
                assert f["NodeNames"] and set(f["NodeNames"]) <= {"n1", "n2"}
                r = ext.post("prioritize", {"Pod": p, "NodeNames": f["NodeNames"]})
                assert r.status_code == 200, r.text
                scores = [h["Score"] for h in r.json()]
                assert all(0 <= s <= 100 for s in scores) and max(scores) > 0
                best = max(r.json(), key=lambda h: h["Score"])["Host"]
                b = ext.bind(p, best)
                assert b.status_code == 200 and b.json()["Error"] == "", b.text
            # all 12 GPUs are taken: the 13th pod fits nowhere
            f = ext.filter(pod("p12", limits={"nvidia.com/gpu": "1"}, annotations=ann),
                           ["n1", "n2"])
            assert not f["NodeNames"]
        finally:
            ext.proc.terminate()
            ext.proc.wait(timeout=10)
