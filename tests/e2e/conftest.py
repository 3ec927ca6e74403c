"""Fixtures of the e2e suite: one real cluster per session (kcluster.Cluster).

`cluster` starts it once (two kubelet nodes with fake GPUs, deploy/'s device-plugin
flags) and stops it at the end of the session; `host_clean` wraps it with the
check that teardown left nothing on the host (processes, mounts, links,
directories, cgroups, sysctls): a leftover fails the session. Everything skips
with the reason when the cluster cannot run here (no ../shared/k8s, not root,
missing packages). Helpers for scenarios: gpu_pod(), env_of(), split_uuids().
"""
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kcluster  # noqa: E402

NODE_A = "e2e-node-a"    # 4 x H100 80GB
NODE_B = "e2e-node-b"    # 2 x A100 40GB
NS = "default"
READY = "E2E-ENV-DONE"


def deploy_dp_args():
    """The device plugin's flags from deploy/device-plugin.yaml that matter off a real
    GPU node (--replicas); the paths and metrics address are the harness's own."""
    with open(os.path.join(kcluster.ROOT, "deploy", "device-plugin.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a for a in args if a.startswith("--replicas")]


def gpusched_bin():
    path = os.environ.get("GPUSCHED_BIN", os.path.join(kcluster.ROOT, "build", "gpusched"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"gpusched binary not found at {path} (set GPUSCHED_BIN)")
    return path


@pytest.fixture(scope="session")
def host_clean():
    try:
        kcluster.check_host()
        bins = kcluster.k8s_binaries()
    except kcluster.Unavailable as e:
        pytest.skip(f"e2e skipped: {e}")
    before = kcluster.HostSnapshot.take()
    workdirs = []
    yield bins, workdirs
    left = before.leftovers(kcluster.HostSnapshot.take(), workdirs)
    assert not left, "teardown left this behind on the host:\n" + "\n".join(left)


@pytest.fixture(scope="session")
def cluster(host_clean):
    bins, workdirs = host_clean
    dp = deploy_dp_args()
    nodes = [kcluster.NodeSpec(NODE_A, kcluster.fake_gpus_doc(4, tag=0xa), dp_args=dp),
             kcluster.NodeSpec(NODE_B, kcluster.fake_gpus_doc(2, "NVIDIA A100-SXM4-40GB", 40960,
                                                              tag=0xb), dp_args=dp)]
    c = kcluster.Cluster(gpusched_bin(), nodes=nodes, bins=bins)
    workdirs.append(c.workdir)
    c.start()
    yield c
    c.stop()


def gpu_pod(name, limits=None, containers=None, annotations=None, node=None,
            scheduler="gpu-scheduler", ns=NS, labels=None):
    """A busybox pod that prints its environment, then sleeps. `containers` is a list of
    (name, limits) for several containers; else one container "main" with `limits`."""
    if containers is None:
        containers = [("main", limits or {})]
    spec = {"containers": [{
        "name": cname, "image": kcluster.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"trap 'exit 0' TERM; env; echo {READY}; sleep 3600 & wait"],
        "resources": {"limits": dict(lim)}} for cname, lim in containers],
        "terminationGracePeriodSeconds": 1, "restartPolicy": "Never"}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    meta = {"name": name, "namespace": ns, "labels": dict(labels or {"e2e": "1"})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def env_of(cluster, ns, name, container):
    log = cluster.pod_log(ns, name, container) or ""
    env = {}
    for line in log.splitlines():
        if line == READY:
            break
        k, sep, v = line.partition("=")
        if sep:
            env[k] = v
    return env


def split_uuids(pod, res="nvidia.com/", prefix=kcluster.PREFIX):
    """{container: [uuids]} as docs/annotations.md splits the pod's assignment."""
    ann = pod["metadata"].get("annotations", {})
    uuids = [u for u in ann.get(prefix + "gpu-uuids", "").split(",") if u]
    out, i = {}, 0
    for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
        lim = c.get("resources", {}).get("limits", {})
        n = sum(int(v or 0) for k, v in lim.items()
                if k == res + "gpu" or k.startswith(res + "mig-"))
        if n:
            out[c["name"]] = [uuids[(i + k) % len(uuids)] for k in range(n)]
            i += n
    return out


def check_pod_gpus(cluster, pod, memory_mib=None, milli=None):
    """Assert that every GPU container of `pod` (Running, env printed) holds exactly the
    GPUs and limits of the pod's assignment annotations, and that the assignment is
    on the pod's node and matches the request (memory_mib / milli per GPU when given).
    Returns the assigned UUIDs."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    ann = pod["metadata"].get("annotations", {})
    P = cluster.annot_prefix
    where = f"{ns}/{name}"
    node = pod["spec"].get("nodeName")
    assert ann.get(P + "node") == node, f"{where}: gpusched.io/node vs nodeName"
    uuids = [u for u in ann.get(P + "gpu-uuids", "").split(",") if u]
    assert uuids, f"{where}: no gpusched.io/gpu-uuids: {ann}"
    gpus = cluster.node(node).read_fake_gpus()["gpus"]
    on_node = {g["uuid"] for g in gpus} | {m["uuid"] for g in gpus for m in g.get("mig", [])}
    assert set(uuids) <= on_node, f"{where}: {uuids} not all GPUs of {node}"
    kind = ann.get(P + "request-kind")
    mem = ann.get(P + "gpu-memory")
    mil = ann.get(P + "gpu-milli")
    if memory_mib is not None:
        assert mem == str(memory_mib), f"{where}: gpu-memory {mem}, asked {memory_mib}"
    if milli is not None:
        assert mil == str(milli), f"{where}: gpu-milli {mil}, asked {milli}"
    for cname, want in split_uuids(pod, cluster.res_prefix, P).items():
        env = env_of(cluster, ns, name, cname)
        ctx = f"{where}/{cname} env {env}"
        assert env.get("NVIDIA_VISIBLE_DEVICES") == ",".join(want), ctx
        assert env.get("CUDA_VISIBLE_DEVICES") == ",".join(want), ctx
        assert env.get("GPUSCHED_POD") == where, ctx
        if kind == "shared":
            if mem and mem != "0":
                assert env.get("GPUSCHED_GPU_MEMORY_MIB") == mem, ctx
                assert env.get("CUDA_DEVICE_MEMORY_LIMIT") == mem + "m", ctx
            if mil and 0 < int(mil) < 1000:
                assert env.get("GPUSCHED_GPU_MILLI") == mil, ctx
                assert env.get("CUDA_DEVICE_SM_LIMIT") == str(-(-int(mil) // 10)), ctx
            elif mil == "0":          # a memory-only share: no compute limit
                assert "GPUSCHED_GPU_MILLI" not in env and "CUDA_DEVICE_SM_LIMIT" not in env, ctx
        else:
            assert kind in ("whole", "mig"), f"{where}: request-kind {kind}"
            assert "GPUSCHED_GPU_MEMORY_MIB" not in env and "GPUSCHED_GPU_MILLI" not in env, ctx
    return uuids
