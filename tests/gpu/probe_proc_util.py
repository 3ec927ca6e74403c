"""What NVML's per-process utilisation samples look like on a real GPU.

For a machine with an NVIDIA GPU, torch and nvidia-ml-py (pynvml); not part
of CI. The device plugin's per-container utilisation (src/dp/busy.c) is
built on nvmlDeviceGetProcessUtilization; this prints what that call
returns while (1) two unthrottled fp16 matmul loops share GPU 0, (2) one
loop runs alone under the limiter with a 30 % share (bursts, then waits):
every poll (100 ms apart, each asking for the samples newer than the
newest seen) with each sample's process, timestamp and SM percent, the
spacing of sample timestamps, and the GPU's own utilisation.

    python3 tests/gpu/probe_proc_util.py [build/libgpusched-cuda.so] [OUT.json]
"""
import json
import os
import subprocess
import sys
import time

import pynvml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_limiter import BENCH  # noqa: E402  (prints "ready" once warm)


def start(secs, env):
    return subprocess.Popen([sys.executable, "-c", BENCH % {"secs": secs}], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def poll(h, secs, names, log):
    last, t0 = 0, time.time()
    while time.time() - t0 < secs:
        time.sleep(0.1)
        try:
            s = pynvml.nvmlDeviceGetProcessUtilization(h, last)
        except pynvml.NVMLError as e:
            s, err = [], str(e)
        else:
            err = ""
        dev = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        rows = [(names.get(x.pid, str(x.pid)), x.timeStamp, x.smUtil) for x in s]
        for _, ts, _ in rows:
            last = max(last, ts)
        log.append({"t": round(time.time() - t0, 3), "dev": dev, "err": err,
                    "samples": [list(r) for r in rows]})


def show(title, log):
    print("== " + title)
    stamps = sorted({r[1] for p in log for r in p["samples"]})
    base = stamps[0] if stamps else 0
    for p in log:
        print("  t=%5.2f dev=%3d%% %s%s" % (p["t"], p["dev"], " ".join(
            "%s@%+.0fms:%d" % (n, (ts - base) / 1000.0, sm) for n, ts, sm in p["samples"]),
            (" (" + p["err"] + ")") if p["err"] else ""))
    gaps = [(b - a) / 1000.0 for a, b in zip(stamps, stamps[1:])]
    if gaps:
        gaps.sort()
        print("  %d distinct sample stamps; spacing ms: min %.1f median %.1f max %.1f" % (
            len(stamps), gaps[0], gaps[len(gaps) // 2], gaps[-1]))


def phase(h, title, envs, secs, log_all):
    procs = [start(secs + 4, e) for e in envs]
    for p in procs:
        p.stdout.readline()  # ready
    names = {p.pid: "p%d" % i for i, p in enumerate(procs)}
    log = []
    poll(h, secs, names, log)
    for p in procs:
        out, _ = p.communicate(timeout=120)
        print("  %s: %s" % (names[p.pid], out.strip().replace("\n", " | ")[-200:]))
    show(title, log)
    log_all[title] = log


def main():
    lib = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("GPU 0:", pynvml.nvmlDeviceGetName(h))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE_", "GPUSCHED_"))}
    log_all = {}
    phase(h, "two unthrottled loops", [base, base], 4, log_all)
    if lib:
        lim = dict(base, LD_PRELOAD=lib, CUDA_DEVICE_SM_LIMIT="30", GPUSCHED_LIMITER_DIR="/tmp/probe-lim")
        phase(h, "one loop, 30 % share (whole-GPU steering)", [lim], 5, log_all)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(log_all, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
