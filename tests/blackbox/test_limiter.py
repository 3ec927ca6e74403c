"""The in-container limiter (libgpusched-cuda.so) with stand-in drivers.

CI has no GPU: <build>/limiter-test holds a stand-in libcuda.so.1
(tests/limiter/fake_cuda.c: 2 devices of FAKE_CUDA_MEM_MIB each, every
allocation tracked), the stand-in libnvidia-ml.so.1 (tests/gpu/fake_nvml.c)
and lim_probe, a CUDA "application" that loads the driver as the CUDA 12
runtime does (dlopen + cuGetProcAddress_v2), by exported names (dlsym), or
linked (lim_probe_linked). Each probe op prints one line; these tests run
it with the limiter preloaded, as the device plugin's /etc/ld.so.preload
does, and check what the application sees and what the card holds.
"""
import os
import platform
import signal
import struct
import subprocess
import sys
import time

import pytest

from conftest import ROOT

BUILD = os.environ.get("GPUSCHED_BUILD_DIR", os.path.join(ROOT, "build"))
TDIR = os.path.join(BUILD, "limiter-test")
LIB = os.path.join(BUILD, "libgpusched-cuda.so")
MODES = ["runtime", "runtime-ptsz", "dlsym", "linked"]


@pytest.fixture(autouse=True)
def built():
    for f in (LIB, os.path.join(TDIR, "lim_probe"), os.path.join(TDIR, "libcuda.so.1")):
        if not os.path.exists(f):
            pytest.fail(f"{f} not built (cmake --build {BUILD})")


@pytest.fixture
def ledger_dir(tmp_path):
    return str(tmp_path / "ledger")


def env_for(ledger_dir, preload=True, **extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUDA_", "GPUSCHED_", "FAKE_", "LD_PRELOAD"))}
    e["LD_LIBRARY_PATH"] = TDIR
    e["GPUSCHED_LIMITER_DIR"] = ledger_dir
    # a sanitized probe (the ASan build) must not insist on its runtime
    # coming first: the limiter is deliberately not sanitized
    e["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                               "verify_asan_link_order=0"]))
    if preload:
        e["LD_PRELOAD"] = LIB
    e.update({k: str(v) for k, v in extra.items()})
    return e


def probe(mode, *ops, env, check=True, timeout=60):
    exe = os.path.join(TDIR, "lim_probe_linked" if mode == "linked" else "lim_probe")
    r = subprocess.run([exe, mode, *ops], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, f"probe {ops}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def lines(r):
    return r.stdout.split("\n")[:-1]


@pytest.mark.parametrize("mode", MODES)
def test_memory_limit_each_way_of_loading_the_driver(mode, ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m")
    r = probe(mode, "ctx:0", "who:alloc", "alloc:100", "alloc:100", "alloc:100", "info",
              "total:0", "card:0", "free", "alloc:50", "info", env=env)
    assert lines(r) == ["ctx 0", "who alloc libgpusched-cuda.so", "alloc 0", "alloc 0",
                        "alloc 2", "info 0 56 256", "total 0 256", "card 200", "free 0",
                        "alloc 0", "info 0 106 256"], r.stderr
    assert r.stderr == ""


@pytest.mark.parametrize("mode", ["runtime", "dlsym"])
def test_limits_file_for_a_process_started_without_the_environment(mode, ledger_dir):
    """sshd (an MPI worker), sudo or env -i start a process without the
    environment Allocate set: the limits file the device plugin writes in
    the ledger directory holds the same variables, and the environment wins
    where it has them."""
    os.makedirs(ledger_dir)
    with open(os.path.join(ledger_dir, "limits"), "w") as f:
        f.write("GPUSCHED_GPU_UUIDS=GPU-a\nCUDA_DEVICE_MEMORY_LIMIT=256m\n")
    r = probe(mode, "ctx:0", "alloc:200", "alloc:100", "info", env=env_for(ledger_dir))
    assert lines(r) == ["ctx 0", "alloc 0", "alloc 2", "info 0 56 256"], r.stderr
    r = probe(mode, "ctx:0", "alloc:200", "alloc:100", "info",
              env=env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="512m"))
    assert lines(r) == ["ctx 0", "alloc 0", "alloc 0", "info 0 212 512"], r.stderr


@pytest.mark.parametrize("mode", ["runtime", "dlsym"])
def test_only_what_is_limited_is_wrapped(mode, ledger_dir):
    r = probe(mode, "ctx:0", "who:alloc", "who:launch", "who:info",
              env=env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="64m"))
    assert lines(r)[1:] == ["who alloc libgpusched-cuda.so", "who launch libcuda.so.1",
                            "who info libgpusched-cuda.so"]
    r = probe(mode, "ctx:0", "who:alloc", "who:launch", "who:info",
              env=env_for(ledger_dir, CUDA_DEVICE_SM_LIMIT="50"))
    assert lines(r)[1:] == ["who alloc libcuda.so.1", "who launch libgpusched-cuda.so",
                            "who info libcuda.so.1"]


@pytest.mark.parametrize("mode", ["runtime", "dlsym"])
def test_no_limit_is_pass_through(mode, ledger_dir):
    for env in (env_for(ledger_dir), env_for(ledger_dir, GPUSCHED_LIMITER="off",
                                             CUDA_DEVICE_MEMORY_LIMIT="64m")):
        r = probe(mode, "ctx:0", "who:alloc", "who:launch", "who:info", "alloc:700", "info",
                  "nvml:0", "launch:3:1", env=env)
        out = lines(r)
        # the driver's own functions were handed out, not the wrappers
        assert out[1:4] == ["who alloc libcuda.so.1", "who launch libcuda.so.1",
                            "who info libcuda.so.1"]
        assert out[4:7] == ["alloc 0", "info 0 324 1024", "nvml 0 81559 0 81559"]
        assert r.stderr == ""
    assert not os.path.exists(ledger_dir), "no limit: no ledger either"


def test_linked_without_limit_passes_through(ledger_dir):
    r = probe("linked", "ctx:0", "alloc:700", "alloc:300", "info", "card:0",
              env=env_for(ledger_dir))
    assert lines(r) == ["ctx 0", "alloc 0", "alloc 0", "info 0 24 1024", "card 1000"]


@pytest.mark.parametrize("mode", ["runtime", "runtime-ptsz", "linked"])
@pytest.mark.parametrize("kind", ["alloc:40", "managed:40", "async:40", "pool:40",
                                  "pitch:4096:10240", "create:40:dev0", "array:4096:2560",
                                  "array3d:1024:1024:10", "mipmap:4096:2048:2"])
def test_every_allocation_kind_counts_and_its_free_gives_back(mode, kind, ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="64m")
    r = probe(mode, "ctx:0", kind, "card:0", "alloc:40", "free", "alloc:40", "card:0", env=env)
    out = lines(r)
    assert out[1].split()[1] == "0", out
    assert out[2] == "card 40"
    assert out[3] == "alloc 2", f"{kind} was not counted: {out}"
    assert out[4] == "free 0"
    assert out[5] == "alloc 0", f"freeing {kind} did not give its memory back: {out}"


@pytest.mark.parametrize("mode", ["runtime", "linked"])
def test_vmm_host_locations_are_not_device_memory(mode, ledger_dir):
    # HAMi-core #187: cuMemCreate with a host location (llama.cpp) must work
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="64m")
    r = probe(mode, "ctx:0", "create:100:host", "create:100:hostnuma", "alloc:60", "card:0",
              "info", env=env)
    assert lines(r) == ["ctx 0", "create 0", "create 0", "alloc 0", "card 60", "info 0 4 64"]


@pytest.mark.parametrize("mode", ["runtime", "linked"])
def test_vmm_from_a_thread_without_context(mode, ledger_dir):
    # HAMi-core #169/#172: a worker thread with no current context calling
    # cuMemCreate is counted on the device its location names
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT_1="64m")
    r = probe(mode, "init", "tcreate:40:1", "tcreate:40:1", "tcreate:300:0", "ctx:1",
              "alloc:30", "info", env=env)
    assert lines(r) == ["init 0", "tcreate 0", "tcreate 2", "tcreate 0", "ctx 0", "alloc 2",
                        "info 0 24 64"]


@pytest.mark.parametrize("mode", ["runtime", "dlsym", "linked"])
@pytest.mark.parametrize("order", ["release-mapped", "retain", "unmap-first"])
def test_vmm_memory_lives_until_its_last_mapping_and_handle_go(mode, order, ledger_dir):
    # a handle's memory stays on the card while the handle, a handle
    # retained from a mapping, or a mapping is left: the driver API guide
    # releases right after cuMemMap, NCCL releases its retained handle
    # before cuMemUnmap, PyTorch's expandable segments unmap first
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="100m")
    steps = {
        "release-mapped": ["map", "free"],
        "retain": ["map", "retain", "free", "free"],
        "unmap-first": ["map", "unmap"],
    }[order]
    last = {"release-mapped": "unmap", "retain": "unmap", "unmap-first": "free"}[order]
    r = probe(mode, "ctx:0", "create:60:dev0", *steps, "card:0", "create:60:dev0", "info",
              last, "card:0", "create:60:dev0", "card:0", env=env)
    out = lines(r)
    n = len(steps)
    assert out[:2] == ["ctx 0", "create 0"]
    assert all(x.endswith(" 0") for x in out[2:2 + n]), out
    assert out[2 + n] == "card 60", "the card still holds the memory"
    assert out[3 + n] == "create 2", f"memory still held was given back early: {out}"
    assert out[4 + n] == "info 0 40 100"
    assert out[5 + n] == f"{last} 0"
    assert out[6 + n] == "card 0"
    assert out[7 + n] == "create 0", f"the last reference did not give the memory back: {out}"
    assert out[8 + n] == "card 60"


@pytest.mark.parametrize("mode", ["linked", "dlsym"])
def test_per_thread_stream_lookup_of_a_function_without_such_a_variant(mode, ledger_dir):
    # nvcc --default-stream per-thread asks cuGetProcAddress for every entry
    # point with the per-thread flag; cuMemAlloc has no _ptsz variant, the
    # driver gives the plain one, and it must be counted even when nothing
    # called the wrapper before (a linked program)
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="100m")
    r = probe(mode, "ctx:0", "ptszalloc:60", "ptszalloc:60", "card:0", env=env)
    assert lines(r) == ["ctx 0", "ptszalloc 0", "ptszalloc 2", "card 60"]


def test_per_device_limits(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="512m", CUDA_DEVICE_MEMORY_LIMIT_1="64m")
    r = probe("runtime", "ctx:0", "alloc:400", "info", "ctx:1", "alloc:100", "alloc:60", "info",
              "total:0", "total:1", env=env)
    assert lines(r) == ["ctx 0", "alloc 0", "info 0 112 512", "ctx 0", "alloc 2", "alloc 0",
                        "info 0 4 64", "total 0 512", "total 0 64"]


def test_reported_total_never_above_the_card(ledger_dir):
    # HAMi-core #81
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="2g", FAKE_CUDA_MEM_MIB=512)
    r = probe("runtime", "ctx:0", "info", "total:0", "alloc:100", "info", env=env)
    assert lines(r) == ["ctx 0", "info 0 512 512", "total 0 512", "alloc 0", "info 0 412 512"]


def test_nvml_reports_the_share(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="20g", FAKE_CUDA_MEM_MIB=81559)
    r = probe("runtime", "ctx:0", "alloc:5000", "nvml:0", "nvml2:0", "nvml:1", env=env)
    assert lines(r) == ["ctx 0", "alloc 0", "nvml 0 20480 5000 15480",
                        "nvml2 0 20480 5000 15480", "nvml 0 20480 0 20480"]


@pytest.mark.parametrize("visible", [
    "GPU-fa4e0000-0000-4000-8000-000000000001,GPU-fa4e0000-0000-4000-8000-000000000000",
    "1,0"])
def test_nvml_maps_its_gpus_to_cuda_ordinals(visible, ledger_dir):
    # Allocate lists UUIDs in assignment order; NVML enumerates by bus: CUDA
    # device 0 is NVML's GPU 1 here (indices work too)
    env = env_for(ledger_dir, CUDA_VISIBLE_DEVICES=visible, CUDA_DEVICE_MEMORY_LIMIT_0="256m",
                  CUDA_DEVICE_MEMORY_LIMIT_1="512m")
    r = probe("runtime", "ctx:0", "alloc:100", "nvml:0", "nvml:1", "nvml:2", env=env)
    assert lines(r) == ["ctx 0", "alloc 0", "nvml 0 512 0 512", "nvml 0 256 100 156",
                        "nvml 0 40960 0 40960"]


def test_two_processes_share_one_budget_and_a_killed_one_gives_back(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m")
    a = subprocess.Popen([os.path.join(TDIR, "lim_probe"), "runtime", "ctx:0", "alloc:150",
                          "ready"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert a.stdout.readline() == "ctx 0\n"
        assert a.stdout.readline() == "alloc 0\n"
        assert a.stdout.readline() == "ready\n"
        r = probe("dlsym", "ctx:0", "alloc:150", "alloc:100", "info", "nvml:0", env=env)
        assert lines(r) == ["ctx 0", "alloc 2", "alloc 0", "info 0 6 256",
                            "nvml 0 256 250 6"]
        # mid-run SIGKILL: no exit handler runs, the kernel drops its lock
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        r = probe("runtime", "ctx:0", "alloc:250", "info", env=env)
        assert lines(r) == ["ctx 0", "alloc 0", "info 0 6 256"]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()


def test_processes_that_number_the_gpus_their_own_way_share_one_count(ledger_dir):
    # a container of two shared GPUs, in Allocate's order GPU 0, GPU 1
    # (GPUSCHED_GPU_UUIDS); a process may set its own CUDA_VISIBLE_DEVICES
    # (Ray gives each worker one GPU): its device 0 may be GPU 1, and its
    # memory must count on GPU 1, not on whatever the others call device 0
    g = ["GPU-fa4e0000-0000-4000-8000-00000000000%d" % i for i in range(2)]
    base = {"CUDA_DEVICE_MEMORY_LIMIT": "100m", "GPUSCHED_GPU_UUIDS": ",".join(g)}
    a = subprocess.Popen([os.path.join(TDIR, "lim_probe"), "runtime", "ctx:0", "alloc:60",
                          "ready"], env=env_for(ledger_dir, CUDA_VISIBLE_DEVICES=g[0], **base),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert [a.stdout.readline() for _ in range(3)] == ["ctx 0\n", "alloc 0\n", "ready\n"]
        r = probe("runtime", "ctx:0", "alloc:60", "alloc:50", "info", "nvml:0", "nvml:1",
                  env=env_for(ledger_dir, CUDA_VISIBLE_DEVICES=g[1], **base))
        assert lines(r) == ["ctx 0", "alloc 0", "alloc 2", "info 0 40 100",
                            "nvml 0 100 60 40", "nvml 0 100 60 40"]
        # by index, the other way round: its device 1 is GPU 0, where a holds 60
        r = probe("linked", "ctx:1", "alloc:50", "info", "ctx:0", "alloc:90",
                  env=env_for(ledger_dir, CUDA_VISIBLE_DEVICES="1,0", **base))
        assert lines(r) == ["ctx 0", "alloc 2", "info 0 40 100", "ctx 0", "alloc 0"]
    finally:
        a.kill()
        a.wait()


def test_concurrent_threads_and_processes_keep_the_ledger_exact(ledger_dir):
    """4 threads in each of 3 processes allocate and free 70 MiB
    against 256 MiB 3000 times: no process's card ever holds more than the limit, some
    allocations are refused, none fails otherwise, and when all are done the
    budget is whole again (no update lost under contention)."""
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m")
    exe = os.path.join(TDIR, "lim_probe")
    procs = [subprocess.Popen([exe, "runtime", "threads:4:3000:70"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    total_ok = total_oom = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        f = dict(kv.split("=") for kv in out.split()[1:])
        assert f["other"] == "0" and int(f["peak"]) <= 256, out
        total_ok += int(f["ok"])
        total_oom += int(f["oom"])
    assert total_ok + total_oom == 3 * 4 * 3000 and total_ok > 0 and total_oom > 0
    r = probe("runtime", "ctx:0", "info", "alloc:256", env=env)
    assert lines(r) == ["ctx 0", "info 0 256 256", "alloc 0"]


def test_fork_child_has_its_own_slot_in_the_shared_budget(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m")
    r = probe("linked", "ctx:0", "alloc:150", "fork:150", "fork:100", "alloc:100", "info",
              env=env)
    # the child's 100 MiB went with it (its slot is reclaimed)
    assert lines(r) == ["ctx 0", "alloc 0", "child 2", "forked 0", "child 0", "forked 0",
                        "alloc 0", "info 0 6 256"]


def test_a_child_the_ledger_cannot_record_is_still_held(ledger_dir):
    # its re-open of the ledger fails (here: the file is gone): the child is
    # held to the limit on its own, beside what the ledger shows, not let
    # through uncounted
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="100m")
    r = probe("linked", "ctx:0", "alloc:60", "unlinkledger", "fork:60", "fork:30", env=env)
    out = lines(r)
    assert out[:3] == ["ctx 0", "alloc 0", "unlinkledger 0"]
    assert out[3:] == ["child 2", "forked 0", "child 0", "forked 0"], out
    assert "the shared ledger cannot record this process" in r.stderr


def test_exec_starts_with_an_empty_slot(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m")
    r = probe("runtime", "ctx:0", "alloc:200", "exec", "ctx:0", "info", "alloc:200", env=env)
    assert lines(r) == ["ctx 0", "alloc 0", "ctx 0", "info 0 256 256", "alloc 0"]


def test_static_initialiser_before_the_limiter(ledger_dir):
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="256m", EARLY_ALLOC_MIB=300)
    assert lines(probe("linked", "early", env=env)) == ["early 2"]
    env["EARLY_ALLOC_MIB"] = "200"
    r = probe("linked", "early", "alloc:100", "info", env=env)
    assert lines(r) == ["early 0", "alloc 2", "info 0 56 256"]


@pytest.mark.parametrize("var,val", [("CUDA_DEVICE_MEMORY_LIMIT", "12x"),
                                     ("CUDA_DEVICE_MEMORY_LIMIT", "-5m"),
                                     ("CUDA_DEVICE_MEMORY_LIMIT_3", "0"),
                                     ("CUDA_DEVICE_SM_LIMIT", "150"),
                                     ("GPUSCHED_LIMITER_DIR", "relative/dir")])
def test_bad_environment_warns_once_and_passes_through(var, val, ledger_dir):
    env = env_for(ledger_dir, **{"CUDA_DEVICE_MEMORY_LIMIT": "64m", var: val})
    r = probe("runtime", "ctx:0", "who:alloc", "alloc:300", "info", "alloc:10", env=env)
    assert lines(r) == ["ctx 0", "who alloc libcuda.so.1", "alloc 0", "info 0 724 1024",
                        "alloc 0"]
    assert r.stderr.count("gpusched-limiter:") == 1, r.stderr
    assert f"{var}: '{val}'" in r.stderr


def test_corrupt_ledger_is_an_error_not_a_crash(ledger_dir):
    os.makedirs(ledger_dir)
    with open(os.path.join(ledger_dir, "ledger"), "wb") as f:
        f.write(b"GSLEDGER" + b"\xff" * 4000)
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="64m")
    # moved aside, a new one made: the next process shares it (each was held
    # to the whole limit on its own, N processes N limits)
    a = subprocess.Popen([os.path.join(TDIR, "lim_probe"), "runtime", "ctx:0", "alloc:60",
                          "ready"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert [a.stdout.readline() for _ in range(3)] == ["ctx 0\n", "alloc 0\n", "ready\n"]
        r = probe("runtime", "ctx:0", "alloc:10", "info", env=env)
        assert lines(r) == ["ctx 0", "alloc 2", "info 0 4 64"]
        assert r.stderr == ""
    finally:
        _, err = a.communicate("\n", timeout=30)
    assert err.count("gpusched-limiter:") == 1, err
    assert "shared ledger unusable" in err and "major" in err
    assert "moved to ledger.bad" in err
    assert os.path.exists(os.path.join(ledger_dir, "ledger.bad"))


def test_preloaded_into_every_program(ledger_dir):
    """/etc/ld.so.preload puts the library into every process of the
    container: shells, interpreters, programs run with an empty environment.
    They must run as if it were not there."""
    for extra in ({}, {"CUDA_DEVICE_MEMORY_LIMIT": "64m", "CUDA_DEVICE_SM_LIMIT": "30"}):
        env = env_for(ledger_dir, **extra)
        for argv in (["/bin/true"], ["/bin/sh", "-c", "ls / >/dev/null && echo ok"],
                     ["/usr/bin/python3", "-c", "import ctypes, json; print('ok')"]):
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and r.stderr == "", (argv, r.stderr)
        r = subprocess.run(["env", "-i", f"LD_PRELOAD={LIB}", "/bin/sh", "-c", "echo ok"],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
    assert not os.path.exists(ledger_dir), "no GPU call: nothing created"


def test_dlsym_next_and_default_answer_for_their_caller(ledger_dir):
    """The library replaces dlsym, which glibc answers for RTLD_NEXT ("the next
    definition after the caller": interposers, OpenMP's ompt_start_tool) and for
    RTLD_DEFAULT (the caller's scope, its own for a library opened RTLD_LOCAL)
    relative to the object that called it. Passed on from inside the limiter, a
    library's RTLD_NEXT lookup found its own function again (which then calls
    itself until the stack runs out) and RTLD_DEFAULT missed RTLD_LOCAL
    libraries' own symbols."""
    exe = os.path.join(TDIR, "lim_next")
    if platform.machine() != "x86_64":
        pytest.skip("dlsym passes the caller through on x86-64 only (lim_hook.c)")
    for preload in (False, True):
        for extra in ({}, {"CUDA_DEVICE_MEMORY_LIMIT": "64m", "CUDA_DEVICE_SM_LIMIT": "30"}):
            env = env_for(ledger_dir, preload=preload, **extra)
            r = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
            assert (r.returncode, r.stdout) == (0, "next 102 local 1\n"), (preload, r)


def test_needs_nothing_but_an_old_glibc():
    """Preloaded into every program of any image: the library may depend on
    glibc alone (the image may have nothing else), of any version since 2.17
    (src/limiter/lim_compat.h; an image with glibc 2.31 would otherwise
    refuse it), and exports only the interposed functions."""
    d = subprocess.run(["readelf", "-dW", LIB], capture_output=True, text=True, check=True)
    needed = [line.split("[")[1].rstrip("]") for line in d.stdout.splitlines()
              if "(NEEDED)" in line]
    assert needed == ["libdl.so.2", "libpthread.so.0", "libc.so.6"]
    t = subprocess.run(["objdump", "-T", LIB], capture_output=True, text=True, check=True)
    versions = {w.strip("()") for w in t.stdout.split() if w.startswith(("GLIBC_", "(GLIBC_"))}
    newest = max(tuple(int(x) for x in v[6:].split(".")) for v in versions)
    if platform.machine() == "x86_64":  # lim_compat.h pins x86-64 only
        assert newest <= (2, 17), sorted(versions)
    syms = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True,
                          check=True).stdout.split()[2::3]
    assert all(s.startswith(("cu", "nvml")) or s == "dlsym" for s in syms), syms


def test_python_ctypes_is_held_too(ledger_dir):
    # ctypes resolves through dlsym on the library's handle
    code = ("import ctypes\n"
            "c = ctypes.CDLL('libcuda.so.1')\n"
            "ctx = ctypes.c_void_p(); p = ctypes.c_ulonglong()\n"
            "assert c.cuInit(0) == 0 and c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0\n"
            "assert c.cuCtxSetCurrent(ctx) == 0\n"
            "print(c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(100 << 20)),"
            " c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(100 << 20)))\n")
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="128m")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "0 2\n", "")


def test_lookup_through_the_program_handle(ledger_dir):
    """dlsym on dlopen(NULL)'s handle (ctypes.CDLL(None)) finds the limiter's
    own exported functions in the global scope: they must not be taken for
    the driver's (that would recurse forever)."""
    code = ("import ctypes, os\n"
            "ctypes.CDLL('libcuda.so.1', mode=os.RTLD_NOW | os.RTLD_GLOBAL)\n"
            "c = ctypes.CDLL(None)\n"
            "ctx = ctypes.c_void_p(); p = ctypes.c_ulonglong()\n"
            "assert c.cuInit(0) == 0 and c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0\n"
            "assert c.cuCtxSetCurrent(ctx) == 0\n"
            "print(c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(100 << 20)),"
            " c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(100 << 20)))\n")
    env = env_for(ledger_dir, CUDA_DEVICE_MEMORY_LIMIT="128m")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr[-500:]) == (0, "0 2\n", "")


def bench(ledger_dir, secs, **extra):
    env = env_for(ledger_dir, FAKE_CUDA_BUSY=os.path.join(os.path.dirname(ledger_dir), "busy"),
                  FAKE_CUDA_BLOCK_US=10, **extra)
    r = probe("runtime", "ctx:0", f"bench:{secs}:100", env=env, timeout=secs + 30)
    out = lines(r)[1].split()
    assert out[:2] == ["bench", "0"], r.stdout
    return float(out[2])


def test_a_child_forked_beside_launches_can_launch(ledger_dir):
    # the compute share's locks are taken around fork: a child forked while
    # another thread of its parent held one waited for it for ever
    env = env_for(ledger_dir, FAKE_CUDA_BUSY=os.path.join(os.path.dirname(ledger_dir), "busy"),
                  FAKE_CUDA_BLOCK_US=0, CUDA_DEVICE_SM_LIMIT=30)
    # about one fork in 1,500 lands while the other thread holds its bucket
    # (each hang costs the child's 1 s alarm): 10,000 forks caught it every time
    r = probe("linked", "ctx:0", "forklaunch:10000", env=env, timeout=120)
    assert lines(r) == ["ctx 0", "forklaunch 0 hung"]


def test_compute_share_throttles_launches(ledger_dir):
    full = bench(ledger_dir, 3)
    limited = bench(ledger_dir, 4, CUDA_DEVICE_SM_LIMIT=30)
    ratio = limited / full
    print(f"launches/s unlimited {full:.0f}, 30 %: {limited:.0f} ({ratio:.2f})", file=sys.stderr)
    assert 0.20 <= ratio <= 0.40, f"30 % share ran at {ratio:.2f} of unlimited"
    off = bench(ledger_dir, 2, CUDA_DEVICE_SM_LIMIT=100, CUDA_DEVICE_MEMORY_LIMIT="64m")
    assert off / full >= 0.8, f"100 % share ran at {off / full:.2f} of unlimited"


def test_a_stale_first_reading_does_not_let_the_start_run_free(ledger_dir):
    # NVML's figure lags by a sampling period: first read, it is the GPU
    # before the container started (3 %). Taken at its word, 30 % of it
    # asks ten times what was launched, and a GPU-bound start ran
    # unthrottled for about a second on an H100.
    full = bench(ledger_dir, 1)
    first = bench(ledger_dir, 1, CUDA_DEVICE_SM_LIMIT=30, FAKE_NVML_UTIL_LAG=1)
    steady = bench(ledger_dir, 4, CUDA_DEVICE_SM_LIMIT=30, FAKE_NVML_UTIL_LAG=1)
    print(f"30 % share, lagging utilisation: first second {first / full:.2f}, "
          f"four seconds {steady / full:.2f} of unlimited", file=sys.stderr)
    assert first / full <= 0.45, f"the first second ran at {first / full:.2f} of unlimited"
    assert 0.20 <= steady / full <= 0.40, f"30 % share ran at {steady / full:.2f} of unlimited"


def test_throttle_watches_the_containers_gpu(ledger_dir):
    # CUDA device 0 is NVML's GPU 1 (CUDA_VISIBLE_DEVICES in assignment
    # order): its utilisation, not GPU 0's, drives the throttle
    extra = {"CUDA_VISIBLE_DEVICES": "GPU-fa4e0000-0000-4000-8000-000000000001",
             "FAKE_NVML_BUSY_GPU": 1}
    full = bench(ledger_dir, 2, **extra)
    limited = bench(ledger_dir, 3, CUDA_DEVICE_SM_LIMIT=30, **extra)
    assert limited / full <= 0.45, f"30 % share ran at {limited / full:.2f} of unlimited"


def write_util(ledger_dir, permille, stamp_ns):
    """The device plugin's util file (src/limiter/lim_util.h): device 0's own
    utilisation, the rest without a sample; replaced whole, as the plugin does."""
    devs = [(stamp_ns, permille, 0)] + [(0, 0, 0)] * 15
    data = struct.pack("=8sII", b"GSUTIL01", 16, 0) + b"".join(
        struct.pack("=QII", *d) for d in devs)
    tmp = os.path.join(ledger_dir, ".util.test")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(ledger_dir, "util"))


def test_throttle_steers_by_the_containers_own_utilisation(ledger_dir):
    """A busy neighbour adds 40 % to the GPU's utilisation. Steering by the whole GPU,
    a 30 % share is held far below 30 % (it can never bring the GPU under 30 %). With
    the device plugin's util file (here written by the test every 100 ms from the
    stand-in GPU's busy counter: this process's own work, as NVML's per-process
    samples give it) the throttle steers by the container's own part and runs at
    about its share once settled: the median of the samples of the run's second
    half. (Over the whole run it came down from about 0.5 only in its last second
    on a CI machine with both cores busy, under ASan: 0.43 of unlimited.)"""
    import statistics
    import threading
    full = bench(ledger_dir, 2)
    extra = {"FAKE_NVML_EXTRA_BUSY": 40, "CUDA_DEVICE_SM_LIMIT": 30}
    crowded = bench(ledger_dir, 3, **extra) / full
    busy = os.path.join(os.path.dirname(ledger_dir), "busy")
    stop, seen = threading.Event(), []

    def plugin():
        prev_b, prev_t = gpu_busy_s(busy), time.monotonic()
        while not stop.wait(0.1):
            b, t = gpu_busy_s(busy), time.monotonic()
            seen.append(min(1.0, (b - prev_b) / (t - prev_t)))
            write_util(ledger_dir, int(seen[-1] * 1000), time.monotonic_ns())
            prev_b, prev_t = b, t
    th = threading.Thread(target=plugin)
    th.start()
    try:
        own = bench(ledger_dir, 4, **extra) / full
    finally:
        stop.set()
        th.join()
    settled = statistics.median(seen[len(seen) // 2:])
    print(f"30 % share beside a 40 % neighbour: {crowded:.2f} of unlimited by the whole "
          f"GPU, {own:.2f} by its own utilisation ({settled:.2f} busy once settled)",
          file=sys.stderr)
    assert crowded <= 0.15, f"steered by the whole GPU, it ran at {crowded:.2f}"
    assert 0.20 <= settled <= 0.40, f"steered by its own utilisation, it ran {settled:.2f} busy"
    assert own <= 0.60, f"steered by its own utilisation, it ran at {own:.2f} of unlimited"
    # a stale file (the plugin gone) is not used: the whole GPU again
    write_util(ledger_dir, 100, time.monotonic_ns() - 5 * 10**9)
    assert bench(ledger_dir, 3, **extra) / full <= 0.15


def test_throttle_averages_one_process_a_period(ledger_dir):
    """Some drivers name one process per sampling period, with the whole GPU's busy
    time (an H200 named either of two busy processes at 99 %, never both). The
    plugin then writes, every 200 ms, either the GPU's busy percent (this
    container's turn) or 0 (the neighbour's): right on average only. Here the
    test plays that plugin beside a 60 % neighbour, a period going to this
    container with the odds of its part of the busy time. Steered by each
    sample alone, a 0 read as idle raised the rate by half: it ran at 0.35-0.38
    of unlimited here (40 and 49 % on the H200); averaged, 0.28."""
    import random
    import threading
    full = bench(ledger_dir, 2)
    busy = os.path.join(os.path.dirname(ledger_dir), "busy")
    stop, rng = threading.Event(), random.Random(7)

    def plugin():
        prev_b, prev_t = gpu_busy_s(busy), time.monotonic()
        while not stop.wait(0.2):
            b, t = gpu_busy_s(busy), time.monotonic()
            own = min(1.0, (b - prev_b) / (t - prev_t))
            total = min(1.0, own + 0.6)
            mine = rng.random() < own / total
            write_util(ledger_dir, int(total * 1000) if mine else 0, time.monotonic_ns())
            prev_b, prev_t = b, t
    th = threading.Thread(target=plugin)
    th.start()
    try:
        got = bench(ledger_dir, 6, FAKE_NVML_EXTRA_BUSY=60, CUDA_DEVICE_SM_LIMIT=30) / full
    finally:
        stop.set()
        th.join()
    print(f"30 % share beside a 60 % neighbour, one process named a period: {got:.2f} of "
          "unlimited", file=sys.stderr)
    assert 0.20 <= got <= 0.33, f"it ran at {got:.2f} of unlimited"


def gpu_busy_s(path):
    """Seconds of work the stand-in GPU has done: fake_cuda.c's busy counter
    (8 bytes, native-endian nanoseconds), 0 before the first launch."""
    try:
        with open(path, "rb") as f:
            return struct.unpack("=Q", f.read(8))[0] / 1e9
    except (OSError, struct.error):
        return 0.0


def busy_share(op, env):
    """(the stand-in GPU's busy time over the run's wall time, the wall time)."""
    before = gpu_busy_s(env["FAKE_CUDA_BUSY"])
    wall = float(lines(probe("runtime", "ctx:0", op, env=env))[1].split()[2])
    return (gpu_busy_s(env["FAKE_CUDA_BUSY"]) - before) / wall, wall


@pytest.mark.parametrize("op", ["launch:%d:100", "launchex:%d:100", "coop:%d:100", "graph:%d"])
def test_every_launch_kind_is_throttled(op, ledger_dir):
    """What the throttle holds is the GPU's busy share, so that is what is checked,
    not run lengths: a loaded machine stretches the stand-in GPU's kernels (its
    sleeps) and the throttle's waits alike, and `t_lim > 2 x t_full` once failed at
    load 5 because only the unlimited run was stretched. Unlimited, the GPU is busy
    nearly all the run (>= 0.8); at a 25 % share about a third (the first ~200 ms run
    free: no NVML sample yet), and a throttle that lets launches through is near 1.
    One retry with three times the launches (the free start then weighs less)
    before failing."""
    env = env_for(ledger_dir, FAKE_CUDA_BUSY=os.path.join(os.path.dirname(ledger_dir), "busy"),
                  FAKE_CUDA_BLOCK_US=10)
    lim_env = dict(env, CUDA_DEVICE_SM_LIMIT="25")
    seen = []
    for n in (600, 1800):
        full, t_full = busy_share(op % n, env)
        lim, t_lim = busy_share(op % n, lim_env)
        seen.append(f"{n} launches: busy {full:.2f} of {t_full:.2f}s unlimited, "
                    f"{lim:.2f} of {t_lim:.2f}s at 25 %")
        print(f"{op % n}: {seen[-1]}", file=sys.stderr)
        if full >= 0.8 and lim <= 0.5:
            return
    pytest.fail(f"{op.replace('%d', 'N')}: " + "; ".join(seen))
