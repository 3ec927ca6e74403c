"""`gpusched simulate --bound`: the LP lower bound in the table and JSON,
never above a policy's result; on openb `default` (skipped when absent)."""
import json
import os

from conftest import ROOT, run

DATA = os.path.join(ROOT, "tests", "data")
SMALL_NODES = os.path.join(DATA, "sim_nodes.csv")
SMALL_PODS = os.path.join(DATA, "sim_pods.csv")


def check(doc, n_seeds):
    b = doc["bound"]
    assert len(b["per_seed"]) == n_seeds
    vals = [x["unallocated_pct_at_100"] for x in b["per_seed"]]
    assert all(0 <= v < 100 for v in vals)
    mean = b["unallocated_pct_at_100"]["mean"]
    assert abs(mean - sum(vals) / len(vals)) < 1e-4  # JSON keeps 6 digits
    for x in doc["results"]:
        assert x["unallocated_pct_at_100"]["mean"] >= mean - 1e-4, (x["policy"], mean)
    return mean


def test_bound_small(gpusched_bin, tmp_path):
    js = tmp_path / "b.json"
    r = run(gpusched_bin, "simulate", "--nodes", SMALL_NODES, "--pods", SMALL_PODS,
            "--policy", "bestfit,fgd,cpufrag,random", "--seeds", "1-4", "--bound",
            "--json", str(js))
    assert r.returncode == 0, r.stderr
    assert "LP lower bound at arrived 100 %" in r.stdout
    assert "distance to the bound" in r.stdout
    check(json.loads(js.read_text()), 4)
    # without --bound the JSON has no bound and the table no bound line
    r = run(gpusched_bin, "simulate", "--nodes", SMALL_NODES, "--pods", SMALL_PODS,
            "--policy", "fgd", "--seeds", "1", "--json", str(js))
    assert r.returncode == 0 and "bound" not in r.stdout
    assert "bound" not in json.loads(js.read_text())
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", SMALL_NODES, "--pods",
            SMALL_PODS, "--bound")
    assert r.returncode == 2 and "--bound" in r.stderr


def test_bound_openb_default(gpusched_bin, openb_dir, tmp_path):
    js = tmp_path / "b.json"
    r = run(gpusched_bin, "simulate",
            "--nodes", os.path.join(openb_dir, "openb_node_list_gpu_node.csv"),
            "--pods", os.path.join(openb_dir, "openb_pod_list_default.csv"),
            "--policy", "fgd,cpufrag", "--seeds", "42-43", "--bound", "--json", str(js),
            timeout=300)
    assert r.returncode == 0, r.stderr
    mean = check(json.loads(js.read_text()), 2)
    # the 810-milli holes alone leave about 3 % (docs/policy-cpufrag.md)
    assert 2.5 < mean < 3.5, mean
