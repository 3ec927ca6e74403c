"""`gpusched status` and `kubectl gpusched` against the real kube-apiserver: the placed
pods appear on the GPUs their annotations name, with their memory."""
import json
import os
import subprocess

from conftest import NODE_A, NS, READY, gpu_pod


def test_status_shows_placed_pods(cluster, tmp_path):
    objs = [gpu_pod("status-whole", {"nvidia.com/gpu": "1"}, node=NODE_A),
            gpu_pod("status-shared", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "6Gi",
                                      "nvidia.com/gpu-cores": "25"}, node=NODE_A)]
    names = [o["metadata"]["name"] for o in objs]
    cluster.apply(objs)
    try:
        pods = cluster.wait_pods(NS, names, ready_log=READY)
        r = subprocess.run([cluster.gpusched, "status", "--kubeconfig", cluster.kubeconfig,
                            "-o", "wide"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        for nm, p in pods.items():
            uuid = p["metadata"]["annotations"]["gpusched.io/gpu-uuids"]
            rows = [line for line in r.stdout.splitlines() if uuid in line]
            assert rows and any(nm in row for row in rows), f"{nm} on {uuid}:\n{r.stdout}"
        j = subprocess.run([cluster.gpusched, "status", "--kubeconfig", cluster.kubeconfig,
                            "-o", "json"], capture_output=True, text=True, timeout=30)
        assert j.returncode == 0, j.stderr
        assert "status-shared" in j.stdout and json.loads(j.stdout)["nodes"]
        # as a kubectl plugin, with $KUBECONFIG
        bindir = tmp_path / "bin"
        bindir.mkdir()
        os.symlink(cluster.gpusched, bindir / "kubectl-gpusched")
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
                   KUBECONFIG=cluster.kubeconfig)
        k = subprocess.run(["kubectl", "gpusched", "status"], capture_output=True, text=True,
                           timeout=30, env=env)
        assert k.returncode == 0, k.stderr
        assert "status-whole" in k.stdout and "status-shared" in k.stdout, k.stdout
    finally:
        cluster.delete_pods(NS, names)
