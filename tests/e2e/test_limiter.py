"""The in-container limiter through the real kubelet and containerd.

The device plugin (with --limiter-dir) answers Allocate with mounts; this
checks that kubelet v1.20 and containerd + runc honour them for a shared-GPU
pod: /etc/ld.so.preload names the library (read-only), the ledger directory
is writable, and glibc really preloads libgpusched-cuda.so into a
dynamically linked CUDA program in the container (lim_probe on the stand-in
libcuda.so.1, tests/limiter/), which is then held to the pod's GPU memory
share: the allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY (2), and
the plugin's /metrics reports the container's usage from its ledger. A pod
annotated gpusched.io/limiter: "off" gets no limiter. A pod with a compute
share gets its own utilisation: the plugin finds the container's process,
started by containerd in its own pid namespace, from the node pid that the
GPU's per-process samples name (the fake backend's "procs"), and writes the
container's util file, which its limiter steers by.

Part of the e2e suite (kcluster.py, conftest.py); the image is built here:
busybox-static plus the probe with its shared libraries. The pods are bound
here as the extender binds them (nodeName and its gpusched.io/ assignment
annotations), so what is tested is kubelet, containerd, the plugin and the
limiter, not placement (test_placement.py does that).
"""
import json
import os
import shutil
import subprocess
import tempfile

import pytest
import requests

import kcluster
from conftest import NODE_A, NS, gpu_pod

IMAGE = "localhost/gslimiter:e2e"
DONE = "LIMITER-E2E-DONE"
SCRIPT = ("cat /etc/ld.so.preload 2>/dev/null || echo no-preload; "
          "/probe/lim_probe runtime ctx:0 who:alloc alloc:200 alloc:100 info; "
          # a process started with an environment of its own (sshd's, sudo's)
          # finds its limits in the ledger directory's limits file (the
          # stand-in driver learns its GPU from CUDA_VISIBLE_DEVICES, where a
          # real one sees only the device nodes the runtime gave)
          "env -i LD_LIBRARY_PATH=/probe FAKE_CUDA_MEM_MIB=1024 "
          "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES "
          "/probe/lim_probe runtime ctx:0 alloc:200 alloc:100; "
          "(echo x > /etc/ld.so.preload) 2>/dev/null && echo preload-writable || echo preload-ro; "
          "touch /usr/local/gpusched/ledger/t 2>/dev/null && echo ledger-rw || echo no-ledger; "
          f"echo {DONE}; trap 'exit 0' TERM; sleep 3600 & wait")


def build_dir(cluster):
    return os.path.dirname(cluster.gpusched)


def probe_image(cluster, out):
    """busybox + lim_probe, its libraries at their paths, the stand-in driver in /probe."""
    tdir = os.path.join(build_dir(cluster), "limiter-test")
    probe = os.path.join(tdir, "lim_probe")
    work = tempfile.mkdtemp(prefix="gslim-img-")
    try:
        layout, bundle = os.path.join(work, "oci"), os.path.join(work, "bundle")
        ref = f"{layout}:e2e"
        subprocess.run(["umoci", "init", "--layout", layout], check=True)
        subprocess.run(["umoci", "new", "--image", ref], check=True)
        subprocess.run(["umoci", "unpack", "--image", ref, bundle], check=True,
                       capture_output=True)
        root = os.path.join(bundle, "rootfs")
        os.makedirs(os.path.join(root, "bin"))
        shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
        for a in ("sh", "cat", "echo", "touch", "sleep", "ls", "env"):
            os.symlink("busybox", os.path.join(root, "bin", a))
        os.makedirs(os.path.join(root, "probe"))
        for f in ("lim_probe", "libcuda.so.1", "libnvidia-ml.so.1"):
            shutil.copy(os.path.join(tdir, f), os.path.join(root, "probe", f))
        # the probe's libraries and the limiter's (glibc's libdl and libpthread,
        # which every distribution's C library package installs)
        lib = os.path.join(build_dir(cluster), "libgpusched-cuda.so")
        libs = "".join(subprocess.run(["ldd", f], capture_output=True, text=True,
                                      check=True).stdout for f in (probe, lib))
        for word in libs.split():
            if word.startswith("/") and os.path.exists(word):
                dst = os.path.join(root, word.lstrip("/"))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if not os.path.exists(dst):
                    shutil.copy(word, dst)
        os.makedirs(os.path.join(root, "tmp"))
        subprocess.run(["umoci", "repack", "--image", ref, bundle], check=True)
        subprocess.run(["umoci", "config", "--image", ref, "--config.entrypoint=/bin/sh"],
                       check=True)
        subprocess.run(["tar", "-C", layout, "-cf", out, "."], check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def limited_pod(cluster, name, annotations=None, script=SCRIPT, milli="1000"):
    gpu = cluster.node(NODE_A).read_fake_gpus()["gpus"][0]["uuid"]
    ann = {kcluster.PREFIX + "node": NODE_A, kcluster.PREFIX + "gpu-uuids": gpu,
           kcluster.PREFIX + "request-kind": "shared", kcluster.PREFIX + "gpu-memory": "256",
           kcluster.PREFIX + "gpu-milli": milli,
           kcluster.PREFIX + "assigned-at": "2026-11-23T20:00:00.000000000Z"}
    ann.update(annotations or {})
    pod = gpu_pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "256Mi"},
                  annotations=ann, scheduler=None)
    pod["spec"]["nodeName"] = NODE_A
    c = pod["spec"]["containers"][0]
    c["image"] = IMAGE
    c["command"] = ["/bin/sh", "-c", script]
    c["env"] = [{"name": "LD_LIBRARY_PATH", "value": "/probe"},
                {"name": "FAKE_CUDA_MEM_MIB", "value": "1024"}]
    return pod


def log_lines(cluster, name):
    log = cluster.pod_log(NS, name, "main") or ""
    return log.split(DONE)[0].strip().splitlines()


@pytest.fixture
def limiter_node(cluster):
    node = cluster.node(NODE_A)
    lib = os.path.join(build_dir(cluster), "libgpusched-cuda.so")
    if not os.path.exists(os.path.join(build_dir(cluster), "limiter-test", "lim_probe")):
        pytest.skip("no limiter-test/lim_probe in the build directory")
    tar = os.path.join(cluster.workdir, "gslimiter.tar")
    probe_image(cluster, tar)
    r = node.ctr("images", "import", "--base-name", IMAGE.rsplit(":", 1)[0], tar)
    assert r.returncode == 0, r.stderr
    os.makedirs(node.host("/var/lib/gpusched/limiter"), exist_ok=True)
    old = list(node.dp_args)
    node.restart_device_plugin(old + ["--limiter-dir=/var/lib/gpusched/limiter",
                                      f"--limiter-lib={lib}"])
    try:
        yield node
    finally:
        cluster.delete_pods(NS, ["limited", "unlimited", "busy"])
        node.restart_device_plugin(old)


def test_real_kubelet_mounts_the_limiter_and_glibc_preloads_it(cluster, limiter_node):
    cluster.apply(limited_pod(cluster, "limited"))
    p = cluster.wait_pods(NS, ["limited"], ready_log=DONE, timeout=90)["limited"]
    out = log_lines(cluster, "limited")
    assert out == ["/usr/local/gpusched/libgpusched-cuda.so",
                   "ctx 0", "who alloc libgpusched-cuda.so", "alloc 0", "alloc 2",
                   "info 0 56 256", "ctx 0", "alloc 0", "alloc 2", "preload-ro",
                   "ledger-rw"], out
    uid = p["metadata"]["uid"]
    ledger = limiter_node.host(f"/var/lib/gpusched/limiter/containers/{uid}_main/ledger")
    assert os.path.exists(ledger)
    m = requests.get(f"http://127.0.0.1:{limiter_node.dp_metrics_port}/metrics", timeout=5).text
    assert 'gpusched_dp_container_gpu_memory_limit_bytes{container="default/limited/main",' \
           f'device="0"}} {256 << 20}\n' in m, m


def test_opted_out_pod_gets_no_limiter(cluster, limiter_node):
    cluster.apply(limited_pod(cluster, "unlimited",
                              annotations={kcluster.PREFIX + "limiter": "off"}))
    cluster.wait_pods(NS, ["unlimited"], ready_log=DONE, timeout=90)
    out = log_lines(cluster, "unlimited")
    assert out[:5] == ["no-preload", "ctx 0", "who alloc libcuda.so.1", "alloc 0", "alloc 0"], out
    assert out[-1] == "no-ledger", out


def host_pid(pod, comm):
    """The node pid of the container process named comm of pod NS/NAME (by the
    GPUSCHED_POD that Allocate put in its environment: kubelet here runs with
    --cgroups-per-qos=false, so no cgroup path names the pod)."""
    want = f"GPUSCHED_POD={pod}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() != comm:
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    return int(d)
        except OSError:
            continue
    return None


def util_permille(path, dev):
    """Device dev's permille in a util file (src/limiter/lim_util.h), None without one."""
    import struct
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) != 16 + 16 * 16 or data[:8] != b"GSUTIL01":
        return None
    stamp, permille, _ = struct.unpack_from("=QII", data, 16 + 16 * dev)
    return permille if stamp else None


def test_container_utilisation_found_through_containerd(cluster, limiter_node):
    busy = ("/probe/lim_probe runtime ctx:0 alloc:10 launch:1:1 sleep:3600; "
            f"echo {DONE}; trap 'exit 0' TERM; sleep 3600 & wait")
    cluster.apply(limited_pod(cluster, "busy", script=busy, milli="300"))
    p = cluster.wait_pods(NS, ["busy"], ready_log="sleep", timeout=90)["busy"]
    out = log_lines(cluster, "busy")
    assert out[:2] == ["ctx 0", "alloc 0"] and out[2].startswith("launch 0 "), out
    uid = p["metadata"]["uid"]
    pid = host_pid(f"{NS}/busy", "lim_probe")
    assert pid, f"no lim_probe process of pod {NS}/busy on the node"
    with open(f"/proc/{pid}/status") as f:
        nspid = [ln.split()[1:] for ln in f if ln.startswith("NSpid:")][0]
    assert len(nspid) == 2 and nspid[0] != nspid[1], nspid  # containerd's own pid namespace
    doc = limiter_node.read_fake_gpus()
    saved = json.loads(json.dumps(doc))
    util = limiter_node.host(f"/var/lib/gpusched/limiter/containers/{uid}_main/util")
    try:
        doc["gpus"][0]["procs"] = [{"pid": pid, "sm": 37}, {"pid": 1, "sm": 50}]
        limiter_node.write_fake_gpus(doc)
        cluster.wait(lambda: util_permille(util, 0) == 370, 15,
                     "the container's util file to read 370", proc=limiter_node.dp)
        m = requests.get(f"http://127.0.0.1:{limiter_node.dp_metrics_port}/metrics",
                         timeout=5).text
        assert 'gpusched_dp_container_gpu_utilization{container="default/busy/main",' \
               'device="0"} 0.370\n' in m, m
        # its memory share is reported beside it
        assert 'gpusched_dp_container_gpu_memory_limit_bytes{container="default/busy/main",' \
               f'device="0"}} {256 << 20}\n' in m, m
    finally:
        limiter_node.write_fake_gpus(saved)
