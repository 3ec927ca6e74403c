"""Runs gpusched device-plugin against real NVML and the fake kubelet.

For a machine with an NVIDIA GPU and driver (not part of CI, which has no
GPU). Started by tests/gpu/run-real-gpu.sh. It compares what the plugin
reports with nvidia-smi: every GPU's UUID as a device ID, Healthy, and in
the /inventory answer the same model, memory and PCI bus id; then it has
kubelet Allocate the first GPU and checks that NVIDIA_VISIBLE_DEVICES is its
UUID and that /dev/nvidia<minor> is passed. Then, with the fake
kube-apiserver, the extender and the plugin (4 replicas per GPU) share the
GPUs between two pods: the extender places them from the inventory the
plugin published from NVML, a third pod that needs more memory than is left
is refused with the free MiB in the reason (on a one-GPU machine), and each
admitted container gets the GPU's UUID and its memory and compute share.
Last, where python has torch, a CUDA computation runs in each environment
Allocate returned. Prints a transcript; exits 1 on any mismatch.
GPUSCHED_NVML_LIB names another NVML library to load (used to dry-run this
script against tests/gpu/fake_nvml.c).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))

from conftest import free_port  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from fake_kubelet import FakeKubelet  # noqa: E402
from test_device_plugin import PluginProc  # noqa: E402
from test_device_plugin_e2e import wait  # noqa: E402
from test_extender import Extender  # noqa: E402

ANN = "gpusched.io/"


def smi():
    """nvidia-smi's view. minor_number is not a query field on every driver
    (580 refuses it): then the minor comes from `nvidia-smi -q`."""
    def query(fields):
        r = subprocess.run(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("nvidia-smi --query-gpu=%s: exit %d: %s" % (fields, r.returncode, r.stdout + r.stderr))
            return None
        return [[x.strip() for x in line.split(",")] for line in r.stdout.strip().splitlines()]
    rows = query("index,uuid,name,memory.total,pci.bus_id")
    if rows is None:
        raise SystemExit("nvidia-smi cannot list the GPUs")
    minors = query("minor_number")
    if minors is None:
        minors = []
        for r in rows:
            q = subprocess.run(["nvidia-smi", "-q", "-i", r[0]], capture_output=True, text=True).stdout
            m = re.search(r"Minor Number\s*:\s*(\d+)", q)
            minors.append([m.group(1) if m else ""])
    return [{"index": int(idx), "uuid": uuid, "name": name, "memory_mib": int(mem),
             "pci_bus_id": bus, "minor": m[0]} for (idx, uuid, name, mem, bus), m in zip(rows, minors)]


ENVS = []  # every Allocate's environment, for the CUDA check


def cuda_check(check):
    """Runs a CUDA computation in each environment Allocate returned, as the
    container would get it; skipped where python has no torch."""
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        print("(CUDA check skipped: %s has no torch)" % sys.executable)
        return
    code = ("import os, torch; n = torch.cuda.device_count(); "
            "print(n, torch.cuda.get_device_name(0) if n else '-', "
            "float(torch.ones(1 << 20, device='cuda').sum()) if n else 0)")
    for who, env in ENVS:
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                           capture_output=True, text=True, timeout=120)
        print("CUDA as %s with NVIDIA_VISIBLE_DEVICES=%s: %s" % (
            who, env.get("NVIDIA_VISIBLE_DEVICES"), r.stdout.strip() or r.stderr[-300:]))
        check(r.stdout.split()[:1] == ["1"] and r.stdout.strip().endswith(" 1048576.0"),
              "%s: CUDA sees exactly one GPU and computes on it" % who)


def shared(binary, gpus, check):
    """Two shared pods on the real GPUs, placed by the extender, admitted by kubelet."""
    kdir = tempfile.mkdtemp(prefix="dpgpu", dir="/tmp")
    gdir = tempfile.mkdtemp(prefix="dpgpuapi", dir="/tmp")
    api = FakeApiServer(bookmark_interval=0.5).start()
    api.add_node("node-a", capacity={"cpu": "16", "memory": "64Gi", "pods": "110",
                                     "nvidia.com/gpu": "4"})
    kc = api.write_kubeconfig(os.path.join(gdir, "kubeconfig"))
    kubelet = FakeKubelet(kdir).start()
    extra = ["--nvml-lib", os.environ["GPUSCHED_NVML_LIB"]] if "GPUSCHED_NVML_LIB" in os.environ else []
    dp = PluginProc(binary, kdir, None, "--kubeconfig", kc, "--replicas", "4",
                    "--pod-resources-socket", os.path.join(kdir, "none.sock"),
                    "--publish-interval", "1", *extra, no_api=False, port=free_port())
    ext = None
    try:
        inv = wait(lambda: api.get("nodes", "node-a")["metadata"]["annotations"].get(
            ANN + "gpu-inventory"), what="inventory annotation", timeout=20)
        print("node-a inventory annotation:", inv)
        ext = Extender(binary, ["--kubeconfig", kc, "--inventory-ttl", "0"])
        ext.wait_ready(path="/readyz")
        plugin = kubelet.wait_plugin("nvidia.com/gpu", timeout=20)
        ids = [d.ID for d in plugin.wait(lambda d: len(d) >= 4, timeout=10)]
        print("ListAndWatch with --replicas 4:", ids)
        check(sorted(ids) == sorted("%s::%d" % (g["uuid"], k) for g in gpus for k in range(4)),
              "4 replica devices of each GPU")
        uuids = [g["uuid"] for g in gpus]
        free = list(ids)
        big = gpus[0]["memory_mib"] // 1024 - (20 + 30) + 10  # 10 GiB more than is left
        for name, mem, cores in (("infer-a", 20, 30), ("infer-b", 30, 50), ("too-big", big, 10)):
            api.add_pod("default", name, containers=[{"name": "main", "image": "cuda", "resources": {
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "%dGi" % mem,
                           "nvidia.com/gpu-cores": str(cores)}}}])
            p = api.get("pods", name, "default")
            f = ext.filter(p, ["node-a"])
            if name == "too-big" and len(gpus) > 1:
                print("(%s skipped: it needs a one-GPU machine)" % name)
                continue
            if name == "too-big":
                why = json.dumps(f["FailedNodes"])
                print("filter %s (%d GiB): %s" % (name, mem, why))
                check(not f["NodeNames"] and "MiB" in why,
                      "a pod needing %d GiB more than is left is refused, with the free MiB" % mem)
                continue
            check(f["NodeNames"] == ["node-a"], "filter admits %s (%d GiB, %d %%)" % (name, mem, cores))
            b = ext.bind(p, "node-a")
            check(b.status_code == 200 and b.json()["Error"] == "", "bind %s: %s" % (name, b.text))
            ann = api.get("pods", name, "default")["metadata"]["annotations"]
            got = ann.get(ANN + "gpu-uuids")
            check(got in uuids, "%s assigned %s" % (name, got))
            chosen, r = plugin.admit(free, 1)
            free = [i for i in free if i not in chosen]
            ENVS.append(("default/" + name, dict(r.envs)))
            print("Allocate(%s) for default/%s: envs=%s devices=%s" % (
                chosen[0], name, dict(r.envs), [d.host_path for d in r.devices]))
            check(r.envs.get("NVIDIA_VISIBLE_DEVICES") == got, "%s gets the assigned GPU's UUID" % name)
            check(r.envs.get("GPUSCHED_GPU_MEMORY_MIB") == str(mem * 1024),
                  "%s gets its memory share: %r MiB" % (name, r.envs.get("GPUSCHED_GPU_MEMORY_MIB")))
            check(r.envs.get("GPUSCHED_GPU_MILLI") == str(cores * 10),
                  "%s gets its compute share: %r/1000" % (name, r.envs.get("GPUSCHED_GPU_MILLI")))
            check(r.envs.get("GPUSCHED_POD") == "default/" + name, "Allocate found default/" + name)
    finally:
        if ext:
            ext.proc.terminate()
            ext.proc.wait(10)
            print("extender log:\n" + ext.proc.stderr.read())
        out = dp.output()
        dp.stop()
        kubelet.stop()
        api.stop()
        shutil.rmtree(kdir, ignore_errors=True)
        shutil.rmtree(gdir, ignore_errors=True)
        print("plugin log (API mode):\n" + out)


def main():
    binary = sys.argv[1]
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    want = smi()
    print("nvidia-smi:", json.dumps(want, indent=1))
    kdir = tempfile.mkdtemp(prefix="dpgpu", dir="/tmp")
    kubelet = FakeKubelet(kdir).start()
    extra = ["--nvml-lib", os.environ["GPUSCHED_NVML_LIB"]] if "GPUSCHED_NVML_LIB" in os.environ else []
    pl = PluginProc(binary, kdir, None, "--reprobe-transient", "5", *extra, port=free_port())
    try:
        p = kubelet.wait_plugin("nvidia.com/gpu", timeout=20)
        devs = p.wait(lambda d: len(d) >= 1, timeout=10)
        print("ListAndWatch:", [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in devs])
        ids = {d.ID: d.health for d in devs}
        for g in want:
            check(ids.get(g["uuid"]) == "Healthy", "device %s advertised and Healthy" % g["uuid"])
        inv = pl.get("/inventory").json()
        print("inventory:", json.dumps(inv, indent=1))
        by_uuid = {g["uuid"]: g for g in inv["gpus"]}
        for g in want:
            mine = by_uuid.get(g["uuid"], {})
            check(mine.get("model") == g["name"], "model of %s: %r" % (g["uuid"], mine.get("model")))
            check(mine.get("memory_mib") == g["memory_mib"],
                  "memory of %s: %r MiB (nvidia-smi %d)" % (g["uuid"], mine.get("memory_mib"),
                                                          g["memory_mib"]))
            check(mine.get("pci_bus_id", "").lower() == g["pci_bus_id"].lower(),
                  "PCI bus id of %s: %r" % (g["uuid"], mine.get("pci_bus_id")))
            check(mine.get("healthy") is True, "health of %s in the inventory" % g["uuid"])
        first = want[0]
        r = p.allocate([first["uuid"]])
        ENVS.append(("a container (no API server)", dict(r.envs)))
        print("Allocate(%s): envs=%s devices=%s" % (first["uuid"], dict(r.envs),
                                                   [d.host_path for d in r.devices]))
        check(r.envs.get("NVIDIA_VISIBLE_DEVICES") == first["uuid"],
              "Allocate returns the GPU's UUID in NVIDIA_VISIBLE_DEVICES")
        if first["minor"].isdigit():
            check("/dev/nvidia%s" % first["minor"] in [d.host_path for d in r.devices],
                  "Allocate passes /dev/nvidia%s" % first["minor"])
        print(pl.get("/metrics").text)
    finally:
        out = pl.output()
        pl.stop()
        kubelet.stop()
        shutil.rmtree(kdir, ignore_errors=True)
        print("plugin log:\n" + out)
    print("== shared: extender + plugin (4 replicas) + fake kube-apiserver")
    shared(binary, want, check)
    print("== CUDA in each container's environment")
    cuda_check(check)
    print("%d checks failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
