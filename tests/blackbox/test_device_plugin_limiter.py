"""The device plugin injects the in-container limiter into shared containers.

Through the fake kube-apiserver and fake kubelet (as test_device_plugin_api):
a container holding a GPU share gets libgpusched-cuda.so and an
/etc/ld.so.preload naming it (both read-only) and its own ledger directory
(read-write); whole-GPU containers, pods that opt out with
gpusched.io/limiter: "off", and a plugin run with --no-limiter get none.
Then a CUDA program (the stand-in driver and lim_probe) run with that
container's environment and ledger shows up in the plugin's /metrics, in
the node's gpusched.io/gpu-usage annotation and in `gpusched status`.
"""
import json
import os
import shutil
import stat
import subprocess
import tempfile

import grpc
import pytest

from test_device_plugin import GPU
from conftest import run
from test_device_plugin_api import assigned_pod, wait, world  # noqa: F401 (fixture)
from test_limiter import LIB, TDIR, env_for

AT = "2026-11-22T15:20:01.000000000Z"


@pytest.fixture
def limdir():
    d = tempfile.mkdtemp(prefix="dplim", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def annotate(api, pod, value):
    api.update("pods", pod, ns="default",
               fn=lambda o: o["metadata"]["annotations"].update({"gpusched.io/limiter": value}))


def mounts(r):
    return {m.container_path: (m.host_path, m.read_only) for m in r.mounts}


def usage_rows(api):
    ann = api.get("nodes", "node-a")["metadata"]["annotations"].get("gpusched.io/gpu-usage")
    return json.loads(ann)["containers"] if ann else None


def test_shared_container_gets_the_limiter(world, limdir, gpusched_bin,
                                           tmp_path):  # noqa: F811
    pl = world.start("--limiter-dir", limdir, "--limiter-lib", LIB, "--publish-interval", "1")
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    pod = assigned_pod(world.api, "shared", [GPU[0]], AT, kind="shared", mem=8192, milli=300)
    uid = pod["metadata"]["uid"]
    r = p.allocate([GPU[0] + "::1"])
    m = mounts(r)
    cdir = os.path.join(limdir, "containers", f"{uid}_main")
    assert m == {"/usr/local/gpusched/libgpusched-cuda.so":
                 (os.path.join(limdir, "libgpusched-cuda.so"), True),
                 "/etc/ld.so.preload": (os.path.join(limdir, "ld.so.preload"), True),
                 "/usr/local/gpusched/ledger": (cdir, False)}
    assert r.envs["GPUSCHED_LIMITER_DIR"] == "/usr/local/gpusched/ledger"
    assert r.envs["GPUSCHED_GPU_UUIDS"] == GPU[0]  # the ledger's numbering
    assert r.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "8192m"
    # what the mounts point at is there: the library the plugin was given,
    # the preload line, a ledger directory any user can write, its owner
    with open(LIB, "rb") as a, open(os.path.join(limdir, "libgpusched-cuda.so"), "rb") as b:
        assert a.read() == b.read()
    with open(os.path.join(limdir, "ld.so.preload")) as f:
        assert f.read() == "/usr/local/gpusched/libgpusched-cuda.so\n"
    assert stat.S_IMODE(os.stat(cdir).st_mode) == 0o1777
    with open(os.path.join(cdir, "owner")) as f:
        assert f.read() == f"default/shared/main\n1\n{GPU[0]}\n"
    # and the limiter's variables, for processes started without them
    with open(os.path.join(cdir, "limits")) as f:
        assert f.read() == (f"GPUSCHED_GPU_UUIDS={GPU[0]}\nCUDA_DEVICE_MEMORY_LIMIT=8192m\n"
                            "GPUSCHED_GPU_MILLI=300\nCUDA_DEVICE_SM_LIMIT=30\n")
    assert r.envs["GPUSCHED_GPU_MILLI"] == "300" and r.envs["CUDA_DEVICE_SM_LIMIT"] == "30"

    # a CUDA process of that container, with its environment and ledger
    env = env_for(cdir, **{k: v for k, v in r.envs.items() if k.startswith("CUDA_DEVICE")})
    env["CUDA_DEVICE_MEMORY_LIMIT"] = "256m"  # the stand-in card has 1 GiB
    proc = subprocess.Popen([os.path.join(TDIR, "lim_probe"), "runtime", "ctx:0", "alloc:100",
                             "alloc:200", "ready"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert [proc.stdout.readline() for _ in range(4)] == ["ctx 0\n", "alloc 0\n",
                                                              "alloc 2\n", "ready\n"]
        text = pl.get("/metrics").text
        lbl = '{container="default/shared/main",device="0"}'
        assert f"gpusched_dp_container_gpu_memory_used_bytes{lbl} {100 << 20}\n" in text, text
        assert f"gpusched_dp_container_gpu_memory_limit_bytes{lbl} {256 << 20}\n" in text
        assert "gpusched_dp_limiter_ledgers 1\n" in text
        # published on the node, shown by `gpusched status`
        row = {"container": "default/shared/main", "device": 0, "used_mib": 100,
               "limit_mib": 256, "procs": 1}
        seen = []
        try:
            wait(lambda: seen.append(usage_rows(world.api)) or seen[-1] == [row], timeout=10)
        except AssertionError:
            raise AssertionError(f"gpu-usage annotation: {seen[-1:]}\n{pl.output()[-2000:]}")
        kc = world.api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        r = run(gpusched_bin, "status", "--kubeconfig", kc)
        assert r.returncode == 0, r.stderr
        line = next(x for x in r.stdout.splitlines() if "default/shared/main" in x)
        assert line.split()[:5] == ["node-a", "default/shared/main", "0", "100/256", "MiB"]
    finally:
        proc.kill()
        proc.wait()
    # the process is gone: so is its memory
    lbl = '{container="default/shared/main",device="0"}'
    assert f"gpusched_dp_container_gpu_memory_used_bytes{lbl} 0\n" in pl.get("/metrics").text
    # the ledger pruning after each publish lists the node's pods from the API
    # server's cache (every node, every minute); Allocate reads a current list
    lists = [q for m, q, _ in list(world.api.requests)
             if m == "GET" and q.startswith("/api/v1/pods?")]
    assert any(q.endswith("&resourceVersion=0") for q in lists), lists
    assert any("resourceVersion" not in q for q in lists), lists


def test_no_limiter_for_whole_gpus_opted_out_pods_or_when_off(world, limdir):  # noqa: F811
    world.start("--limiter-dir", limdir, "--limiter-lib", LIB)
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "whole", [GPU[1]], AT, kind="whole")
    r = p.allocate([GPU[0] + "::0"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    assert list(r.mounts) == [] and "GPUSCHED_LIMITER_DIR" not in r.envs

    assigned_pod(world.api, "optout", [GPU[2]], "2026-11-22T15:20:02.000000000Z",
                 kind="shared", mem=4096)
    annotate(world.api, "optout", "off")
    r = p.allocate([GPU[0] + "::1"])
    assert r.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "4096m"
    assert list(r.mounts) == [] and "GPUSCHED_LIMITER_DIR" not in r.envs

    assigned_pod(world.api, "typo", [GPU[2]], "2026-11-22T15:20:03.000000000Z",
                 kind="shared", mem=4096)
    annotate(world.api, "typo", "of")
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate([GPU[0] + "::2"])
    assert "gpusched.io/limiter: 'of' is not on or off" in ei.value.details()


@pytest.mark.parametrize("flags", [["--no-limiter"], ["--limiter-dir", "/nonexistent/gs-lim"]])
def test_injection_off(world, limdir, flags):  # noqa: F811
    args = ["--limiter-dir", limdir, "--limiter-lib", LIB] + flags
    world.start(*args)
    p = world.kubelet.wait_plugin("nvidia.com/gpu")
    assigned_pod(world.api, "shared", [GPU[0]], AT, kind="shared", mem=8192, milli=300)
    r = p.allocate([GPU[0] + "::1"])
    assert r.envs["CUDA_DEVICE_MEMORY_LIMIT"] == "8192m"
    assert list(r.mounts) == [] and "GPUSCHED_LIMITER_DIR" not in r.envs


def test_ledgers_of_finished_pods_are_pruned(world, limdir):  # noqa: F811
    """A pod that has finished (Succeeded, Failed) stays listed until it is
    deleted, which for a Job's pods without ttlSecondsAfterFinished may be
    never: its ledger directory goes all the same, with its /metrics rows.
    A running pod's stays."""
    os.makedirs(os.path.join(limdir, "containers"))
    uids = {}
    for name, phase in (("done", "Succeeded"), ("crashed", "Failed"), ("runs", "Running")):
        pod = assigned_pod(world.api, name, [GPU[0]], AT, kind="shared", mem=8192, milli=300)
        world.api.update("pods", name, ns="default",
                         fn=lambda o, ph=phase: o.setdefault("status", {}).update(phase=ph))
        uids[name] = pod["metadata"]["uid"]
        d = os.path.join(limdir, "containers", f"{uids[name]}_main")
        os.makedirs(d)
        os.utime(d, (1000, 1000))  # older than the 600 s a new one is kept
    world.start("--limiter-dir", limdir, "--limiter-lib", LIB, "--publish-interval", "1")
    left = lambda: sorted(os.listdir(os.path.join(limdir, "containers")))  # noqa: E731
    wait(lambda: left() == [f"{uids['runs']}_main"], timeout=10)
