"""gpusched device-plugin against the fake kubelet, fake GPUs, no API server.

Covers registration, ListAndWatch, GetPreferredAllocation, Allocate, health
changes from injected XIDs, kubelet restarts, bad input and shutdown.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import grpc
import pytest
import requests

from conftest import ROOT, free_port, run
from fake_kubelet import FakeKubelet, stubs

GPU = ["GPU-00000000-0000-4000-8000-00000000000%d" % i for i in range(4)]
FAKE = os.path.join(ROOT, "tests", "data", "fake-gpus.json")


class PluginProc:
    def __init__(self, bin_, kdir, gpus_file, *extra, port=None, no_api=True):
        self.port = port or free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="dp-log-", delete=False)
        args = [bin_, "device-plugin", "--kubelet-dir", kdir,
                "--metrics-listen", "127.0.0.1:%d" % self.port, "--node-name", "node-a"]
        if no_api:
            args.append("--no-api")
        if gpus_file:
            args += ["--fake-gpus", gpus_file]
        self.proc = subprocess.Popen(args + list(extra), stdout=self.log, stderr=subprocess.STDOUT)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def get(self, path):
        end = time.monotonic() + 5
        while True:
            try:
                return requests.get(self.url(path), timeout=2)
            except requests.ConnectionError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM; returns the exit status (0 for a clean stop, which under
        ASan also means no leak)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode != 0:  # what the process said at exit (ASan, say)
            print(self.output()[-6000:])
        os.unlink(self.log.name)
        return self.proc.returncode


@pytest.fixture
def kdir():
    d = tempfile.mkdtemp(prefix="dp", dir="/tmp")  # short: unix socket paths are <= 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def gpus_file(kdir):
    """A private copy of the fake-GPU file that a test may edit while the plugin runs."""
    path = os.path.join(tempfile.mkdtemp(prefix="dpg", dir="/tmp"), "gpus.json")
    shutil.copy(FAKE, path)
    yield path
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.fixture
def kubelet(kdir):
    k = FakeKubelet(kdir).start()
    yield k
    k.stop()


@pytest.fixture
def plugin_factory(gpusched_bin, kdir):
    procs = []

    def make(gpus, *extra):
        p = PluginProc(gpusched_bin, kdir, gpus, *extra)
        procs.append(p)
        return p
    yield make
    codes = []
    for p in procs:
        out = p.output()
        codes.append(p.stop())
        print(out[-3000:])
    assert all(c == 0 for c in codes), "plugin exit status %s" % codes


def edit(path, fn):
    """Rewrites the fake-GPU file through fn(dict) (atomically, new mtime)."""
    with open(path) as f:
        doc = json.load(f)
    fn(doc)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def health(devs):
    return {d.ID: d.health for d in devs}


# --- registration and the device list -------------------------------------

def test_registers_and_lists_every_gpu(kubelet, plugin_factory, gpus_file):
    plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    assert p.endpoint == "gpusched-gpu.sock"
    assert p.options.get_preferred_allocation_available
    assert not p.options.pre_start_required  # no API server: nothing to check
    assert p.register_options.get_preferred_allocation_available
    devs = p.wait(lambda d: len(d) == 4)
    assert sorted(d.ID for d in devs) == GPU
    assert all(d.health == "Healthy" for d in devs)
    numa = {d.ID: [n.ID for n in d.topology.nodes] for d in devs}
    assert numa == {GPU[0]: [0], GPU[1]: [0], GPU[2]: [1], GPU[3]: [1]}


def test_stale_socket_path_and_gpus_without_numa(kubelet, plugin_factory, gpus_file, kdir):
    """A regular file left where the plugin's socket goes is replaced (kubelet only
    deletes sockets); a GPU whose NUMA node is unknown (-1) has no topology in the list,
    as NVIDIA's plugin reports it, rather than a NUMA node 0 or -1."""
    with open(os.path.join(kdir, "gpusched-gpu.sock"), "w") as f:
        f.write("left by a crash\n")
    edit(gpus_file, lambda d: d["gpus"][2].update(numa_node=-1))
    plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    devs = {d.ID: d for d in p.wait(lambda d: len(d) == 4)}
    assert not devs[GPU[2]].HasField("topology")
    assert [n.ID for n in devs[GPU[3]].topology.nodes] == [1]


def test_inventory_and_metrics(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file)
    kubelet.wait_plugin("nvidia.com/gpu")
    inv = pl.get("/inventory").json()
    assert inv["version"] == 1 and len(inv["gpus"]) == 4
    g0 = inv["gpus"][0]
    assert g0["uuid"] == GPU[0] and g0["model"] == "NVIDIA H100 80GB HBM3"
    assert g0["memory_mib"] == 81559 and g0["numa_node"] == 0 and g0["healthy"] is True
    links = {l["gpu"]: l for l in g0["links"]}
    assert links[1] == {"gpu": 1, "type": "nvlink", "nvlinks": 18}
    assert links[2]["type"] == "pix" and links[3]["type"] == "sys"
    m = pl.get("/metrics").text
    assert 'gpusched_dp_gpu_healthy{uuid="%s",index="0"' % GPU[0] in m
    assert 'gpusched_dp_devices{resource="nvidia.com/gpu"} 4' in m
    assert pl.get("/healthz").text == "ok\n"
    # every series it serves is documented
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                           "metrics.md")) as f:
        doc = f.read()
    served = {l.split()[2] for l in m.splitlines() if l.startswith("# TYPE ")}
    assert served and not {n for n in served if "`%s" % n not in doc}, served


# --- admission ----------------------------------------------------------------

def test_allocate_returns_the_chosen_gpus(kubelet, plugin_factory, gpus_file):
    plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    r = p.allocate([GPU[3], GPU[1]])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "%s,%s" % (GPU[3], GPU[1])
    assert r.envs["CUDA_VISIBLE_DEVICES"] == r.envs["NVIDIA_VISIBLE_DEVICES"]
    assert r.annotations["gpusched.io/gpu-uuids"] == r.envs["NVIDIA_VISIBLE_DEVICES"]
    assert "GPUSCHED_GPU_MEMORY_MIB" not in r.envs  # whole GPUs carry no limits
    assert p.prestart([GPU[3], GPU[1]]) is not None


def test_device_specs_for_device_nodes_that_exist(kubelet, plugin_factory, gpus_file):
    dev = tempfile.mkdtemp(prefix="dpdev", dir="/tmp")
    try:
        for n in ("nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia2"):
            open(os.path.join(dev, n), "w").close()
        plugin_factory(gpus_file, "--dev-dir", dev)
        p = kubelet.wait_plugin("nvidia.com/gpu")
        r = p.allocate([GPU[2]])
        specs = {d.container_path: (d.host_path, d.permissions) for d in r.devices}
        # Present under --dev-dir (the host's /dev as the plugin sees it),
        # named by their host paths; nvidia-uvm-tools is absent, so left out.
        assert specs == {"/dev/nvidiactl": ("/dev/nvidiactl", "rw"),
                         "/dev/nvidia-uvm": ("/dev/nvidia-uvm", "rw"),
                         "/dev/nvidia-modeset": ("/dev/nvidia-modeset", "rw"),
                         "/dev/nvidia2": ("/dev/nvidia2", "rw")}
    finally:
        shutil.rmtree(dev)


def test_device_list_strategies(kubelet, plugin_factory, gpus_file, gpusched_bin):
    """--device-list-strategy (NVIDIA's DEVICE_LIST_STRATEGY): volume-mounts for a
    toolkit that ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers, CDI names
    in an annotation and in CDIDevices for CDI-enabled runtimes, --cdi-kind."""
    plugin_factory(gpus_file, "--device-list-strategy", "volume-mounts,cdi-annotations,cdi-cri",
                   "--cdi-kind", "example.com/gpu")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    r = p.allocate([GPU[3], GPU[1]])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert r.envs["CUDA_VISIBLE_DEVICES"] == "%s,%s" % (GPU[3], GPU[1])
    assert [(m.host_path, m.container_path, m.read_only) for m in r.mounts] == [
        ("/dev/null", "/var/run/nvidia-container-devices/" + g, True) for g in (GPU[3], GPU[1])]
    names = ["example.com/gpu=" + g for g in (GPU[3], GPU[1])]
    assert [d.name for d in r.cdi_devices] == names
    assert r.annotations["cdi.k8s.io/gpusched_" + GPU[3]] == ",".join(names)
    for flag, value, why in (("--device-list-strategy", "envvar,cdi", '"cdi": not a device list'),
                             ("--cdi-kind", "nvidia.com", '"nvidia.com": not a CDI kind')):
        bad = subprocess.run([gpusched_bin, "device-plugin", flag, value], capture_output=True,
                             text=True, timeout=10)
        assert bad.returncode == 2 and flag + ": " + why in bad.stderr, bad.stderr


def test_mig_instances_get_their_capability_device_nodes(kubelet, plugin_factory, gpus_file):
    """Without the NVIDIA container runtime a MIG instance needs its GPU and
    compute instance's /dev/nvidia-caps nodes; the driver lists their minors
    under /proc/driver/nvidia/capabilities (here a copy of that layout)."""
    mig = ["MIG-22222222-0000-4000-8000-00000000000%d" % i for i in range(2)]
    edit(gpus_file, lambda d: d["gpus"][3].update(mig=[
        {"uuid": mig[0], "profile": "3g.40gb", "memory_mib": 40192, "gi": 1, "ci": 0},
        {"uuid": mig[1], "profile": "3g.40gb", "memory_mib": 40192, "gi": 2, "ci": 0}]))
    dev = tempfile.mkdtemp(prefix="dpdev", dir="/tmp")
    caps = tempfile.mkdtemp(prefix="dpcaps", dir="/tmp")
    try:
        os.mkdir(os.path.join(dev, "nvidia-caps"))
        for n in ("nvidiactl", "nvidia3", "nvidia-caps/nvidia-cap21", "nvidia-caps/nvidia-cap22",
                  "nvidia-caps/nvidia-cap12"):
            open(os.path.join(dev, n), "w").close()
        for path, minor in (("gpu3/mig/gi2", 21), ("gpu3/mig/gi2/ci0", 22), ("gpu3/mig/gi1", 12)):
            os.makedirs(os.path.join(caps, path), exist_ok=True)
            with open(os.path.join(caps, path, "access"), "w") as f:
                f.write("DeviceFileMinor: %d\nDeviceFileMode: 292\nDeviceFileModify: 1\n" % minor)
        plugin_factory(gpus_file, "--dev-dir", dev, "--nvidia-caps-dir", caps)
        m = kubelet.wait_plugin("nvidia.com/mig-3g.40gb")
        m.wait(lambda d: len(d) == 2)
        r = m.allocate([mig[1]])
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == mig[1]
        assert sorted(d.host_path for d in r.devices) == [
            "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22", "/dev/nvidia3",
            "/dev/nvidiactl"]
        # gi1's compute instance is not listed by the driver: only its GPU instance node
        r = m.allocate([mig[0]])
        assert sorted(d.host_path for d in r.devices) == [
            "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia3", "/dev/nvidiactl"]
    finally:
        shutil.rmtree(dev)
        shutil.rmtree(caps)


def test_preferred_allocation_follows_topology(kubelet, plugin_factory, gpus_file):
    plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    # GPUs 0-1 and 2-3 are NVLink pairs; 0-2 share a PCIe switch; 1-3 cross NUMA.
    chosen, r = p.admit(GPU, 2)
    assert sorted(chosen) == [GPU[0], GPU[1]]
    chosen, _ = p.admit(GPU, 2, must=[GPU[3]])
    assert sorted(chosen) == [GPU[2], GPU[3]]
    chosen, _ = p.admit([GPU[0], GPU[2], GPU[3]], 2, must=[GPU[0]])
    assert sorted(chosen) == [GPU[0], GPU[2]]  # one switch beats crossing NUMA
    chosen, _ = p.admit(GPU, 4)
    assert sorted(chosen) == GPU


def test_bad_requests_get_clear_errors_and_the_plugin_keeps_serving(kubelet, plugin_factory,
                                                                     gpus_file):
    plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    s = stubs()
    with pytest.raises(grpc.RpcError) as ei:
        p.allocate(["GPU-nope"])
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device 'GPU-nope'" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        p.stub.Allocate(s.pb.AllocateRequest(), timeout=5)
    assert "container_requests" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        p.stub.GetPreferredAllocation(s.pb.PreferredAllocationRequest(
            container_requests=[s.pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=[GPU[0]], allocation_size=3)]), timeout=5)
    assert "allocation_size" in ei.value.details()
    # a device kubelet still lists that the plugin no longer serves: no
    # preference (kubelet chooses), not an error, which fails the pod's admission
    r = p.stub.GetPreferredAllocation(s.pb.PreferredAllocationRequest(
        container_requests=[s.pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=[GPU[0], "GPU-gone"], allocation_size=1)]), timeout=5)
    assert len(r.container_responses) == 1 and list(r.container_responses[0].deviceIDs) == []
    # Bytes that are no protobuf, and a message over the 4 MiB limit.
    raw = p.channel.unary_unary("/v1beta1.DevicePlugin/Allocate",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as ei:
        raw(b"\xff\xff\xff\xff\x0f\x00garbage", timeout=5)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot parse AllocateRequest" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        raw(b"\x0a" + b"\x80" * 10 + b"x" * (5 << 20), timeout=10)
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    unknown = p.channel.unary_unary("/v1beta1.DevicePlugin/Frobnicate",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as ei:
        unknown(b"", timeout=5)
    assert ei.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # Still serving, answers still right.
    assert p.allocate([GPU[0]]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[0]


def test_kubelet_hanging_up_mid_stream_does_not_hurt(kubelet, plugin_factory, gpus_file, kdir):
    pl = plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    s = stubs()
    for _ in range(5):
        ch = grpc.insecure_channel("unix:" + os.path.join(kdir, p.endpoint))
        it = s.grpc.DevicePluginStub(ch).ListAndWatch(s.pb.Empty())
        assert len(next(it).devices) == 4
        ch.close()  # hang up with the stream open
    edit(gpus_file, lambda d: d["gpus"][0].update(xids=[94]))
    p.wait(lambda d: health(d)[GPU[0]] == "Unhealthy")
    assert p.allocate([GPU[1]]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    assert pl.proc.poll() is None
    # The abandoned streams are gone; kubelet's own is the one left.
    end = time.monotonic() + 5
    while 'gpusched_dp_streams{resource="nvidia.com/gpu"} 1\n' not in pl.get("/metrics").text:
        assert time.monotonic() < end, pl.get("/metrics").text
        time.sleep(0.1)


def test_a_stream_kubelet_ends_is_followed_by_a_new_registration(kubelet, plugin_factory,
                                                                     gpus_file):
    """kubelet ends its ListAndWatch stream only when it drops the plugin (devices
    unhealthy, never dialled again; on 1.25+ also when a replaced stream's end takes
    the new registration with it, kubernetes#121994). A registered plugin left with
    no stream registers again after 10 s, and the new stream lists its GPUs."""
    pl = plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    t = time.monotonic()
    p.close()  # kubelet drops the plugin, socket and kubelet.sock untouched
    again = kubelet.wait_plugin("nvidia.com/gpu", timeout=20, after=t)
    took = time.monotonic() - t
    assert 9 < took < 16, took
    assert len(again.wait(lambda d: len(d) == 4)) == 4
    assert "registering again" in pl.output()
    assert sum(r == "nvidia.com/gpu" for _, r, _ in kubelet.registrations) == 2
    time.sleep(11)  # with its stream held, it stays registered once
    assert sum(r == "nvidia.com/gpu" for _, r, _ in kubelet.registrations) == 2


# --- health -----------------------------------------------------------------------

def test_fatal_xid_turns_gpu_unhealthy_within_a_second(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    t0 = time.monotonic()
    edit(gpus_file, lambda d: d["gpus"][1].update(xids=[48]))
    devs = p.wait(lambda d: health(d)[GPU[1]] == "Unhealthy", timeout=3)
    assert time.monotonic() - t0 < 1.0
    assert [i for i, h in health(devs).items() if h != "Healthy"] == [GPU[1]]
    inv = pl.get("/inventory").json()
    assert inv["gpus"][1]["healthy"] is False
    assert inv["gpus"][1]["reason"] == "XID 48 (fatal)"
    m = pl.get("/metrics").text
    assert 'uuid="%s",index="1",model="NVIDIA H100 80GB HBM3",reason="XID 48 (fatal)"} 0' % GPU[1] in m
    assert 'gpusched_dp_gpu_xid_events_total{uuid="%s"} 1' % GPU[1] in m


def test_application_xids_are_ignored(kubelet, plugin_factory, gpus_file):
    plugin_factory(gpus_file, "--ignore-xids", "94")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    n = len(p.lists)
    edit(gpus_file, lambda d: d["gpus"][0].update(xids=[13, 43, 94]))  # 94 ignored by flag
    edit(gpus_file, lambda d: d["gpus"][3].update(xids=[79]))           # a marker that counts
    devs = p.wait(lambda d: health(d)[GPU[3]] == "Unhealthy")
    assert health(devs)[GPU[0]] == "Healthy"
    assert all(health(d)[GPU[0]] == "Healthy" for _, d in p.lists[n:])


def test_health_xids_count_ignored_ones(kubelet, plugin_factory, gpus_file, gpusched_bin):
    """--health-xids (NVIDIA's DP_ENABLE_HEALTHCHECKS): an application XID an operator
    wants counted turns the GPU Unhealthy; the other default-ignored ones still do not."""
    plugin_factory(gpus_file, "--health-xids", "43")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    edit(gpus_file, lambda d: d["gpus"][0].update(xids=[13]))
    edit(gpus_file, lambda d: d["gpus"][1].update(xids=[43]))
    devs = p.wait(lambda d: health(d)[GPU[1]] == "Unhealthy")
    assert health(devs)[GPU[0]] == "Healthy"
    r = subprocess.run([gpusched_bin, "device-plugin", "--ignore-xids", "all", "--health-xids",
                        "43"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "health checks are off" in r.stderr, r.stderr


def test_transient_xid_recovers_after_a_passing_reprobe(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file, "--reprobe-transient", "1")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    edit(gpus_file, lambda d: (d["gpus"][2].update(xids=[94]), d["gpus"][3].update(xids=[79])))
    p.wait(lambda d: health(d)[GPU[2]] == "Unhealthy", timeout=2)
    assert pl.get("/inventory").json()["gpus"][2]["reason"] == "XID 94 (transient)"
    p.wait(lambda d: health(d)[GPU[2]] == "Healthy", timeout=4)
    assert pl.get("/inventory").json()["gpus"][2]["reason"] == ""
    # a fatal XID is not re-probed (no --reprobe-fatal): the GPU would pass
    time.sleep(1.5)
    assert health(p.devices())[GPU[3]] == "Unhealthy"
    assert pl.get("/inventory").json()["gpus"][3]["reason"] == "XID 79 (fatal)"


def test_gpu_failing_its_reprobe_stays_unhealthy(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file, "--reprobe-transient", "1")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    edit(gpus_file, lambda d: d["gpus"][0].update(xids=[94], probe_fails=True))
    p.wait(lambda d: health(d)[GPU[0]] == "Unhealthy", timeout=2)
    time.sleep(2.5)
    assert health(p.devices())[GPU[0]] == "Unhealthy"
    assert "re-probe failed after XID 94" in pl.get("/inventory").json()["gpus"][0]["reason"]
    edit(gpus_file, lambda d: d["gpus"][0].update(probe_fails=False))
    p.wait(lambda d: health(d)[GPU[0]] == "Healthy", timeout=4)


def test_vanished_gpu(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file, "--reprobe-transient", "1", "--reprobe-fatal", "1")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    edit(gpus_file, lambda d: d["gpus"][3].update(lost=True))
    p.wait(lambda d: health(d)[GPU[3]] == "Unhealthy", timeout=2)
    time.sleep(1.5)
    assert health(p.devices())[GPU[3]] == "Unhealthy"  # a lost GPU fails its re-probe
    assert "GPU is lost" in pl.get("/inventory").json()["gpus"][3]["reason"]
    # Gone from the file altogether: the list shrinks, the stream stays.
    def drop(d):
        d["gpus"].pop(3)
        d["gpus"][2].pop("links")
    edit(gpus_file, drop)
    devs = p.wait(lambda d: len(d) == 3)
    assert GPU[3] not in health(devs)


def test_broken_file_while_running_keeps_the_last_good_state(kubelet, plugin_factory, gpus_file):
    pl = plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    with open(gpus_file, "w") as f:
        f.write('{"gpus": [{"uuid": ')
    time.sleep(0.5)
    assert len(p.devices()) == 4 and pl.proc.poll() is None
    assert "keeping the last good one" in pl.output()
    assert p.allocate([GPU[0]]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[0]


# --- kubelet restarts, shutdown -----------------------------------------------------

def test_reregisters_within_a_second_after_kubelet_restarts(kubelet, plugin_factory, gpus_file,
                                                            kdir):
    plugin_factory(gpus_file)
    kubelet.wait_plugin("nvidia.com/gpu")
    for _ in range(2):
        t0 = time.monotonic()
        kubelet.restart()
        kubelet.wait_plugin("nvidia.com/gpu", timeout=5, after=t0)
        first = min(t for t, _, _ in kubelet.registrations if t >= t0)
        assert first - t0 < 1.0
        # The plugin may race kubelet's clean-up of the directory and register
        # once more; the latest registration is the one kubelet uses.
        time.sleep(0.5)
        p = kubelet.plugins["nvidia.com/gpu"]
        assert len(p.wait(lambda d: len(d) == 4)) == 4
        assert p.allocate([GPU[2]]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[2]
    assert os.path.exists(os.path.join(kdir, "DEPRECATION"))  # left alone


def test_a_directory_made_again_is_served_again(kubelet, plugin_factory, gpus_file, kdir):
    # node maintenance removes the device-plugins directory and makes it
    # again: the inotify watch went with the old one, and the plugin's
    # socket too; no event says so, and kubelet could not dial it
    plugin_factory(gpus_file)
    kubelet.wait_plugin("nvidia.com/gpu")
    kubelet.stop()
    shutil.rmtree(kdir)
    os.mkdir(kdir)
    t0 = time.monotonic()
    kubelet.start()
    kubelet.wait_plugin("nvidia.com/gpu", timeout=5, after=t0)
    p = kubelet.plugins["nvidia.com/gpu"]
    assert len(p.wait(lambda d: len(d) == 4)) == 4
    assert p.allocate([GPU[1]]).envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    t1 = time.monotonic()
    kubelet.restart()  # and the new directory is watched: within a second again
    kubelet.wait_plugin("nvidia.com/gpu", timeout=5, after=t1)
    assert min(t for t, _, _ in kubelet.registrations if t >= t1) - t1 < 1.5


def test_registers_when_kubelet_comes_up_later(plugin_factory, gpus_file, kdir):
    plugin_factory(gpus_file)
    time.sleep(0.5)
    t0 = time.monotonic()
    k = FakeKubelet(kdir).start()
    try:
        k.wait_plugin("nvidia.com/gpu", timeout=5)
        assert k.registrations[0][0] - t0 < 1.0
    finally:
        k.stop()


def test_a_socket_it_cannot_make_is_tried_again_and_fails_healthz(plugin_factory, gpus_file,
                                                                    kdir):
    """Something in the socket's place (here a directory): the plugin says why, tries
    again every second, and /healthz fails once that has lasted --healthz-grace, so
    the DaemonSet's liveness probe restarts it; as it does while kubelet never takes
    the registration. Both heal without a restart."""
    os.mkdir(os.path.join(kdir, "gpusched-gpu.sock"))
    pl = plugin_factory(gpus_file, "--healthz-grace", "1")
    time.sleep(2)
    r = pl.get("/healthz")
    assert r.status_code == 503 and "cannot listen on its socket" in r.json()["error"], r.text
    assert "cannot remove old '%s/gpusched-gpu.sock': Is a directory" % kdir in pl.output()
    assert pl.output().count("trying again every second") == 1  # said once
    os.rmdir(os.path.join(kdir, "gpusched-gpu.sock"))
    end = time.monotonic() + 5
    while "not registered with kubelet" not in pl.get("/healthz").text:  # no kubelet yet
        assert time.monotonic() < end
        time.sleep(0.2)
    k = FakeKubelet(kdir).start()
    try:
        k.wait_plugin("nvidia.com/gpu", timeout=5)
        end = time.monotonic() + 5
        while pl.get("/healthz").status_code != 200:
            assert time.monotonic() < end
            time.sleep(0.2)
    finally:
        k.stop()


def test_sigterm_closes_cleanly(kubelet, plugin_factory, gpus_file, kdir):
    pl = plugin_factory(gpus_file)
    p = kubelet.wait_plugin("nvidia.com/gpu")
    p.wait(lambda d: len(d) == 4)
    pl.proc.send_signal(signal.SIGTERM)
    assert pl.proc.wait(5) == 0
    assert not os.path.exists(os.path.join(kdir, "gpusched-gpu.sock"))
    with p.cond:
        p.cond.wait_for(lambda: p.stream_ended, timeout=5)
    assert p.stream_ended
    assert "stopped" in pl.output()


# --- sharing replicas and MIG ---------------------------------------------------------

def test_replicas_advertise_each_gpu_n_times(kubelet, plugin_factory, gpus_file):
    plugin_factory(gpus_file, "--replicas", "3")
    p = kubelet.wait_plugin("nvidia.com/gpu")
    devs = p.wait(lambda d: len(d) == 12)
    assert sorted(d.ID for d in devs)[:3] == [GPU[0] + "::0", GPU[0] + "::1", GPU[0] + "::2"]
    r = p.allocate([GPU[1] + "::0", GPU[1] + "::2"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == GPU[1]
    # Preferred: spread over distinct, NVLinked GPUs first.
    chosen, _ = p.admit([d.ID for d in devs], 2)
    assert sorted(c.split("::")[0] for c in chosen) == [GPU[0], GPU[1]]


def test_mig_instances_get_their_own_resource(kubelet, plugin_factory, gpus_file, kdir):
    mig = ["MIG-11111111-0000-4000-8000-00000000000%d" % i for i in range(3)]

    def to_mig(d):
        d["gpus"][3]["mig"] = [{"uuid": mig[0], "profile": "1g.10gb", "memory_mib": 9856},
                               {"uuid": mig[1], "profile": "1g.10gb", "memory_mib": 9856},
                               {"uuid": mig[2], "profile": "3g.40gb", "memory_mib": 40192}]
    edit(gpus_file, to_mig)
    pl = plugin_factory(gpus_file)
    g = kubelet.wait_plugin("nvidia.com/gpu")
    m1 = kubelet.wait_plugin("nvidia.com/mig-1g.10gb")
    m3 = kubelet.wait_plugin("nvidia.com/mig-3g.40gb")
    assert m1.endpoint == "gpusched-mig-1g.10gb.sock"
    assert sorted(d.ID for d in g.wait(lambda d: len(d) == 3)) == GPU[:3]
    assert sorted(d.ID for d in m1.wait(lambda d: len(d) == 2)) == mig[:2]
    assert [d.ID for d in m3.wait(lambda d: len(d) == 1)] == [mig[2]]
    assert m1.allocate([mig[1]]).envs["NVIDIA_VISIBLE_DEVICES"] == mig[1]
    inv = pl.get("/inventory").json()
    assert inv["gpus"][3]["mig_enabled"] and len(inv["gpus"][3]["mig"]) == 3
    # An XID on one MIG instance takes that instance only.
    edit(gpus_file, lambda d: d["gpus"][3]["mig"][1].update(xids=[79]))
    devs = m1.wait(lambda d: health(d)[mig[1]] == "Unhealthy")
    assert health(devs)[mig[0]] == "Healthy"
    assert health(m3.devices())[mig[2]] == "Healthy"
    inv = pl.get("/inventory").json()["gpus"][3]
    assert inv["healthy"] is True and inv["mig"][1]["reason"] == "XID 79 (fatal)", inv
    assert "healthy" not in inv["mig"][0], inv
    # An XID on the parent GPU takes its MIG devices down too.
    edit(gpus_file, lambda d: d["gpus"][3].update(xids=[79]))
    m1.wait(lambda d: all(x.health == "Unhealthy" for x in d))
    m3.wait(lambda d: all(x.health == "Unhealthy" for x in d))
    # Reconfigured without MIG: the MIG resources go, the GPU joins nvidia.com/gpu.
    t0 = time.monotonic()
    edit(gpus_file, lambda d: d["gpus"][3].pop("mig"))
    g2 = kubelet.wait_plugin("nvidia.com/gpu", after=t0)
    assert len(g2.wait(lambda d: len(d) == 4)) == 4
    assert not os.path.exists(os.path.join(kdir, "gpusched-mig-1g.10gb.sock"))


# --- no GPU, bad input ---------------------------------------------------------------

def test_without_nvml_it_says_so_and_advertises_nothing(kubelet, plugin_factory, kdir):
    pl = plugin_factory(None, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1")
    inv = pl.get("/inventory").json()
    assert inv["gpus"] == []
    time.sleep(0.5)
    assert pl.proc.poll() is None
    assert kubelet.registrations == []
    assert [f for f in os.listdir(kdir) if f != "kubelet.sock"] == []
    out = pl.output()
    assert "cannot load /nonexistent/libnvidia-ml.so.1" in out
    assert "advertising no GPUs" in out


def test_without_nvml_fail_on_init_error_exits(gpusched_bin, kdir):
    r = run(gpusched_bin, "device-plugin", "--kubelet-dir", kdir, "--no-api",
            "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--fail-on-init-error", timeout=10)
    assert r.returncode == 1
    assert "cannot load /nonexistent/libnvidia-ml.so.1" in r.stderr


@pytest.mark.parametrize("doc,msg", [
    ('{"gpus": [{"uuid": "GPU-1", "name": "X"}]}', "gpus[0].memory_mib: missing"),
    ('{"gpus": [{"uuid": "GPU-1", "name": "X", "memory_mib": -5}]}',
     "gpus[0].memory_mib: -5 is out of range"),
    ('{"gpus": [{"uuid": "GPU-1", "name": "X", "memory_mib": 5, "numa_node": "a"}]}',
     "gpus[0].numa_node: must be an integer"),
    ('{"gpus": [{"uuid": "GPU-1", "name": "X", "memory_mib": 5, '
     '"links": [{"gpu": 7, "type": "nvlink"}]}]}', "gpus[0].links[0].gpu: 7 is out of range"),
    ('{"gpus": [{"uuid": "GPU-1", "name": "X", "memory_mib": 5}, '
     '{"uuid": "GPU-1", "name": "X", "memory_mib": 5}]}', "gpus[1].uuid: 'GPU-1' appears twice"),
    ('{"gpus": {}}', "gpus: missing or not an array"),
    ('{"gpus": [', "line 1"),
])
def test_broken_fake_gpu_file_is_refused_with_the_field(gpusched_bin, kdir, doc, msg):
    path = os.path.join(kdir, "bad.json")
    with open(path, "w") as f:
        f.write(doc)
    r = run(gpusched_bin, "device-plugin", "--kubelet-dir", kdir, "--fake-gpus", path,
            "--no-api", timeout=10)
    assert r.returncode == 2
    assert msg in r.stderr and path in r.stderr


def test_bad_flags(gpusched_bin, kdir):
    r = run(gpusched_bin, "device-plugin", "--replicas", "0", timeout=10)
    assert r.returncode == 2 and "--replicas" in r.stderr
    r = run(gpusched_bin, "device-plugin", "--ignore-xids", "13,x", "--fake-gpus", FAKE,
            timeout=10)
    assert r.returncode == 2 and "'x' is not an XID number" in r.stderr
    r = run(gpusched_bin, "device-plugin", "--kubelet-dir", "/nonexistent/dir", "--fake-gpus",
            FAKE, "--no-api", timeout=10)
    assert r.returncode == 1 and "/nonexistent/dir: not a directory" in r.stderr
    r = run(gpusched_bin, "device-plugin", "--help", timeout=10)
    assert r.returncode == 0 and "--fake-gpus" in r.stdout
    assert "fatal XID (default 0: never" in " ".join(r.stdout.split()), r.stdout
    for flag, bad in (("--resource-prefix", "example.com"), ("--annotation-prefix", "Sched/")):
        r = run(gpusched_bin, "device-plugin", flag, bad, "--fake-gpus", FAKE, "--no-api",
                timeout=10)
        what = flag[2:].replace("-", " ")
        assert r.returncode == 2 and f"{what} '{bad}': must be a DNS subdomain" in r.stderr, \
            r.stderr


def test_renamed_resource(kubelet, plugin_factory, gpus_file):
    """--resource-prefix: the plugin registers <prefix>gpu and lists the GPUs under it."""
    plugin_factory(gpus_file, "--resource-prefix", "example.com/")
    p = kubelet.wait_plugin("example.com/gpu")
    assert sorted(d.ID for d in p.wait(lambda d: len(d) == 4)) == GPU
    assert "nvidia.com/gpu" not in kubelet.plugins
