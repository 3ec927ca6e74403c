"""`gpusched simulate --mode time`, driven as a user would: exact KPIs on a
hand-computed trace (tests/unit/test_sim_time.c derives them), the JSON and
SVG files, refused inputs, and one openb trace (skipped when absent)."""
import json
import os
import time
import xml.etree.ElementTree as ET

from conftest import run

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,1,T4\n"
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time,"
        "scheduled_time\n"
        "a,1000,1024,1,1000,,0,10,0\n"
        "b,1000,1024,1,1000,,2,7,2\n"
        "c,1000,1024,1,500,,4,8,4\n"
        "d,1000,1024,0,0,,20,21,\n")


def write(tmp_path, nodes=NODES, pods=PODS):
    n, p = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    n.write_text(nodes)
    p.write_text(pods)
    return str(n), str(p)


def test_hand_trace_exact(gpusched_bin, tmp_path):
    n, p = write(tmp_path)
    js, svg = tmp_path / "t.json", tmp_path / "t.svg"
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p,
            "--policy", "bestfit,fgd", "--seeds", "1-2", "--load", "1,2",
            "--json", str(js), "--plot", str(svg))
    assert r.returncode == 0, r.stderr
    assert "alloc%" in r.stdout and "model_constrained" in r.stdout
    doc = json.loads(js.read_text())
    assert doc["mode"] == "time" and (doc["nodes"], doc["gpus"], doc["pods"]) == (1, 1, 4)
    res = {(x["load"], x["policy"]): x for x in doc["results"]}
    assert sorted(res) == [(1, "bestfit"), (1, "fgd"), (2, "bestfit"), (2, "fgd")]
    for pol in ("bestfit", "fgd"):
        x = res[(1, pol)]
        assert x["seeds"] == 2
        assert abs(x["gpu_alloc_pct_time_mean"]["mean"] - 85.0) < 1e-6
        assert abs(x["pending_gpu_pct_time_mean"]["mean"] - 67.5) < 1e-6
        d = x["delay"]
        assert d["all"]["pods"] == 3
        assert abs(d["all"]["p50_s"]["mean"] - 8) < 1e-6
        assert abs(d["all"]["p99_s"]["mean"] - 10.94) < 1e-6
        assert abs(d["sharing"]["p50_s"]["mean"] - 11) < 1e-6
        assert d["multi_gpu"]["pods"] == 0 and d["multi_gpu"]["p50_s"]["mean"] is None
        assert x["waiting_pods_at_end"]["mean"] == 0 and x["never_placed_pods"]["mean"] == 0
        y = res[(2, pol)]
        assert abs(y["delay"]["sharing"]["p50_s"]["mean"] - 14) < 1e-6
        assert y["waiting_pods_at_end"]["mean"] == 1
    root = ET.parse(svg).getroot()
    texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "load x2: GPU allocation" in texts and "queueing delay CDF" in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) == 12


def test_learned_workload_hand_trace(gpusched_bin, tmp_path):
    """--learned (the workload learned from the pods placed, as in the extender): on
    one GPU every policy places alike, so the KPIs are the hand-computed ones."""
    n, p = write(tmp_path)
    js = tmp_path / "t.json"
    r = run(gpusched_bin, "simulate", "--mode", "time", "--learned", "--nodes", n, "--pods", p,
            "--policy", "fgd,cpufrag", "--seeds", "1", "--json", str(js))
    assert r.returncode == 0, r.stderr
    for x in json.loads(js.read_text())["results"]:
        assert abs(x["gpu_alloc_pct_time_mean"]["mean"] - 85.0) < 1e-6, x["policy"]
        assert x["delay"]["all"]["pods"] == 3


def test_refused(gpusched_bin, tmp_path):
    n, p = write(tmp_path, pods="name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p)
    assert r.returncode == 2 and "no creation_time column" in r.stderr, r.stderr
    n, p = write(tmp_path)
    for args, what in ((["--load", "0"], "--load"), (["--load", "1,x"], "--load"),
                       (["--mode", "later"], "--mode"), (["--csv", "x.csv"], "--csv")):
        r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p, *args)
        assert r.returncode == 2 and what in r.stderr, (args, r.stderr)
    n, p = write(tmp_path, pods=PODS.replace("c,1000,1024,1,500,,4,8,4", "c,1000,1024,1,500,,4x,8,4"))
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p)
    assert r.returncode == 2 and "pods.csv:4: column 7 (creation_time): '4x'" in r.stderr, r.stderr


def test_openb_default(gpusched_bin, openb_dir, tmp_path):
    """One policy, one seed, two loads on the real trace: sane KPIs, every
    pod placed in the end, and the run well inside 10 s."""
    js = tmp_path / "t.json"
    t0 = time.monotonic()
    r = run(gpusched_bin, "simulate", "--mode", "time",
            "--nodes", os.path.join(openb_dir, "openb_node_list_gpu_node.csv"),
            "--pods", os.path.join(openb_dir, "openb_pod_list_default.csv"),
            "--policy", "cpufrag", "--seeds", "42", "--load", "1,1000", "--threads", "1",
            "--json", str(js), timeout=300)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    doc = json.loads(js.read_text())
    a1, a1000 = (x["gpu_alloc_pct_time_mean"]["mean"] for x in doc["results"])
    assert 0 < a1 < a1000 < 100
    for x in doc["results"]:
        assert x["never_placed_pods"]["mean"] == 0
        assert x["delay"]["all"]["pods"] == 7064  # every GPU pod of the trace
    assert wall < 60, wall  # two runs; about 2 s each on the 2-core build machine


def test_help_mentions_time_flags(gpusched_bin):
    r = run(gpusched_bin, "simulate", "--help")
    assert r.returncode == 0
    for flag in ("--mode", "--load", "--scale", "--bound", "creation_time"):
        assert flag in r.stdout, flag


def test_scale_only_in_time_mode(gpusched_bin, tmp_path):
    n, p = write(tmp_path)
    r = run(gpusched_bin, "simulate", "--nodes", n, "--pods", p, "--scale", "2")
    assert r.returncode == 2 and "--scale is for --mode time" in r.stderr, r.stderr
    # each mode's own knob is refused by the other, not ignored
    r = run(gpusched_bin, "simulate", "--nodes", n, "--pods", p, "--load", "2")
    assert r.returncode == 2 and "--load is for --mode time" in r.stderr, r.stderr
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p, "--tune",
            "2")
    assert r.returncode == 2 and "--tune is for the arrival mode" in r.stderr, r.stderr
    js = tmp_path / "s.json"
    r = run(gpusched_bin, "simulate", "--mode", "time", "--nodes", n, "--pods", p,
            "--scale", "2", "--policy", "fgd", "--seeds", "1", "--json", str(js))
    assert r.returncode == 0, r.stderr
    x = json.loads(js.read_text())["results"][0]
    assert x["scale"] == 2 and x["delay"]["all"]["pods"] >= 5  # clones placed too
