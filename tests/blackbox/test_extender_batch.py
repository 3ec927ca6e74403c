"""/filter and /prioritize decide a whole node list at once (core_filter_nodes,
replies written without a JSON tree); /debug/pods still asks the core node by
node (core_filter, core_score). Both must say the same of every node: which
fit, every rejected node's reason and class, and each node's 0..10 score.
"""
from conftest import free_port  # noqa: F401  (conftest's fixtures come with it)
from test_extender import Extender, gpu_node, label_node, pod, write_nodes

NODES = [gpu_node(f"a{i}", n=8) for i in range(6)] + [
    gpu_node("small", n=2, mem=16384),
    gpu_node("zone-b", labels={"zone": "b"}),
    label_node("t4-1", 2, "Tesla-T4", 15360),
    gpu_node("mig-1", n=1, mig=True),
    gpu_node("tainted", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    gpu_node("v100", n=4, model="Tesla-V100", mem=32768),
]
NAMES = [n["metadata"]["name"] for n in NODES] + ["ghost"]

PODS = [
    pod("one", {"nvidia.com/gpu": "1"}),
    pod("four", {"nvidia.com/gpu": "4"}),
    pod("eight", {"nvidia.com/gpu": "8"}),
    pod("shared", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "20Gi"}),
    pod("half", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                 "nvidia.com/gpu-cores": "50"}),
    pod("mig", {"nvidia.com/mig-1g.10gb": "2"}),
    pod("zone", {"nvidia.com/gpu": "1"}, node_selector={"zone": "b"}),
    pod("cpu", {"nvidia.com/gpu": "1", "cpu": "60"}),
    pod("a100", {"nvidia.com/gpu": "2"}, annotations={"gpusched.io/gpu-type": "T4"}),
]


def test_batch_replies_match_the_per_node_trace(gpusched_bin, tmp_path):
    e = Extender(gpusched_bin, ["--nodes", write_nodes(tmp_path / "nodes.json", NODES)])
    try:
        # vary the nodes' state: some hold whole GPUs, some shares
        for i, limits in enumerate([{"nvidia.com/gpu": "3"}, {"nvidia.com/gpu": "7"},
                                    {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "60Gi",
                                     "nvidia.com/gpu-cores": "30"}]):
            e.place(pod(f"load{i}", limits), [f"a{i}"])
        scored = 0
        for p in PODS:
            f = e.filter(p, NAMES)
            fits = f["NodeNames"] or []
            assert f["FailedNodes"]["ghost"].startswith("node is unknown")
            # unresolvable nodes are in both maps (kube-scheduler 1.20 reads FailedNodes)
            assert set(f["FailedAndUnresolvableNodes"]) <= set(f["FailedNodes"])
            assert len(fits) + len(f["FailedNodes"]) == len(NAMES)
            pr = e.post("prioritize", {"Pod": p, "NodeNames": NAMES})
            assert pr.status_code == 200, pr.text
            scores = {h["Host"]: h["Score"] for h in pr.json()}
            assert [h["Host"] for h in pr.json()] == NAMES
            trace = e.debug(p).json()
            assert trace["feasible"] == len(fits), (p["metadata"]["name"], trace)
            for n in trace["nodes"]:
                name = n["node"]
                if n["fits"]:
                    assert name in fits
                    assert scores[name] == n["extender_score"], (p["metadata"]["name"], name)
                    scored += scores[name] > 0
                else:
                    assert name not in fits
                    assert scores[name] == 0
                    where = "FailedAndUnresolvableNodes" if n["code"] == "UNRESOLVABLE" \
                        else "FailedNodes"
                    assert f[where][name] == n["reason"], (p["metadata"]["name"], name)
        assert scored > 0
    finally:
        e.stop()
