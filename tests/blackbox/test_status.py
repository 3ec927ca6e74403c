"""`gpusched status` (and `kubectl-gpusched`) checked against known states:
a standalone extender's journal, and a cluster served by the fake
kube-apiserver, with and without GPUQuotas."""
import json
import os

import pytest
import requests

from conftest import run
from fake_apiserver import FakeApiServer
from test_extender import STANDARD_NODES, Extender, gpu_node, pod, write_nodes

QUOTAS = """\
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: team, namespace: ml}
  spec:
    total: {gpus: 4}
    models:
    - {model: T4, memory: 16Gi}
- apiVersion: gpusched.io/v1
  kind: GPUQuota
  metadata: {name: typo, namespace: ml}
  spec: {total: {gpu: 1}}
"""


@pytest.fixture
def standalone(gpusched_bin, tmp_path):
    nodes = write_nodes(tmp_path / "nodes.json", STANDARD_NODES)
    state = tmp_path / "state"
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(state)])
    try:
        e.place(pod("train", {"nvidia.com/gpu": "2"}, ns="ml"), ["a100-1"])
        e.place(pod("inf", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                            "nvidia.com/gpu-cores": "25"}, ns="ml"), ["t4-1"])
        e.place(pod("mig", {"nvidia.com/mig-1g.10gb": "2"}, ns="cv"), ["mig-1"])
        gone = pod("gone", {"nvidia.com/gpu": "1"}, ns="cv")
        e.place(gone, ["a100-2"])
        r = requests.delete(e.url + "/allocations/cv/gone", timeout=10)
        assert r.status_code == 200, r.text
    finally:
        e.stop()
    q = tmp_path / "quotas.yaml"
    q.write_text(QUOTAS)
    return {"nodes": nodes, "state": str(state), "quotas": str(q)}


def status_json(bin_, *args):
    r = run(bin_, "status", *args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def gpus_by_node(doc):
    return {n["name"]: n["gpus"] for n in doc["nodes"]}


def test_standalone_json(gpusched_bin, standalone):
    doc, _ = status_json(gpusched_bin, "--state-dir", standalone["state"], "--nodes",
                         standalone["nodes"])
    g = gpus_by_node(doc)
    held = [x for x in g["a100-1"] if x["pods"]]
    assert len(held) == 2 and all(x["pods"] == ["ml/train"] for x in held)
    assert all(x["milli_used"] == 1000 and x["memory_used_mib"] == 81920 for x in held)
    t4 = [x for x in g["t4-1"] if x["pods"]]
    assert t4 == [dict(t4[0], pods=["ml/inf"], memory_used_mib=8192, milli_used=250)]
    assert g["mig-1"][0]["pods"] == ["cv/mig"]
    assert g["mig-1"][0]["memory_used_mib"] == 2 * 9856
    # its instances' compute, as their share of the GPU's memory (was 0)
    mig_milli = 2 * 9856 * 1000 // g["mig-1"][0]["memory_mib"]
    assert g["mig-1"][0]["milli_used"] == mig_milli > 0
    assert all(not x["pods"] for x in g["a100-2"])  # released
    models = {m["model"]: m for m in doc["models"]}
    assert models["Tesla-T4"]["gpus"] == 2 and models["Tesla-T4"]["free_gpus"] == 1
    assert models["Tesla-T4"]["milli_used"] == 250
    a100 = models["NVIDIA A100-SXM4-80GB"]
    assert a100["gpus"] == 13 and a100["free_gpus"] == 10
    assert a100["milli_used"] == 2000 + mig_milli
    assert "quotas" not in doc


def test_standalone_table_and_quotas(gpusched_bin, standalone):
    r = run(gpusched_bin, "status", "--state-dir", standalone["state"], "--nodes",
            standalone["nodes"], "--quotas", "--quota-file", standalone["quotas"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\033[" not in out  # not a terminal: no colour
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NODE", "GPU", "MODEL"]
    row = next(line for line in lines if line.startswith("t4-1") and "ml/inf" in line)
    assert "8192/15360 MiB" in row and "25.0%" in row and " ok " in row
    assert any(line.startswith("mig-1") and "2/7 mig" in line for line in lines)
    total = next(line for line in lines if line.startswith("TOTAL"))
    assert total.split()[1] == "15"
    # quota rows: 2 whole GPUs of 4; 8Gi of 16Gi on T4
    ml = [line.split() for line in lines if line.startswith("ml ")]
    assert ["ml", "team", "(total)", "2/4"] == ml[0][:4]
    assert ["ml", "team", "T4", "0/-", "8Gi/16Gi"] == ml[1][:5]
    assert "GPUQuota 1 ignored: GPUQuota ml/typo: spec.total.gpu: unknown field" in r.stderr


def test_faulted_mig_instances_are_shown(gpusched_bin, tmp_path):
    n = gpu_node("m", n=1, mig=True)
    inv = json.loads(n["metadata"]["annotations"]["gpusched.io/gpu-inventory"])
    inv["gpus"][0]["mig"][3].update(healthy=False, reason="XID 94 (transient)")
    n["metadata"]["annotations"]["gpusched.io/gpu-inventory"] = json.dumps(inv)
    nodes = write_nodes(tmp_path / "nodes.json", [n, gpu_node("w", n=1)])
    state = tmp_path / "state"
    Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(state)]).stop()
    doc, _ = status_json(gpusched_bin, "--state-dir", str(state), "--nodes", nodes)
    g = gpus_by_node(doc)
    assert g["m"][0]["healthy"] is True and g["m"][0]["mig_unhealthy"] == 1
    assert "mig_unhealthy" not in g["w"][0]
    r = run(gpusched_bin, "status", "--state-dir", str(state), "--nodes", nodes)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("m "))
    assert "0/7 mig" in row and "1/7 bad" in row, row


def test_wide_and_kubectl_plugin(gpusched_bin, standalone, tmp_path):
    plugin = tmp_path / "kubectl-gpusched"
    os.symlink(os.path.abspath(gpusched_bin), plugin)
    r = run(str(plugin), "status", "--state-dir", standalone["state"], "--nodes",
            standalone["nodes"], "-o", "wide")
    assert r.returncode == 0, r.stderr
    assert "UUID" in r.stdout.splitlines()[0]
    assert "GPU-a100-1-0" in r.stdout


def test_torn_journal_tail_is_skipped_read_only(gpusched_bin, standalone):
    journal = os.path.join(standalone["state"], "journal")
    with open(journal, "a") as f:
        f.write("deadbeef {\"op\":\"bind\"")  # a record being written
    size = os.path.getsize(journal)
    doc, _ = status_json(gpusched_bin, "--state-dir", standalone["state"], "--nodes",
                         standalone["nodes"])
    assert gpus_by_node(doc)["t4-1"][0]["pods"] == ["ml/inf"]
    assert os.path.getsize(journal) == size  # status never writes


def test_standalone_nodes_are_never_stale_and_restarts_warn_of_nothing(gpusched_bin, tmp_path):
    # a standalone extender applies no inventory TTL: a node list taken long
    # ago is what it schedules against; its restart records (the learned
    # workload's) are not status's business
    nodes = write_nodes(tmp_path / "nodes.json",
                        [gpu_node("old", n=2, updated_at="2020-01-01T00:00:00Z")])
    state = tmp_path / "state"
    for _ in range(2):
        e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(state)])
        e.place(pod(f"p{_}", {"nvidia.com/gpu": "1"}), ["old"])
        e.stop()
    doc, err = status_json(gpusched_bin, "--state-dir", str(state), "--nodes", nodes)
    assert doc["nodes"][0]["available"] is True, doc
    assert "skipped" not in err, err


def test_errors(gpusched_bin, standalone, tmp_path):
    r = run(gpusched_bin, "status", "--state-dir", standalone["state"])
    assert r.returncode == 2 and "--state-dir and --nodes FILE go together" in r.stderr
    # --nodes alone read whatever cluster the kubeconfig named
    r = run(gpusched_bin, "status", "--nodes", standalone["nodes"])
    assert r.returncode == 2 and "--state-dir and --nodes FILE go together" in r.stderr
    r = run(gpusched_bin, "status", "--state-dir", standalone["state"], "--nodes",
            standalone["nodes"], "--quota-file", standalone["quotas"])
    assert r.returncode == 2 and "--quota-file needs --quotas" in r.stderr
    r = run(gpusched_bin, "status", "--state-dir", standalone["state"], "--nodes",
            standalone["nodes"], "-o", "yaml")
    assert r.returncode == 2 and "'yaml' is not wide or json" in r.stderr
    r = run(gpusched_bin, "status", "--state-dir", str(tmp_path / "none"), "--nodes",
            standalone["nodes"])
    assert r.returncode == 1 and "journal" in r.stderr
    journal = os.path.join(standalone["state"], "journal")
    lines = open(journal).read().splitlines(True)
    lines.insert(0, "00000000 {}\n")
    open(journal, "w").write("".join(lines))
    r = run(gpusched_bin, "status", "--state-dir", standalone["state"], "--nodes",
            standalone["nodes"])
    assert r.returncode == 1 and "journal:1: damaged record" in r.stderr


# ---- cluster mode --------------------------------------------------------------

def assigned(node, uuids, kind="whole", mem=81920, milli=1000):
    return {"gpusched.io/node": node, "gpusched.io/request-kind": kind,
            "gpusched.io/gpu-uuids": ",".join(uuids),
            "gpusched.io/gpu-indices": ",".join(u.rsplit("-", 1)[1] for u in uuids),
            "gpusched.io/gpu-memory": str(mem), "gpusched.io/gpu-milli": str(milli),
            "gpusched.io/assigned-at": "2026-11-22T15:20:01.000000000Z"}


def test_cluster(gpusched_bin, tmp_path):
    with FakeApiServer() as api:
        n = gpu_node("g1", n=2)
        api.add_node("g1", labels={}, annotations=n["metadata"]["annotations"],
                     capacity=n["status"]["allocatable"])
        old = gpu_node("old", n=1, updated_at="2020-01-01T00:00:00Z")
        api.add_node("old", labels={}, annotations=old["metadata"]["annotations"],
                     capacity=old["status"]["allocatable"])
        whole = pod("w", {"nvidia.com/gpu": "1"})["spec"]["containers"]
        shared = pod("s", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "4Gi",
                           "nvidia.com/gpu-cores": "30"})["spec"]["containers"]
        api.add_pod("ml", "a", annotations=assigned("g1", ["GPU-g1-0"]), node="g1",
                    phase="Running", containers=whole)
        api.add_pod("ml", "b", annotations=assigned("g1", ["GPU-g1-1"], "shared", 4096, 300),
                    node="g1", phase="Running", containers=shared)
        api.add_pod("ml", "done", annotations=assigned("g1", ["GPU-g1-1"], "shared", 4096, 300),
                    node="g1", phase="Succeeded", containers=shared)
        # a hand-written assignment on a CPU-only pod holds nothing, as in the extender
        api.add_pod("ml", "forged", annotations=assigned("g1", ["GPU-g1-1"]), node="g1",
                    phase="Running")
        api.create("/apis/gpusched.io/v1/namespaces/ml/gpuquotas",
                   {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
                    "metadata": {"name": "q"}, "spec": {"total": {"compute": "2"}}})
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        doc, err = status_json(gpusched_bin, "--kubeconfig", kc, "--quotas")
        assert "ml/forged skipped" in err and "do not match its request" in err, err
        g = gpus_by_node(doc)["g1"]
        assert g[0]["pods"] == ["ml/a"] and g[0]["milli_used"] == 1000
        assert g[1]["pods"] == ["ml/b"] and g[1]["milli_used"] == 300  # finished pod ignored
        assert g[1]["memory_used_mib"] == 4096
        q = doc["quotas"][0]
        assert (q["namespace"], q["quota"], q["limit"], q["used"]["milli"]) == \
            ("ml", "q", {"milli": 2000}, 1300)
        assert [n["available"] for n in doc["nodes"] if n["name"] == "old"] == [False]
        # KUBECONFIG is honoured, as kubectl plugins get it
        env = dict(os.environ, KUBECONFIG=kc)
        r = run(gpusched_bin, "status", env=env)
        assert r.returncode == 0 and "ml/a" in r.stdout, r.stderr
        assert any(line.startswith("old ") and " stale " in line for line in r.stdout.splitlines())
        # no KUBECONFIG: ~/.kube/config when it exists, even inside a pod (as kubectl)
        home = tmp_path / "home"
        (home / ".kube").mkdir(parents=True)
        (home / ".kube" / "config").write_text(open(kc).read())
        env_home = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env_home.update(HOME=str(home), KUBERNETES_SERVICE_HOST="10.0.0.1")
        r = run(gpusched_bin, "status", env=env_home)
        assert r.returncode == 0 and "ml/a" in r.stdout, r.stderr
        # `kubectl gpusched` alone runs the plugin with no arguments: status
        plugin = tmp_path / "kubectl-gpusched"
        os.symlink(os.path.abspath(gpusched_bin), plugin)
        r = run(str(plugin), env=env)
        assert r.returncode == 0 and "ml/a" in r.stdout, r.stderr
    r = run(gpusched_bin, "status", "--kubeconfig", kc)
    assert r.returncode == 1 and "gpusched status:" in r.stderr  # server gone: clear error


def renamed(d):
    return {k.replace("gpusched.io/", "sched.example.com/").replace("nvidia.com/gpu",
                                                                    "example.com/gpu"): v
            for k, v in d.items()}


def test_cluster_with_renamed_resources_and_annotations(gpusched_bin, tmp_path):
    """--resource-prefix and --annotation-prefix read a cluster whose device plugins and
    extender use other names; the default names then hold nothing."""
    with FakeApiServer() as api:
        n = gpu_node("g1", n=2)
        api.add_node("g1", labels={}, annotations=renamed(n["metadata"]["annotations"]),
                     capacity=renamed(n["status"]["allocatable"]))
        whole = pod("w", {"example.com/gpu": "1"})["spec"]["containers"]
        api.add_pod("ml", "a", annotations=renamed(assigned("g1", ["GPU-g1-0"])), node="g1",
                    phase="Running", containers=whole)
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        doc, err = status_json(gpusched_bin, "--kubeconfig", kc, "--resource-prefix",
                               "example.com/", "--annotation-prefix", "sched.example.com/")
        g = gpus_by_node(doc)["g1"]
        assert g[0]["pods"] == ["ml/a"] and g[0]["milli_used"] == 1000, (doc, err)
        doc, _ = status_json(gpusched_bin, "--kubeconfig", kc)
        assert not any(x["pods"] for n in doc["nodes"] for x in n["gpus"]), doc
    r = run(gpusched_bin, "status", "--kubeconfig", kc, "--annotation-prefix", "sched")
    assert r.returncode == 2 and "annotation prefix 'sched': must be a DNS subdomain" in r.stderr


def test_a_kubeconfig_token_file_is_sent_at_once(gpusched_bin, tmp_path):
    # a user with tokenFile and no token (kube-proxy's style): the file was
    # read first a minute after start, so a short command went anonymous
    with FakeApiServer() as api:
        n = gpu_node("g1", n=2)
        api.add_node("g1", labels={}, annotations=n["metadata"]["annotations"],
                     capacity=n["status"]["allocatable"])
        api.require_token = "from-the-file"
        tok = tmp_path / "token"
        tok.write_text("from-the-file\n")
        kc = api.write_kubeconfig(tmp_path / "kubeconfig", token_file=str(tok))
        doc, err = status_json(gpusched_bin, "--kubeconfig", kc)
        assert [n["name"] for n in doc["nodes"]] == ["g1"], err
        r = run(gpusched_bin, "status", "--kubeconfig",
                api.write_kubeconfig(tmp_path / "kc-bad", token="wrong"))
        assert r.returncode != 0 and "401" in r.stderr + r.stdout, r.stderr


def test_cluster_in_container_use(gpusched_bin, tmp_path):
    """What the device plugins publish from their limiters' ledgers
    (gpusched.io/gpu-usage, docs/device-plugin.md) is shown per container; a
    row that does not parse is skipped with a warning naming it."""
    usage = {"updated_at": "2026-11-23T20:00:00Z", "containers": [
        {"container": "ml/b/main", "device": 0, "used_mib": 3900, "limit_mib": 4096, "procs": 2},
        {"container": "ml/c/main", "device": 1, "used_mib": -5, "limit_mib": 4096, "procs": 1}]}
    with FakeApiServer() as api:
        n = gpu_node("g1", n=2)
        ann = dict(n["metadata"]["annotations"])
        ann["gpusched.io/gpu-usage"] = json.dumps(usage)
        api.add_node("g1", labels={}, annotations=ann, capacity=n["status"]["allocatable"])
        n2 = gpu_node("g2", n=1)
        ann2 = dict(n2["metadata"]["annotations"], **{"gpusched.io/gpu-usage": "{not json"})
        api.add_node("g2", labels={}, annotations=ann2, capacity=n2["status"]["allocatable"])
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        doc, err = status_json(gpusched_bin, "--kubeconfig", kc)
        assert doc["containers"] == [dict(usage["containers"][0], node="g1",
                                          updated_at="2026-11-23T20:00:00Z")]
        assert "node g1: gpusched.io/gpu-usage: containers[1]: a field is missing or out " \
               "of range" in err
        assert "node g2: gpusched.io/gpu-usage: not a usage document" in err
        r = run(gpusched_bin, "status", "--kubeconfig", kc)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        head = next(i for i, x in enumerate(lines) if x.startswith("NODE") and "CONTAINER" in x)
        assert lines[head + 1].split() == ["g1", "ml/b/main", "0", "3900/4096", "MiB", "2",
                                           "2026-11-23T20:00:00Z"]
