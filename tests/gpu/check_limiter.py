"""The in-container limiter (libgpusched-cuda.so) on a real GPU, with PyTorch.

For a machine with an NVIDIA GPU, its driver and a Python with torch (not
part of CI, which has no GPU). Started by tests/gpu/run-real-gpu.sh after
check_real_gpu.py, or alone:

    python3 tests/gpu/check_limiter.py build/libgpusched-cuda.so [build/gpusched]

Every check runs PyTorch in a fresh process with the limiter preloaded, as
the device plugin's /etc/ld.so.preload does, and the environment Allocate
gives a shared container (CUDA_DEVICE_MEMORY_LIMIT, CUDA_DEVICE_SM_LIMIT,
GPUSCHED_LIMITER_DIR):

- a 20 GiB share: torch.cuda.mem_get_info() reports 20 GiB total, 19 GiB
  can be allocated, 21 GiB raises torch.cuda.OutOfMemoryError, and
  nvidia-smi in the same environment shows 20480 MiB total; the same with
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the VMM API:
  cuMemCreate) and with backend:cudaMallocAsync (stream-ordered pools:
  cuMemAllocAsync, cuMemAllocFromPoolAsync);
- GPUSCHED_GPU_UUIDS: the UUID CUDA gives device 0, as the limiter writes
  it, is the one NVML names (else it warns and counts by ordinal);
- the VMM API through ctypes: 12 GiB created, mapped and released at
  once stays counted until cuMemUnmap (12 GiB more is refused till then);
- two processes share the 20 GiB: while one holds 12 GiB the other cannot
  take 12 GiB, and can once the first is killed;
- a compute-bound loop (fp16 matmuls) with a 30 % share runs at 25-40 % of
  its unlimited throughput;
- with no limit, the preloaded limiter costs at most 2 % of throughput;
- given the gpusched binary too (second argument), two such loops of 30 %
  each at once, with the device plugin measuring each one's own
  utilisation (src/dp/busy.h), each run at 20-45 % of unlimited (a 30 %
  share alone ran at 36-39 % on an H200 and an H100: the share is SM busy
  time, not matmul throughput): steered by the whole GPU's utilisation they
  held each other to 13-22 %; steered by single per-process samples, which
  the driver gives to one process a period, they ran at 40 and 49 %;
- then a 20 % and a 60 % loop at once run at 10-35 % and 45-85 % of
  unlimited, the 60 % one at least 1.8 times as fast (on an H200: 0.29 and
  0.60, ratio 2.0, then 0.18 and 0.66 after the throttle's start-up change;
  alone 0.26 and 0.75, which together the GPU cannot give).
  CHECK_LIMITER_ONLY=neighbours runs these two checks alone.

Prints a transcript; exits 1 when a check fails, 2 when it cannot run.
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
SHARE_GIB = 20

MEM = r"""
import torch
free, total = torch.cuda.mem_get_info()
print("mem_get_info total_mib=%d free_mib=%d" % (total >> 20, free >> 20))
x = torch.empty(19 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("alloc 19GiB ok")
del x
torch.cuda.empty_cache()
try:
    y = torch.empty(21 << 30, dtype=torch.uint8, device="cuda")
    print("alloc 21GiB ok")
except torch.cuda.OutOfMemoryError:
    print("alloc 21GiB OutOfMemoryError")
"""

HOLD = r"""
import sys, torch
x = torch.empty(12 << 30, dtype=torch.uint8, device="cuda")
print("holding 12GiB", flush=True)
sys.stdin.readline()
"""

TRY12 = r"""
import torch
try:
    x = torch.empty(12 << 30, dtype=torch.uint8, device="cuda")
    print("alloc 12GiB ok")
except torch.cuda.OutOfMemoryError:
    print("alloc 12GiB OutOfMemoryError")
"""

# The driver's VMM API through ctypes (dlsym on libcuda's handle, as the
# runtime does): 12 GiB created, mapped and released at once (the driver API
# guide's pattern) is still on the card, so 12 GiB more does not fit the
# share until it is unmapped.
VMM = r"""
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location", Loc),
                ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]
P, U64, SZ = ctypes.POINTER, ctypes.c_ulonglong, ctypes.c_size_t
cu.cuMemCreate.argtypes = [P(U64), SZ, P(Prop), U64]
cu.cuMemAddressReserve.argtypes = [P(U64), SZ, SZ, U64, U64]
cu.cuMemMap.argtypes = [U64, SZ, SZ, U64, U64]
cu.cuMemUnmap.argtypes = [U64, SZ]
cu.cuMemRelease.argtypes = [U64]
cu.cuMemAddressFree.argtypes = [U64, SZ]
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
prop = Prop(type=1, location=Loc(type=1, id=0))
n = 12 << 30
def create():
    h = U64()
    rc = cu.cuMemCreate(ctypes.byref(h), n, ctypes.byref(prop), 0)
    return rc, h
rc, h = create()
va = U64()
print("create", rc, "reserve", cu.cuMemAddressReserve(ctypes.byref(va), n, 0, 0, 0),
      "map", cu.cuMemMap(va, n, 0, h, 0), "release", cu.cuMemRelease(h))
rc2, h2 = create()
print("while mapped create", rc2)
if rc2 == 0:
    cu.cuMemRelease(h2)
print("unmap", cu.cuMemUnmap(va, n), "free", cu.cuMemAddressFree(va, n))
rc3, h3 = create()
print("after unmap create", rc3)
"""

BENCH = r"""
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
for _ in range(20):
    b = a @ a
torch.cuda.synchronize()
print("ready", flush=True)
t0, n = time.time(), 0
while time.time() - t0 < %(secs)s:
    for _ in range(10):
        b = a @ a
    torch.cuda.synchronize()
    n += 10
print("matmuls_per_s %%.2f" %% (n / (time.time() - t0)))
"""

failures = 0


def check(ok, what):
    global failures
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    failures += 0 if ok else 1


def env_for(lib, ledger, **limits):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUDA_DEVICE_", "GPUSCHED_", "PYTORCH_CUDA_ALLOC_CONF"))}
    if lib:
        e["LD_PRELOAD"] = lib
    e["GPUSCHED_LIMITER_DIR"] = ledger
    e.update({k: str(v) for k, v in limits.items()})
    return e


def py(code, env, timeout=300):
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout)
    out = r.stdout + r.stderr
    print("  $ python -c <%d lines>  (exit %d)\n    %s" % (
        code.count("\n"), r.returncode, out.strip().replace("\n", "\n    ")[-1500:]))
    return r.stdout


def smi_total(env):
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.total,memory.used",
                        "--format=csv,noheader,nounits", "-i", "0"], env=env,
                       capture_output=True, text=True, timeout=60)
    print("  $ nvidia-smi --query-gpu=memory.total,memory.used -i 0 -> %s%s" % (
        r.stdout.strip(), r.stderr.strip()))
    try:
        return int(r.stdout.split(",")[0])
    except (ValueError, IndexError):
        return -1


def memory(lib, ledger, alloc_conf=None):
    extra = {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else {}
    tag = " (%s)" % alloc_conf if alloc_conf else ""
    env = env_for(lib, ledger, CUDA_DEVICE_MEMORY_LIMIT="%dg" % SHARE_GIB, **extra)
    out = py(MEM, env)
    check("mem_get_info total_mib=%d " % (SHARE_GIB * 1024) in out,
          "torch.cuda.mem_get_info() reports the %d GiB share%s" % (SHARE_GIB, tag))
    check("alloc 19GiB ok" in out, "19 GiB fits in the share%s" % tag)
    check("alloc 21GiB OutOfMemoryError" in out, "21 GiB raises OutOfMemoryError%s" % tag)
    check(smi_total(env) == SHARE_GIB * 1024, "nvidia-smi shows %d MiB total%s" % (
        SHARE_GIB * 1024, tag))


def gpu_uuid():
    r = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def numbering(lib, ledger):
    """GPUSCHED_GPU_UUIDS as Allocate sets it: the UUID CUDA gives device 0
    (cuDeviceGetUuid_v2, formatted by the limiter) must be NVML's, or the
    limiter warns and counts by ordinal."""
    uuid = gpu_uuid()
    env = env_for(lib, ledger, CUDA_DEVICE_MEMORY_LIMIT="%dg" % SHARE_GIB, GPUSCHED_GPU_UUIDS=uuid)
    r = subprocess.run([sys.executable, "-c", "import torch; x = torch.empty(1 << 20, "
                        "device='cuda'); print('ok')"], env=env, capture_output=True, text=True,
                       timeout=300)
    print("  GPUSCHED_GPU_UUIDS=%s -> %s %s" % (uuid, r.stdout.strip(), r.stderr.strip()[-300:]))
    check(uuid.startswith("GPU-") and "ok" in r.stdout and
          "not one of the container's GPUs" not in r.stderr,
          "CUDA's UUID of device 0 is the one NVML and Allocate name")


def vmm(lib, ledger):
    env = env_for(lib, ledger, CUDA_DEVICE_MEMORY_LIMIT="%dg" % SHARE_GIB)
    out = py(VMM, env)
    check("create 0 reserve 0 map 0 release 0" in out, "12 GiB created, mapped and released")
    check("while mapped create 2" in out,
          "while it is mapped 12 GiB more is refused (CUDA_ERROR_OUT_OF_MEMORY)")
    check("unmap 0" in out and "after unmap create 0" in out, "after cuMemUnmap it fits")


def shared_budget(lib, ledger):
    env = env_for(lib, ledger, CUDA_DEVICE_MEMORY_LIMIT="%dg" % SHARE_GIB)
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        check(line.startswith("holding"), "a first process holds 12 GiB")
        check("OutOfMemoryError" in py(TRY12, env),
              "a second process of the container cannot take 12 GiB more")
        holder.kill()
        holder.wait()
        check("alloc 12GiB ok" in py(TRY12, env), "after the first is killed it can")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def rate(lib, ledger, secs=10, **limits):
    out = py(BENCH % {"secs": secs}, env_for(lib, ledger, **limits), timeout=secs + 120)
    for line in out.splitlines():
        if line.startswith("matmuls_per_s "):
            return float(line.split()[1])
    return 0.0


def compute(lib, ledger):
    bare = rate(None, ledger)
    pre = rate(lib, ledger)
    mem_only = rate(lib, ledger, CUDA_DEVICE_MEMORY_LIMIT="%dg" % SHARE_GIB)
    share = rate(lib, ledger, CUDA_DEVICE_SM_LIMIT=30, secs=20)
    print("  matmuls/s: no limiter %.2f, limiter without limits %.2f, memory limit only %.2f, "
          "30 %% compute share %.2f" % (bare, pre, mem_only, share))
    if bare <= 0:
        check(False, "the benchmark ran")
        return
    check(pre >= 0.98 * bare, "no limit: overhead %.1f %% (at most 2 %%)" % (100 * (1 - pre / bare)))
    check(mem_only >= 0.98 * bare,
          "memory limit only: overhead %.1f %% (at most 2 %%)" % (100 * (1 - mem_only / bare)))
    check(0.25 <= share / bare <= 0.40,
          "30 %% compute share runs at %.0f %% of unlimited (25-40 %%)" % (100 * share / bare))


def rate_proc(lib, ledger, secs, **limits):
    return subprocess.Popen([sys.executable, "-c", BENCH % {"secs": secs}],
                            env=env_for(lib, ledger, **limits), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def util_permille(ledger):
    """GPU 0's entry of the util file the plugin wrote (limiter/lim_util.h)."""
    try:
        with open(os.path.join(ledger, "util"), "rb") as f:
            data = f.read()
    except OSError as e:
        return "(%s)" % e.strerror
    if len(data) < 32 or data[:8] != b"GSUTIL01":
        return "(not a util file: %d bytes)" % len(data)
    stamp, permille = struct.unpack_from("=QI", data, 16)
    return "%d" % permille if stamp else "(no sample)"


def neighbours(lib, gpusched, d):
    """Two shared containers on GPU 0 at once, the device plugin writing each one's own
    utilisation into its ledger directory (no kubelet needed for that part): two of 30 %,
    then one of 20 % beside one of 60 %."""
    uuid = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    limdir, kdir = os.path.join(d, "lim"), os.path.join(d, "kubelet")
    os.makedirs(kdir)
    os.makedirs(limdir)  # the plugin enforces shares only where the directory exists
    log = open(os.path.join(d, "plugin.log"), "w+")
    plugin = subprocess.Popen([gpusched, "device-plugin", "--kubelet-dir", kdir, "--no-api",
                               "--limiter-dir", limdir, "--limiter-lib", lib],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(3)
        bare = rate(None, os.path.join(d, "bare"))
        print("  matmuls/s unlimited: %.2f" % bare)
        if bare <= 0:
            check(False, "the benchmark ran")
            return
        got = pair(lib, limdir, uuid, "p30", (30, 30))
        check(len(got) == 2 and all(0.20 <= g / bare <= 0.45 for g in got),
              "two 30 %% neighbours each run at 20-45 %% of unlimited: %s" % fractions(got, bare))
        got = pair(lib, limdir, uuid, "p2060", (20, 60))
        check(len(got) == 2 and 0.10 <= got[0] / bare <= 0.35 and 0.45 <= got[1] / bare <= 0.85,
              "20 %% and 60 %% neighbours run at 10-35 %% and 45-85 %% of unlimited: %s" %
              fractions(got, bare))
        check(len(got) == 2 and got[1] >= 1.8 * got[0],
              "the 60 %% share runs at least 1.8 times the 20 %% share: %s" %
              ("%.2f" % (got[1] / got[0]) if len(got) == 2 and got[0] > 0 else "-"))
    finally:
        plugin.terminate()
        plugin.wait()
        log.seek(0)
        print("  plugin log (last lines):\n    " +
              "\n    ".join(log.read().strip().splitlines()[-15:]))
        log.close()


def fractions(got, bare):
    return "[%s]" % ", ".join("%.2f" % (g / bare) for g in got)


def pair(lib, limdir, uuid, tag, shares):
    """Runs one 20 s loop per share at once, each in its own container's ledger directory
    (with an owner file naming GPU 0, as the plugin writes it); returns their matmuls/s."""
    print("== %s on one GPU at once, the plugin measuring each" %
          " and ".join("%d %%" % s for s in shares))
    ledgers = []
    for i in range(len(shares)):
        c = os.path.join(limdir, "containers", "uid%s%d_main" % (tag, i))
        os.makedirs(c)
        os.chmod(c, 0o1777)
        with open(os.path.join(c, "owner"), "w") as f:
            f.write("default/%s-%d/main\n1\n%s\n" % (tag, i, uuid))
        ledgers.append(c)
    procs = [rate_proc(lib, c, 20, CUDA_DEVICE_SM_LIMIT=s, CUDA_VISIBLE_DEVICES=uuid)
             for c, s in zip(ledgers, shares)]
    for _ in range(3):  # mid-run: what the plugin measured for each container
        time.sleep(5)
        print("  util (GPU 0, per mille): %s" % ", ".join(
            "%s %s" % (os.path.basename(c), util_permille(c)) for c in ledgers))
    got = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        print("    " + out.strip().replace("\n", "\n    ")[-800:])
        got += [float(l.split()[1]) for l in out.splitlines() if l.startswith("matmuls_per_s ")]
    util = [os.path.exists(os.path.join(c, "util")) for c in ledgers]
    print("  matmuls/s: %s, util files %s" % (got, util))
    check(all(util), "the plugin wrote each container's own utilisation")
    return got


def main():
    only = os.environ.get("CHECK_LIMITER_ONLY", "")
    lib = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/libgpusched-cuda.so")
    if not os.path.exists(lib):
        print("check_limiter: %s not found (build it: cmake --build build)" % lib)
        return 2
    if subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                      capture_output=True).returncode:
        print("check_limiter: %s has no torch with CUDA: limiter checks skipped" % sys.executable)
        return 2
    total = py("import torch; print(torch.cuda.mem_get_info()[1] >> 30)", env_for(None, "/tmp"))
    if not total.strip().isdigit() or int(total) <= SHARE_GIB + 2:
        print("check_limiter: the GPU needs more than %d GiB" % (SHARE_GIB + 2))
        return 2
    with tempfile.TemporaryDirectory(prefix="gs-limiter-") as d:
        if only == "neighbours":
            neighbours(lib, os.path.abspath(sys.argv[2]), d)
            print("check_limiter: %s" % ("all checks passed" if not failures else
                                         "%d FAILED" % failures))
            return 1 if failures else 0
        print("== memory: %d GiB share of a %s GiB GPU" % (SHARE_GIB, total.strip()))
        memory(lib, os.path.join(d, "a"))
        memory(lib, os.path.join(d, "b"), "expandable_segments:True")
        memory(lib, os.path.join(d, "b2"), "backend:cudaMallocAsync")
        vmm(lib, os.path.join(d, "v"))
        numbering(lib, os.path.join(d, "u"))
        print("== two processes, one budget")
        shared_budget(lib, os.path.join(d, "c"))
        print("== compute")
        compute(lib, os.path.join(d, "d"))
        if len(sys.argv) > 2:
            neighbours(lib, os.path.abspath(sys.argv[2]), d)
    print("check_limiter: %s" % ("all checks passed" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print("check_limiter: %.0f s" % (time.time() - t0))
    sys.exit(rc)
