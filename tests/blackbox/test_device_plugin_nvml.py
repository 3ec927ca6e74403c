"""The NVML backend's own code path, in CI, against a stand-in libnvidia-ml.

tests/gpu/fake_nvml.c is compiled into a shared library here and given to
the plugin with --nvml-lib, so discovery (UUID, name, memory, minor, PCI
bus id, MIG), topology and NVLink counting, XID events and re-probes run
through src/dp/nvml.c exactly as on a GPU node. The real-GPU run is
tests/gpu/run-real-gpu.sh (not in CI).
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT
from test_device_plugin import PluginProc, health
from fake_kubelet import FakeKubelet

G = ["GPU-fa4e0000-0000-4000-8000-00000000000%d" % i for i in range(3)]
MIG = "MIG-fa4e0000-0000-4000-8000-000000000002"


@pytest.fixture(scope="module")
def fake_nvml():
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to build the stand-in libnvidia-ml")
    d = tempfile.mkdtemp(prefix="fakenvml")
    lib = os.path.join(d, "libnvidia-ml.so.1")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", lib,
                    os.path.join(ROOT, "tests", "gpu", "fake_nvml.c")], check=True)
    yield lib
    shutil.rmtree(d)


@pytest.fixture
def env(fake_nvml):
    kdir = tempfile.mkdtemp(prefix="dpn", dir="/tmp")
    k = FakeKubelet(kdir).start()
    yield kdir, k
    k.stop()
    shutil.rmtree(kdir, ignore_errors=True)


def start(bin_, kdir, lib, *extra, files=()):
    """The plugin on the stand-in NVML; `files`: control files there from its start."""
    ctl = tempfile.mkdtemp(prefix="dpctl", dir="/tmp")
    for f in files:  # a name, or (name, text)
        name, text = f if isinstance(f, tuple) else (f, "")
        with open(os.path.join(ctl, name), "w") as fp:
            fp.write(text)
    os.environ["FAKE_NVML_XID"] = os.path.join(ctl, "xid")
    os.environ["FAKE_NVML_LOST"] = os.path.join(ctl, "lost")
    os.environ["FAKE_NVML_WAIT_FAIL"] = os.path.join(ctl, "waitfail")
    os.environ["FAKE_NVML_CREATE_FAIL"] = os.path.join(ctl, "createfail")
    os.environ["FAKE_NVML_HANG"] = os.path.join(ctl, "hang")
    os.environ["FAKE_NVML_MIG_FAIL"] = os.path.join(ctl, "migfail")
    os.environ["FAKE_NVML_MIG_LIST"] = os.path.join(ctl, "miglist")
    return PluginProc(bin_, kdir, None, "--nvml-lib", lib, *extra), ctl


def put(path, text):
    """Writes a control file in one step: the library may read it any time."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def test_nvml_discovery_topology_and_allocate(gpusched_bin, env, fake_nvml):
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml)
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        devs = p.wait(lambda d: len(d) == 2)
        assert sorted(d.ID for d in devs) == G[:2]
        m = k.wait_plugin("nvidia.com/mig-1g.10gb")
        assert [d.ID for d in m.wait(lambda d: len(d) == 1)] == [MIG]
        inv = pl.get("/inventory").json()["gpus"]
        assert [g["uuid"] for g in inv] == G
        assert inv[0]["model"] == "NVIDIA H100 80GB HBM3" and inv[0]["memory_mib"] == 81559
        assert inv[0]["pci_bus_id"] == "00000000:19:00.0"
        assert inv[1]["links"][0] == {"gpu": 0, "type": "nvlink", "nvlinks": 4}
        assert inv[0]["links"][1] == {"gpu": 2, "type": "sys"}
        assert inv[2]["mig_enabled"] is True
        # the second MIG device, a 1-slice compute instance of a 2-slice GPU instance
        # ("1c.2g.20gb"), is left out as NVIDIA's plugin leaves it out, and said so
        assert inv[2]["mig"] == [{"uuid": MIG, "profile": "1g.10gb", "memory_mib": 9856}]
        assert sorted(k.plugins) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"], k.plugins
        assert "1 MIG devices not advertised" in pl.output()
        r = p.allocate([G[1]])
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == G[1]
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


@pytest.mark.parametrize("fault,said", [
    ("count", "MIG devices not listed: NVML MIG device count failed"),
    ("uuid", "MIG devices not listed: NVML MIG device 0: UUID"),
    ("empty", "is in MIG mode and has no MIG devices: nothing of it is offered"),
])
def test_a_mig_gpu_that_offers_nothing_says_why(gpusched_bin, env, fake_nvml, fault, said):
    # GPU 2 is in MIG mode; what stops its MIG devices from being offered is
    # in the log, not silence (it is never offered whole either)
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, files=[("miglist", fault)])
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        assert sorted(d.ID for d in p.wait(lambda d: len(d) == 2)) == G[:2]
        inv = pl.get("/inventory").json()["gpus"][2]
        assert inv["mig_enabled"] is True and inv["mig"] == []
        assert sorted(k.plugins) == ["nvidia.com/gpu"], k.plugins
        deadline = time.time() + 5
        while f"GPU {G[2]}" not in pl.output() or said not in pl.output():
            assert time.time() < deadline, pl.output()
            time.sleep(0.1)
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def test_a_gpu_whose_mig_mode_is_unknown_is_not_handed_out_whole(gpusched_bin, env,
                                                                  fake_nvml):
    # GPU 2 is in MIG mode; its query fails: it may not go out as a whole GPU
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, files=["migfail"])
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        devs = p.wait(lambda d: len(d) == 3)
        assert health(devs)[G[2]] == "Unhealthy"
        gpu = pl.get("/inventory").json()["gpus"][2]
        assert gpu["healthy"] is False
        assert "MIG mode query failed" in gpu["reason"]
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def test_nvml_xid_event_and_reprobe(gpusched_bin, env, fake_nvml):
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--reprobe-transient", "1")
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        p.wait(lambda d: len(d) == 2)
        # An ignored application XID, then a transient one on a GPU that is lost.
        put(os.path.join(ctl, "xid"), "0 43\n")
        wait_gone = time.monotonic() + 5
        while os.path.exists(os.path.join(ctl, "xid")):  # the library took it
            assert time.monotonic() < wait_gone
            time.sleep(0.05)
        time.sleep(0.3)
        assert all(h == "Healthy" for h in health(p.devices()).values())
        # a double-bit ECC event is not watched: the error's own XID decides
        # (94, contained, is transient; the event would have made it fatal)
        put(os.path.join(ctl, "xid"), "0 dbe\n")
        while os.path.exists(os.path.join(ctl, "xid")):
            assert time.monotonic() < wait_gone + 5
            time.sleep(0.05)
        time.sleep(0.3)
        assert all(h == "Healthy" for h in health(p.devices()).values())
        open(os.path.join(ctl, "lost"), "w").close()
        put(os.path.join(ctl, "xid"), "1 94\n")
        t0 = time.monotonic()
        p.wait(lambda d: health(d)[G[1]] == "Unhealthy", timeout=2)
        assert time.monotonic() - t0 < 1.0
        time.sleep(1.5)
        assert health(p.devices())[G[1]] == "Unhealthy"
        assert "GPU is lost" in pl.get("/inventory").json()["gpus"][1]["reason"]
        os.unlink(os.path.join(ctl, "lost"))  # the GPU answers again
        p.wait(lambda d: health(d)[G[1]] == "Healthy", timeout=4)
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def test_nvml_xid_on_a_mig_instance_marks_that_instance(gpusched_bin, env, fake_nvml):
    """NVML names a MIG instance's event by its GPU's handle and the instance's GPU and
    compute instance ids: that instance turns Unhealthy, its GPU and the other
    resources stay Healthy, and a transient XID is re-probed away. An event whose ids
    name no advertised instance (here the left-out 1c.2g one) marks the whole GPU."""
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--reprobe-transient", "1")
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        m = k.wait_plugin("nvidia.com/mig-1g.10gb")
        p.wait(lambda d: len(d) == 2)
        m.wait(lambda d: len(d) == 1)
        put(os.path.join(ctl, "xid"), "2 94 7 0\n")
        m.wait(lambda d: health(d)[MIG] == "Unhealthy", timeout=2)
        inv = pl.get("/inventory").json()["gpus"][2]
        assert inv["healthy"] is True, inv
        assert inv["mig"][0]["healthy"] is False and inv["mig"][0]["reason"] == \
            "XID 94 (transient)", inv
        assert all(h == "Healthy" for h in health(p.devices()).values())
        metrics = pl.get("/metrics").text
        assert f'gpusched_dp_mig_healthy{{uuid="{MIG}",gpu_uuid="{G[2]}",' \
               f'profile="1g.10gb",reason="XID 94 (transient)"}} 0' in metrics, metrics
        assert f"health event on {G[2]} (MIG instance gi 7 ci 0): XID 94" in pl.output()
        m.wait(lambda d: health(d)[MIG] == "Healthy", timeout=4)
        assert "healthy" not in pl.get("/inventory").json()["gpus"][2]["mig"][0]
        put(os.path.join(ctl, "xid"), "2 94 9 0\n")
        m.wait(lambda d: health(d)[MIG] == "Unhealthy", timeout=2)
        inv = pl.get("/inventory").json()["gpus"][2]
        assert inv["healthy"] is False and "healthy" not in inv["mig"][0], inv
        m.wait(lambda d: health(d)[MIG] == "Healthy", timeout=4)
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def test_a_lost_gpu_is_the_only_one_taken_out(gpusched_bin, env, fake_nvml):
    """Once a GPU is lost (XID 79), NVML's wait fails on every call of an event set
    that holds it. The GPUs that still answer a probe stay in service, the set is
    built again without the lost one, and the others' XIDs are seen again. Before,
    every GPU was marked, and each failed wait pushed their re-probe out: all
    stayed out until the plugin restarted."""
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--reprobe-transient", "1")
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        p.wait(lambda d: len(d) == 2)
        open(os.path.join(ctl, "waitfail"), "w").close()
        time.sleep(2.5)  # failed waits, every GPU answering: nothing changes
        assert set(health(p.devices()).values()) == {"Healthy"}
        os.unlink(os.path.join(ctl, "waitfail"))
        open(os.path.join(ctl, "lost"), "w").close()
        p.wait(lambda d: health(d) == {G[0]: "Healthy", G[1]: "Unhealthy"}, timeout=4)
        assert "XID 999" in pl.get("/inventory").json()["gpus"][1]["reason"]
        time.sleep(6)  # the set is built again without GPU 1 (every 5 s at most)
        assert health(p.devices()) == {G[0]: "Healthy", G[1]: "Unhealthy"}
        put(os.path.join(ctl, "xid"), "0 48\n")  # GPU 0's XIDs are seen again
        p.wait(lambda d: health(d)[G[0]] == "Unhealthy", timeout=3)
        assert pl.output().count("health event on all GPUs") <= 3  # no log flood
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def xid_seen(p, ctl, gpu, timeout=9.0):
    """Writes an XID 48 for `gpu` (again whenever a wait took it unseen) until the
    plugin marks it: the event set watches that GPU."""
    end = time.monotonic() + timeout
    xid = os.path.join(ctl, "xid")
    while health(p.devices())[G[gpu]] != "Unhealthy":
        assert time.monotonic() < end, "XID on GPU %d not seen in %.0fs" % (gpu, timeout)
        if not os.path.exists(xid):
            put(xid, "%d 48\n" % gpu)
        time.sleep(0.3)


def test_the_event_set_and_a_gpu_back_are_watched_again(gpusched_bin, env, fake_nvml):
    """An event set that could not be built again is tried again (before, no set
    was ever built after one failure: no XID seen until a restart); a GPU left out
    of the set while lost is registered again once it answers (before, it stayed
    unwatched)."""
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--reprobe-transient", "1")
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        p.wait(lambda d: len(d) == 2)
        open(os.path.join(ctl, "createfail"), "w").close()
        open(os.path.join(ctl, "waitfail"), "w").close()
        end = time.monotonic() + 9
        while "no NVML event set" not in pl.output():
            assert time.monotonic() < end, pl.output()[-2000:]
            time.sleep(0.2)
        os.unlink(os.path.join(ctl, "createfail"))
        os.unlink(os.path.join(ctl, "waitfail"))
        xid_seen(p, ctl, 0)
        open(os.path.join(ctl, "lost"), "w").close()
        p.wait(lambda d: health(d)[G[1]] == "Unhealthy", timeout=4)
        time.sleep(6)  # the set is built again without GPU 1
        os.unlink(os.path.join(ctl, "lost"))
        p.wait(lambda d: health(d)[G[1]] == "Healthy", timeout=5)  # it answers probes
        xid_seen(p, ctl, 1)
        assert "XID 48" in pl.get("/inventory").json()["gpus"][1]["reason"]
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def test_a_reprobe_that_hangs_holds_up_no_allocate(gpusched_bin, env, fake_nvml):
    """The re-probe of a GPU after a transient XID runs without the plugin's lock:
    a GPU whose queries hang keeps its own health waiting, not the Allocates and
    the inventory of the others (before, both waited for the probe)."""
    kdir, k = env
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--reprobe-transient", "1")
    try:
        p = k.wait_plugin("nvidia.com/gpu")
        p.wait(lambda d: len(d) == 2)
        open(os.path.join(ctl, "hang"), "w").close()
        put(os.path.join(ctl, "xid"), "1 94\n")  # contained ECC: transient
        p.wait(lambda d: health(d)[G[1]] == "Unhealthy", timeout=3)
        time.sleep(2)  # its re-probe is under way, and hangs
        t0 = time.monotonic()
        assert p.allocate([G[0]]).envs["NVIDIA_VISIBLE_DEVICES"] == G[0]
        assert pl.get("/inventory").status_code == 200
        assert time.monotonic() - t0 < 1.5
        os.unlink(os.path.join(ctl, "hang"))
        p.wait(lambda d: health(d)[G[1]] == "Healthy", timeout=5)
    finally:
        code = pl.stop()
        shutil.rmtree(ctl)
    assert code == 0


def read_util(path):
    """(stamp_ns, permille) of each device of a util file (src/limiter/lim_util.h)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    magic, n, _ = struct.unpack_from("=8sII", data)
    assert (magic, n, len(data)) == (b"GSUTIL01", 16, 16 + 16 * 16)
    return [struct.unpack_from("=QII", data, 16 + 16 * i)[:2] for i in range(16)]


def limited_proc(cdir, owner, op, **env):
    """A container's ledger directory with its owner file, and a limited process in
    it (lim_probe: a context on device 0, then op, then waiting for stdin)."""
    from test_limiter import TDIR, env_for
    import subprocess as sp
    os.makedirs(cdir)
    os.chmod(cdir, 0o1777)
    put(os.path.join(cdir, "owner"), owner)
    p = sp.Popen([os.path.join(TDIR, "lim_probe"), "runtime", "ctx:0", op, "ready"],
                 env=env_for(cdir, **env), stdin=sp.PIPE, stdout=sp.PIPE, text=True)
    assert p.stdout.readline() == "ctx 0\n"
    return p


def test_container_utilisation_reaches_its_limiter(gpusched_bin, env, fake_nvml):
    """NVML's per-process samples, each process found by its pid namespace and pid in a
    container's ledger, become that container's util file (the compute throttle's
    input, src/limiter/lim_util.h) by its CUDA device order: a process of the
    container that holds GPU 1 then GPU 0 is sampled at 45 % on GPU 0, so device 1 of
    the container reads 450; GPU 1 has no sample and stays without one; a sample of a
    process of no container counts for none. A container with a compute share alone
    (no memory limit) gets its util file and its utilisation rows too, and no memory
    rows."""
    kdir, k = env
    lim = tempfile.mkdtemp(prefix="dplimu", dir="/tmp")
    procs = os.path.join(lim, "procs")
    os.environ["FAKE_NVML_PROCS"] = procs
    pl, ctl = start(gpusched_bin, kdir, fake_nvml, "--limiter-dir", lim)
    cdir = os.path.join(lim, "containers", "uid1_main")
    sdir = os.path.join(lim, "containers", "uid1_side")
    proc = side = None
    try:
        k.wait_plugin("nvidia.com/gpu")
        proc = limited_proc(cdir, f"default/p/main\n2\n{G[1]},{G[0]}\n", "alloc:10",
                            CUDA_DEVICE_MEMORY_LIMIT="256m")
        assert proc.stdout.readline() == "alloc 0\n"
        side = limited_proc(sdir, f"default/p/side\n1\n{G[0]}\n", "launch:1:1",
                            GPUSCHED_GPU_MILLI="300")
        assert side.stdout.readline().startswith("launch 0 ")
        for p in (proc, side):
            assert p.stdout.readline() == "ready\n"
        util, sutil = os.path.join(cdir, "util"), os.path.join(sdir, "util")
        put(procs, f"0 {proc.pid} 45\n0 1 30\n0 {side.pid} 20\n")
        deadline = time.time() + 10
        while time.time() < deadline and not (
                os.path.exists(util) and read_util(util)[1][1] == 450 and
                os.path.exists(sutil) and read_util(sutil)[0][1] == 200):
            time.sleep(0.1)
        u = read_util(util)
        assert u[1][1] == 450 and u[1][0] > 0, (u[:2], pl.output()[-1500:])
        assert read_util(sutil)[0][1] == 200, (read_util(sutil)[:1], pl.output()[-1500:])
        assert u[0] == (0, 0)  # GPU 1: no sample
        assert abs(u[1][0] - time.monotonic_ns()) < 5 * 10**9  # the limiter's clock
        text = pl.get("/metrics").text
        lbl = '{container="default/p/main",device="%d"}'
        assert f"gpusched_dp_container_gpu_utilization{lbl % 1} 0.450\n" in text, text
        assert f"gpusched_dp_container_gpu_utilization{lbl % 0}" not in text
        slbl = '{container="default/p/side",device="0"}'
        assert f"gpusched_dp_container_gpu_utilization{slbl} 0.200\n" in text, text
        assert "gpusched_dp_container_gpu_memory_limit_bytes{container=\"default/p/side\"" \
            not in text
        put(procs, "0 1 30\n")  # only a process of no container
        deadline = time.time() + 10
        while time.time() < deadline and read_util(util)[1][1] != 0:
            time.sleep(0.1)
        assert read_util(util)[1][1] == 0
    finally:
        for p in (proc, side):
            if p:
                p.kill()
                p.wait()
        pl.stop()
        del os.environ["FAKE_NVML_PROCS"]
        shutil.rmtree(ctl, ignore_errors=True)
        shutil.rmtree(lim, ignore_errors=True)
