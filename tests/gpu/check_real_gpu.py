"""Runs gpusched device-plugin against real NVML and the fake kubelet.

For a machine with an NVIDIA GPU and driver (not part of CI, which has no
GPU). Started by tests/gpu/run-real-gpu.sh. It compares what the plugin
reports with nvidia-smi: every GPU's UUID as a device ID, Healthy, and in
the /inventory answer the same model, memory and PCI bus id; then it has
kubelet Allocate the first GPU and checks that NVIDIA_VISIBLE_DEVICES is its
UUID and that /dev/nvidia<minor> is passed. Prints a transcript; exits 1 on
any mismatch. GPUSCHED_NVML_LIB names another NVML library to load (used to
dry-run this script against tests/gpu/fake_nvml.c).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))

from conftest import free_port  # noqa: E402
from fake_kubelet import FakeKubelet  # noqa: E402
from test_device_plugin import PluginProc  # noqa: E402


def smi():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,pci.bus_id,minor_number",
                          "--format=csv,noheader,nounits"], check=True, capture_output=True,
                         text=True).stdout
    gpus = []
    for line in out.strip().splitlines():
        idx, uuid, name, mem, bus, minor = [x.strip() for x in line.split(",")]
        gpus.append({"index": int(idx), "uuid": uuid, "name": name, "memory_mib": int(mem),
                     "pci_bus_id": bus, "minor": minor})
    return gpus


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
    print("%d checks failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
