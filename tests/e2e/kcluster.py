"""kcluster.py - a real Kubernetes v1.20.2 cluster on loopback, for gpusched's e2e tests.

Why: every other test talks to stand-ins (tests/blackbox/fake_*.py); users run
gpusched inside a real control plane. This module starts one, with gpusched's
extender, webhook and device plugin wired in as deploy/ describes, and takes it
down leaving nothing behind on the host. Needs root and the v1.20.2 binaries of
../shared/k8s (see its README.md; every fact used here is verified there).

API (other scenarios build on it):

  k8s_binaries(k8s_dir=None) -> {name: path}
      kube-apiserver, kube-scheduler, kubelet decompressed from K8S_DIR/*.xz into
      a cache outside the repository ($GPUSCHED_K8S_CACHE, else
      $XDG_CACHE_HOME/gpusched/k8s-v1.20.2, else ~/.cache/...), each checked
      against SHA256SUMS. K8S_DIR: $GPUSCHED_K8S_DIR, else ../shared/k8s beside
      the repository. Raises Unavailable when they are absent.
  Cluster(gpusched_bin, nodes=[NodeSpec(...)], extender_replicas=2,
          proxy_mode="service", workdir=None, bins=None, extender_config=None,
          extender_tls=False)   extender_tls: True or "pinned" (forwarding pins keys), "ca"
                               (a rotation keeps the CA; the replicas set tls_ca)
      .start()                 etcd, kube-apiserver, CRD + RBAC from deploy/,
                               webhook (+ its Mutating/ValidatingWebhookConfiguration),
                               extender replicas behind one proxy URL, kube-scheduler,
                               then every kubelet node (containerd, kubelet, device plugin)
      .stop()                  everything, in reverse; restores sysctls; removes the workdir
      .kubeconfig              admin kubeconfig path (token auth, system:masters)
      .kubectl(*args, input=None, check=True, timeout=60) -> CompletedProcess
      .api(method, path, body=None, params=None) -> requests.Response
      .apply(obj_or_list)      kubectl apply -f - of Python objects (JSON)
      .pod(ns, name) -> dict | None
      .wait(pred, timeout, what)  poll pred() until truthy, else AssertionError(what)
      .wait_pods(ns, names, phases, timeout) -> {name: pod}
      .delete_pods(ns, names=None, wait=True, grace=0)   delete and wait until gone
      .pod_log(ns, name, container) -> str      the container's stdout from the node's
                                                /var/log/pods tree (CRI log lines decoded)
      .events(ns, name) -> [event]
      .start_controller_manager(controllers) -> Proc   kube-controller-manager with
                               only those controllers (test_controllers.py)
      .add_api_nodes(count, gpus, model, memory_mib, prefix)  API-only Nodes with a
                               fresh gpusched.io/gpu-inventory annotation (scale)
      .extender_url(i), .extender_metric(i, name, labels)   replica i, http or https
      .rotate_extender_cert(i, pair)   extender_tls: replica i's mounted pair replaced by
                               pair (.extender_pairs[1] is the second one), file by file
                               renamed into place, as kubelet updates a Secret volume
      .node(name) -> KubeletNode
  KubeletNode (one per NodeSpec): .name, .fake_gpus_path, .read_fake_gpus(), .write_fake_gpus(doc),
      .restart_device_plugin(extra_args), .restart_kubelet(), .allocatable()
  NodeSpec(name, gpus=fake-GPU JSON doc, dp_args=[...])
  HostSnapshot.take(); snap.leftovers(after) -> [str]   processes, mounts, links,
      host directories and sysctls that differ: the "leaves nothing behind" check.
  ExtenderProxy(backends, mode, leader_fn)  the one URL kube-scheduler calls.
      "service" (the Cluster's default) does what deploy/'s Service does: each
      request to a ready replica picked at random, as kube-proxy picks an
      endpoint; /readyz is 200 on every rebuilt replica, leader or not, and a
      non-leader forwards /bind to the Lease holder (src/ext/forward.c;
      test_service_routing.py, test_ha.py). "leader" forwards every request to
      the replica holding the Lease (read from the API server, cached 0.5 s),
      "follower" to one that does not hold it. With tls=True (extender_tls) it
      passes TCP connections through, a replica picked per connection, as
      kube-proxy does.
      .mode can be switched at run time; .counts holds
      {(replica address, verb): requests}.

The scheduler config is deploy/scheduler-config-v1beta1.yaml (the config API of
1.20) as shipped, by scheduler_config_v1beta1(): urlPrefix pointed at the proxy,
its percentageOfNodesToScore kept, healthz/metrics on
free loopback ports, the kubeconfig; everything else as shipped.

Isolation: each kubelet node runs containerd, kubelet and its device plugin in a
private mount namespace (unshare -m --propagation private; a holder process keeps
it alive) with temp dirs bind-mounted over /var/lib, /var/log and /run, so the
paths kubelet 1.20 hardcodes land in the workdir; the control plane runs in its
own namespace with a bind-mounted /etc/hosts naming every kubelet node 127.0.0.1
(for kubectl logs/exec). Each node gets a CNI bridge with a private name and a /24
unused on the host, isGateway and ipMasq off. Teardown unmounts deepest first,
kills what is left in each namespace, deletes the bridges and restores the
sysctls kubelet changes.
"""
import base64
import contextlib
import copy
import hashlib
import http.client
import http.server
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
import time

import requests
import urllib3
import yaml

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S_VERSION = "v1.20.2"
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
           "net/ipv4/ip_forward")
HOST_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd",
              "/var/lib/cni", "/var/lib/containerd", "/etc/cni/net.d", "/run/netns",
              "/usr/libexec/kubernetes", "/var/lib/etcd", "/etc/kubernetes", "/var/run/kubernetes")
PAUSE_IMAGE = "localhost/pause:e2e"
BUSYBOX_IMAGE = "localhost/busybox:e2e"
PREFIX = "gpusched.io/"
CGROUP_PARENT = "k8s.io"      # containerd's CRI namespace: containers' cgroup parent


class Unavailable(Exception):
    """What the cluster needs is missing here (binaries, root, packages)."""


# ---- binaries -------------------------------------------------------------------

def k8s_dir():
    return os.environ.get("GPUSCHED_K8S_DIR", os.path.join(ROOT, "..", "shared", "k8s"))


def cache_dir():
    if os.environ.get("GPUSCHED_K8S_CACHE"):
        return os.environ["GPUSCHED_K8S_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpusched", "k8s-" + K8S_VERSION)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def k8s_binaries(src=None):
    src = src or k8s_dir()
    sums_path = os.path.join(src, "SHA256SUMS")
    if not os.path.isfile(sums_path):
        raise Unavailable(f"no Kubernetes binaries at {src} (set GPUSCHED_K8S_DIR; see "
                          f"docs/e2e.md)")
    sums = {}
    with open(sums_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                sums[parts[1]] = parts[0]
    out = cache_dir()
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet"):
        plain = os.path.join(src, name)     # scripts/k8s-bin writes them so
        if os.path.isfile(plain) and _sha256(plain) == sums.get(name):
            paths[name] = plain
            continue
        dst = os.path.join(out, name)
        if not (os.path.isfile(dst) and _sha256(dst) == sums.get(name)):
            xz = os.path.join(src, name + ".xz")
            if _sha256(xz) != sums.get(name + ".xz"):
                raise Unavailable(f"{xz}: SHA256 differs from SHA256SUMS")
            tmp = dst + ".tmp"
            with open(tmp, "wb") as f:
                subprocess.run(["xz", "-dc", xz], stdout=f, check=True)
            os.chmod(tmp, 0o755)
            if _sha256(tmp) != sums.get(name):
                os.unlink(tmp)
                raise Unavailable(f"{name}: decompressed SHA256 differs from SHA256SUMS")
            os.replace(tmp, dst)
        paths[name] = dst
    return paths


def check_host():
    """Raise Unavailable naming what is missing to run a cluster here."""
    if os.geteuid() != 0:
        raise Unavailable("the e2e cluster needs root (kubelet, containerd, mounts)")
    missing = [t for t in ("etcd", "containerd", "ctr", "runc", "umoci", "busybox", "kubectl",
                           "unshare", "nsenter", "ip", "openssl", "cc", "xz")
               if shutil.which(t) is None]
    if not os.path.isfile("/usr/lib/cni/bridge"):
        missing.append("/usr/lib/cni/bridge (containernetworking-plugins)")
    if missing:
        raise Unavailable("missing: " + ", ".join(missing) + " (scripts/deps installs them)")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise Unavailable(f"cannot make a private mount namespace here (unshare -m: "
                          f"{probe.stderr.strip()}); a container without CAP_SYS_ADMIN?")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- images ---------------------------------------------------------------------

def build_images(out_dir):
    """pause (tests/e2e/pause.c, static) and busybox-static as OCI tarballs, cached."""
    os.makedirs(out_dir, exist_ok=True)
    pause_src = os.path.join(ROOT, "tests", "e2e", "pause.c")
    stamp = _sha256(pause_src)[:12] + "-" + _sha256("/bin/busybox")[:12]
    done = os.path.join(out_dir, "images-" + stamp)
    tars = {PAUSE_IMAGE: os.path.join(out_dir, "pause.tar"),
            BUSYBOX_IMAGE: os.path.join(out_dir, "busybox.tar")}
    if os.path.exists(done):
        return tars
    work = tempfile.mkdtemp(prefix="img-", dir=out_dir)
    try:
        pause_bin = os.path.join(work, "pause")
        subprocess.run(["cc", "-static", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall",
                        "-Wextra", "-Werror", "-o", pause_bin, pause_src], check=True)

        def image(name, fill, entrypoint, tar):
            layout = os.path.join(work, name + "-oci")
            bundle = os.path.join(work, name + "-bundle")
            ref = f"{layout}:e2e"
            subprocess.run(["umoci", "init", "--layout", layout], check=True)
            subprocess.run(["umoci", "new", "--image", ref], check=True)
            subprocess.run(["umoci", "unpack", "--image", ref, bundle], check=True,
                           capture_output=True)
            fill(os.path.join(bundle, "rootfs"))
            subprocess.run(["umoci", "repack", "--image", ref, bundle], check=True)
            subprocess.run(["umoci", "config", "--image", ref] +
                           [f"--config.entrypoint={e}" for e in entrypoint], check=True)
            subprocess.run(["tar", "-C", layout, "-cf", tar, "."], check=True)

        def fill_pause(rootfs):
            shutil.copy(pause_bin, os.path.join(rootfs, "pause"))

        def fill_busybox(rootfs):
            bindir = os.path.join(rootfs, "bin")
            os.makedirs(bindir, exist_ok=True)
            shutil.copy("/bin/busybox", os.path.join(bindir, "busybox"))
            applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True,
                                     check=True).stdout.split()
            for a in applets:
                if a != "busybox":
                    os.symlink("busybox", os.path.join(bindir, a))
            os.makedirs(os.path.join(rootfs, "tmp"), exist_ok=True)

        image("pause", fill_pause, ["/pause"], tars[PAUSE_IMAGE])
        image("busybox", fill_busybox, ["/bin/sh"], tars[BUSYBOX_IMAGE])
        for old in os.listdir(out_dir):
            if old.startswith("images-"):
                os.unlink(os.path.join(out_dir, old))
        open(done, "w").close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tars


# ---- host snapshot: what teardown must leave as it found it ---------------------

def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---- the host's sysctls (kubelet changes them while it runs) ------------------
#
# Saved once for every cluster of this host, not per Cluster: a cluster started
# while another one's kubelet runs would otherwise save kubelet's values and
# "restore" them. The originals also go to SYSCTL_FILE (tmpfs: gone at reboot,
# as the values are), so a run killed before its teardown is repaired by the
# next one instead of leaving kernel.panic=10 behind.
SYSCTL_FILE = "/run/gpusched-e2e-sysctls.json"
_sysctl_lock = threading.Lock()
_sysctl_users = 0


def _kubelet_running():
    return any(cmd.split(" ")[0].endswith("/kubelet") or cmd.split(" ")[0] == "kubelet"
               for cmd in HostSnapshot._procs().values())


def _write_sysctls(values):
    for s, v in values.items():
        if v is not None and _read("/proc/sys/" + s) != v:
            with open("/proc/sys/" + s, "w") as f:
                f.write(v)


def sysctls_acquire():
    """Before a cluster's first kubelet: remember the host's values (or take
    those an earlier, killed run remembered)."""
    global _sysctl_users
    with _sysctl_lock:
        if _sysctl_users == 0:
            try:
                with open(SYSCTL_FILE) as f:
                    saved = json.load(f)
                if not _kubelet_running():     # a killed run's leftovers: repair now
                    _write_sysctls(saved)
            except (OSError, ValueError):
                with open(SYSCTL_FILE, "w") as f:
                    json.dump({s: _read("/proc/sys/" + s) for s in SYSCTLS}, f)
        _sysctl_users += 1


def sysctls_release():
    """After a cluster's kubelets stopped: the last user on a host with no
    kubelet left puts the remembered values back."""
    global _sysctl_users
    with _sysctl_lock:
        _sysctl_users -= 1
        if _sysctl_users > 0 or _kubelet_running():
            return
        try:
            with open(SYSCTL_FILE) as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return
        _write_sysctls(saved)
        os.unlink(SYSCTL_FILE)


def _cgroup_dirs():
    """Top-level cgroup v1 directories of the controllers containers are put in."""
    out = set()
    for ctl in ("memory", "cpu", "pids", "devices", "blkio", "freezer", "cpuset", "systemd"):
        d = f"/sys/fs/cgroup/{ctl}"
        if os.path.isdir(d):
            out |= {f"{ctl}/{e}" for e in os.listdir(d) if os.path.isdir(f"{d}/{e}")}
    return out


class HostSnapshot:
    def __init__(self, mounts, links, paths, sysctls, procs, cgroups):
        self.mounts, self.links, self.paths = mounts, links, paths
        self.sysctls, self.procs, self.cgroups = sysctls, procs, cgroups

    @staticmethod
    def _procs():
        out = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                cmd = _read(f"/proc/{p}/cmdline")
                if cmd:
                    out[int(p)] = cmd.replace("\0", " ")
        return out

    @classmethod
    def take(cls):
        mounts = set()
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mounts.add(line.split()[4])
        out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                             check=True).stdout
        links = {link["ifname"]: link.get("master", "") for link in json.loads(out or "[]")}
        paths = {p for p in HOST_PATHS if os.path.lexists(p)}
        sysctls = {s: _read("/proc/sys/" + s) for s in SYSCTLS}
        return cls(mounts, links, paths, sysctls, cls._procs(), _cgroup_dirs())

    def leftovers(self, after, workdirs=()):
        """What `after` has that this snapshot had not, of what the clusters with these
        workdirs made (other runs may share the host: their links, cgroups, processes
        and kubelet's sysctls are not counted)."""
        tags = [os.path.basename(w.rstrip("/")) for w in workdirs]
        bridges = tuple(bridge_prefix(t) for t in tags)
        bad = []
        bad += [f"mount left: {m}" for m in sorted(after.mounts - self.mounts)]
        for name in sorted(set(after.links) - set(self.links)):
            master = after.links[name]
            if name.startswith(bridges) or (name.startswith("veth") and
                                            (not master or master.startswith(bridges))):
                bad.append(f"network link left: {name}")
        bad += [f"host path left: {p}" for p in sorted(after.paths - self.paths)]
        bad += [f"directory left: {w}" for w in workdirs if os.path.lexists(w)]
        for c in sorted(after.cgroups - self.cgroups):
            path = "/sys/fs/cgroup/" + c
            # containerd's parent of every run's containers: left over when empty
            if c.endswith("/" + CGROUP_PARENT) and os.path.isdir(path) and not any(
                    os.path.isdir(os.path.join(path, e)) for e in os.listdir(path)):
                bad.append(f"cgroup left: {path}")
        if not any(cmd.split(" ")[0].endswith("kubelet") for cmd in after.procs.values()):
            for s, v in self.sysctls.items():
                if after.sysctls.get(s) != v:
                    bad.append(f"sysctl {s.replace('/', '.')} = {after.sysctls.get(s)} "
                               f"(was {v})")
        for pid, cmd in after.procs.items():
            if pid not in self.procs and any(w in cmd for w in workdirs):
                bad.append(f"process left: {pid} {cmd[:200]}")
        return bad


def bridge_prefix(tag):
    """CNI bridge names of the cluster whose workdir is named `tag` (15 chars at most)."""
    return "gse" + tag[-8:]


# ---- processes ------------------------------------------------------------------

class Proc:
    """One started process; its output goes to LOGDIR/NAME.log."""

    def __init__(self, name, argv, logdir, env=None):
        self.name, self.argv = name, argv
        self.log_path = os.path.join(logdir, name + ".log")
        self.log = open(self.log_path, "ab")
        self.log_start = os.fstat(self.log.fileno()).st_size   # this run's lines start here
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=5.0, sig=signal.SIGTERM):
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.p.pid, sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait(10)
        self.log.close()

    def tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""


class MountNS:
    """A private mount namespace kept alive by a holder process."""

    def __init__(self, name, logdir):
        self.holder = Proc(name + "-mntns", ["unshare", "-m", "--propagation", "private", "--",
                                            "sleep", "infinity"], logdir)
        deadline = time.time() + 5
        me = os.readlink("/proc/self/ns/mnt")
        while time.time() < deadline:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != me:
                    if _read(f"/proc/{self.holder.pid}/comm") == "sleep":
                        break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"{name}: private mount namespace did not come up")
        self.ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")

    def argv(self, argv):
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--"] + list(argv)

    def run(self, argv, **kw):
        kw.setdefault("check", True)
        kw.setdefault("capture_output", True)
        return subprocess.run(self.argv(argv), **kw)

    def bind(self, src, dst):
        self.run(["mount", "--bind", src, dst])

    def members(self):
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != self.holder.pid:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{p}/ns/mnt") == self.ns:
                        out.append(int(p))
        return out

    def close(self, workdir):
        """Kill what still runs inside, unmount deepest first, end the holder."""
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 5
        while self.members() and time.time() < deadline:
            time.sleep(0.05)
        if self.holder.alive():
            mine = set()
            with open("/proc/self/mountinfo") as f:
                mine = {line.split()[4] for line in f}
            with open(f"/proc/{self.holder.pid}/mountinfo") as f:
                points = [line.split()[4] for line in f]
            ours = [m for m in points if m not in mine or m.startswith(workdir)]
            for m in sorted(set(ours), key=lambda s: s.count("/"), reverse=True):
                r = self.run(["umount", m], check=False)
                if r.returncode != 0:
                    self.run(["umount", "-l", m], check=False)
        self.holder.stop(timeout=2, sig=signal.SIGKILL)


# ---- kubeconfig, REST ------------------------------------------------------------

ASSIGNER = "admin"  # the token user of every component and test (tokens.csv)


def write_kubeconfig(path, server, token):
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                     "insecure-skip-tls-verify": True}}],
           "users": [{"name": "admin", "user": {"token": token}}],
           "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
           "current-context": "e2e"}
    with open(path, "w") as f:
        json.dump(doc, f)


# the device plugin's start-up line saying how many devices it advertises per GPU
# ("10 devices per GPU for nvidia.com/gpu", text or JSON log format): the harness
# reads the count the plugin chose (its default in API mode, or --replicas) instead
# of restating the default
DP_REPLICAS_LINE = re.compile(rb'(?: dp: |"msg":")(\d+) devices? per GPU for ')


def logged_replicas(proc):
    """Devices per GPU from a device plugin's own log (this run's part), or None."""
    with open(proc.log_path, "rb") as f:
        f.seek(proc.log_start)
        m = DP_REPLICAS_LINE.search(f.read())
    return int(m.group(1)) if m else None

SCHED_API = "kubescheduler.config.k8s.io/v1beta1"     # the config API of kube-scheduler 1.20


def shipped_scheduler_config(api=SCHED_API):
    """(path, config) of the deploy/*.yaml KubeSchedulerConfiguration for `api`, or None."""
    for path in sorted(os.listdir(os.path.join(ROOT, "deploy"))):
        full = os.path.join(ROOT, "deploy", path)
        if not path.endswith(".yaml"):
            continue
        with open(full) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for d in docs:
            if d.get("kind") == "KubeSchedulerConfiguration" and d.get("apiVersion") == api:
                return full, d
    return None


def scheduler_config_v1beta1(url, kubeconfig, healthz_port, metrics_port):
    """deploy/scheduler-config-v1beta1.yaml (the config API of 1.20) as shipped, with
    only what a test cluster must change: urlPrefix points at the proxy, the
    kubeconfig and healthz/metrics ports are the harness's, and the leader election
    retries every second. percentageOfNodesToScore and the rest come from the file."""
    shipped = shipped_scheduler_config()
    assert shipped, f"deploy/ ships no {SCHED_API} KubeSchedulerConfiguration"
    cfg = copy.deepcopy(shipped[1])
    cfg["clientConnection"] = dict(cfg.get("clientConnection") or {}, kubeconfig=kubeconfig)
    cfg["healthzBindAddress"] = f"127.0.0.1:{healthz_port}"
    cfg["metricsBindAddress"] = f"127.0.0.1:{metrics_port}"
    le = cfg.get("leaderElection", {})
    le["leaseDuration"], le["renewDeadline"], le["retryPeriod"] = "15s", "10s", "1s"
    cfg["leaderElection"] = le
    for ext in cfg.get("extenders", []):
        ext["urlPrefix"] = url
    return cfg


# ---- the extender proxy (one URL for two replicas) --------------------------------

class ExtenderProxy:
    def __init__(self, backends, mode="leader", leader_fn=None, tls=False):
        self.backends = list(backends)   # [(identity, "127.0.0.1:port")]
        self.mode = mode
        self.leader_fn = leader_fn       # () -> identity holding the Lease, or None
        self.leader, self.leader_at = None, 0.0
        self.lock = threading.Lock()
        self.counts = {}
        self.tls = tls
        if tls:
            self._start_tcp()
            return
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # one segment per answer: headers and body are two writes, and Nagle would
            # hold the body until kube-scheduler's delayed ACK (~40 ms a request)
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, data = proxy.forward(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def current_leader(self):
        with self.lock:
            if self.leader_fn and time.time() - self.leader_at > 0.5:
                with contextlib.suppress(requests.RequestException, ValueError):
                    self.leader = self.leader_fn()
                self.leader_at = time.time()
            return self.leader

    def _start_tcp(self):
        """Replicas serving HTTPS: what kube-proxy does, a backend picked per TCP
        connection and bytes passed through, so kube-scheduler's TLS session is with
        the replica itself. counts holds {(addr, "connection"): connections}."""
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"

        def pipe(a, b):
            with contextlib.suppress(OSError):
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            for x in (a, b):
                with contextlib.suppress(OSError):
                    x.shutdown(socket.SHUT_RDWR)

        def serve():
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return
                addr = self.pick()
                try:
                    if addr is None:
                        raise OSError("no ready extender replica")
                    host, port = addr.rsplit(":", 1)
                    up = socket.create_connection((host, int(port)), timeout=5)
                    up.settimeout(None)
                except OSError:
                    conn.close()
                    continue
                with self.lock:
                    key = (addr, "connection")
                    self.counts[key] = self.counts.get(key, 0) + 1
                for a, b in ((conn, up), (up, conn)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()
        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    @staticmethod
    def ready(addr, tls=False):
        try:
            c = (http.client.HTTPSConnection(addr, timeout=1,
                                             context=ssl._create_unverified_context())
                 if tls else http.client.HTTPConnection(addr, timeout=1))
            c.request("GET", "/readyz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def pick(self):
        if self.mode in ("leader", "follower"):
            # the Lease names NAME@HOST:PORT (or just NAME)
            leader = (self.current_leader() or "").split("@")[0]
            for ident, addr in self.backends:
                if (ident == leader) == (self.mode == "leader") and self.ready(addr, self.tls):
                    return addr
            return None
        # "service": kube-proxy (iptables mode) picks a ready endpoint at random for each
        # connection. (Round robin would be worse: kube-scheduler's calls per pod follow
        # a fixed pattern, filter then bind, and could send every /bind to the non-leader.)
        ready = [addr for _ident, addr in self.backends if self.ready(addr, self.tls)]
        return random.choice(ready) if ready else None

    def forward(self, path, body):
        addr = self.pick()
        if addr is None:
            return 503, b'{"Error":"no ready extender replica"}'
        verb = path.rsplit("/", 1)[-1]
        with self.lock:
            key = (addr, verb)
            self.counts[key] = self.counts.get(key, 0) + 1
        try:
            c = http.client.HTTPConnection(addr, timeout=30)
            c.request("POST", path, body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
            return r.status, data
        except OSError as e:
            return 503, json.dumps({"Error": f"proxy: {addr}: {e}"}).encode()

    def close(self):
        if self.tls:
            self.listener.close()
            return
        self.server.shutdown()
        self.server.server_close()


# ---- kubelet nodes --------------------------------------------------------------

def fake_gpus_doc(n=4, model="NVIDIA H100 80GB HBM3", memory_mib=81559, tag=0):
    return {"driver": "580.00-fake",
            "gpus": [{"uuid": f"GPU-{tag:08x}-0000-4000-8000-{i:012x}", "name": model,
                      "memory_mib": memory_mib, "numa_node": i // 2} for i in range(n)]}


class NodeSpec:
    def __init__(self, name, gpus=None, dp_args=()):
        self.name = name
        self.gpus = gpus if gpus is not None else fake_gpus_doc()
        self.dp_args = list(dp_args)


def _pick_subnet():
    used = []
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout
    for link in json.loads(out or "[]"):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    routes = subprocess.run(["ip", "-j", "-4", "route"], capture_output=True, text=True).stdout
    for r in json.loads(routes or "[]"):
        if r.get("dst") not in (None, "default"):
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(r["dst"], strict=False))
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 for the CNI bridge")


class KubeletNode:
    def __init__(self, cluster, spec, index):
        self.c, self.spec, self.name = cluster, spec, spec.name
        self.dir = os.path.join(cluster.workdir, "nodes", spec.name)
        self.tag = os.path.basename(cluster.workdir)
        self.bridge = f"{bridge_prefix(self.tag)}n{index}"

        self.subnet = _pick_subnet()
        self.kubelet = self.containerd = self.dp = None
        self.dp_args = list(spec.dp_args)
        self.fake_gpus_path = os.path.join(self.dir, "fake-gpus.json")
        self.kubelet_port = free_port()
        self.healthz_port = free_port()
        self.dp_metrics_port = free_port()

    # paths inside the namespace and their host side
    def host(self, inner):
        for top in ("/var/lib", "/var/log", "/run"):
            if inner == top or inner.startswith(top + "/"):
                return os.path.join(self.dir, top.strip("/").replace("/", "-") + inner[len(top):])
        return inner

    def start(self):
        d = self.dir
        for sub in ("var-lib", "var-log", "run", "containerd/root", "containerd/state", "cni",
                    "volume-plugins", "logs"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        self.write_fake_gpus(self.spec.gpus)
        self.ns = MountNS(f"node-{self.name}", self.c.logdir)
        for top in ("/var/lib", "/var/log", "/run"):
            self.ns.bind(self.host(top), top)
        self.sock = os.path.join(d, "containerd.sock")
        cfg = f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"""
        with open(os.path.join(d, "containerd.toml"), "w") as f:
            f.write(cfg)
        hosts = list(self.subnet.hosts())
        cni = {"cniVersion": "0.4.0", "name": "e2e-" + self.bridge, "plugins": [
            {"type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False,
             "hairpinMode": False,
             "ipam": {"type": "host-local", "ranges": [[{
                 "subnet": str(self.subnet), "rangeStart": str(hosts[9]),
                 "rangeEnd": str(hosts[-2])}]]}},
            {"type": "loopback"}]}
        with open(os.path.join(d, "cni", "10-e2e.conflist"), "w") as f:
            json.dump(cni, f)
        self.containerd = Proc(f"{self.name}-containerd", self.ns.argv(
            ["containerd", "--config", os.path.join(d, "containerd.toml")]), self.c.logdir)
        self.c.wait(lambda: os.path.exists(self.sock) and self.ctr("version").returncode == 0,
                    20, f"{self.name}: containerd up", proc=self.containerd)
        for ref, tar in self.c.images.items():
            r = self.ctr("images", "import", "--base-name", ref.rsplit(":", 1)[0], tar)
            if r.returncode != 0:
                raise RuntimeError(f"{self.name}: ctr import {tar}: {r.stderr}")
        self.start_kubelet()
        self.start_device_plugin()

    def ctr(self, *args):
        return subprocess.run(self.ns.argv(["ctr", "-a", self.sock, "-n", "k8s.io", *args]),
                              capture_output=True, text=True, timeout=60)

    def start_kubelet(self):
        c = self.c
        self.kubelet = Proc(f"{self.name}-kubelet", self.ns.argv([
            c.bins["kubelet"], "--root-dir=/var/lib/kubelet",
            f"--cert-dir={self.dir}/kubelet-pki", "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.sock}", "--cgroup-driver=cgroupfs",
            "--cgroups-per-qos=false", "--enforce-node-allocatable=", "--fail-swap-on=false",
            "--eviction-hard=", "--image-gc-high-threshold=100", "--image-gc-low-threshold=99",
            "--make-iptables-util-chains=false", "--address=127.0.0.1",
            f"--port={self.kubelet_port}", "--read-only-port=0",
            "--healthz-bind-address=127.0.0.1", f"--healthz-port={self.healthz_port}",
            "--anonymous-auth=true", "--authorization-mode=AlwaysAllow",
            "--node-status-update-frequency=1s", f"--hostname-override={self.name}",
            "--register-node=true", f"--kubeconfig={c.kubeconfig}",
            f"--volume-plugin-dir={self.dir}/volume-plugins", "--resolv-conf=",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--node-labels=nvidia.com/gpu.present=true", "--v=2"]), c.logdir)

        def ready():
            n = c.api("GET", f"/api/v1/nodes/{self.name}")
            if n.status_code != 200:
                return False
            conds = n.json().get("status", {}).get("conditions", [])
            return any(x["type"] == "Ready" and x["status"] == "True" for x in conds)
        c.wait(ready, 60, f"node {self.name} Ready", proc=self.kubelet)

    def read_fake_gpus(self):
        """The node's fake-GPU document as it is now (a fresh object each call)."""
        with open(self.fake_gpus_path) as f:
            return json.load(f)

    def write_fake_gpus(self, doc):
        tmp = self.fake_gpus_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.fake_gpus_path)

    def start_device_plugin(self):
        self.dp = Proc(f"{self.name}-device-plugin", self.ns.argv([
            self.c.gpusched, "device-plugin", "--kubeconfig", self.c.kubeconfig,
            "--node-name", self.name, "--fake-gpus", self.fake_gpus_path,
            "--kubelet-dir", "/var/lib/kubelet/device-plugins",
            "--metrics-listen", f"127.0.0.1:{self.dp_metrics_port}"] + self.c.names_args() +
            self.dp_args), self.c.logdir)
        ngpus = len(self.read_fake_gpus()["gpus"])
        self.dp_replicas = self.c.wait(lambda: logged_replicas(self.dp), 30,
                                       f"{self.name}: the device plugin's 'devices per GPU' line",
                                       proc=self.dp)
        for i, a in enumerate(self.dp_args):
            flag = a.split("=", 1)[1] if a.startswith("--replicas=") else \
                self.dp_args[i + 1] if a == "--replicas" else None
            if flag is not None and int(flag) != self.dp_replicas:
                raise AssertionError(f"{self.name}: device plugin started with --replicas {flag} "
                                     f"says {self.dp_replicas} devices per GPU")
        want = str(ngpus * self.dp_replicas)
        gpu = self.c.res_prefix + "gpu"
        self.c.wait(lambda: self.allocatable().get(gpu) == want, 30,
                    f"{self.name}: allocatable {gpu} = {want}", proc=self.dp)

    def restart_device_plugin(self, dp_args=None):
        if dp_args is not None:
            self.dp_args = list(dp_args)
        self.dp.stop()
        # kubelet marks a stopped plugin's devices unhealthy (allocatable 0): wait for
        # that, or a new plugin with the same device count would find the old count
        # still posted and be taken as registered before kubelet has seen it go
        gpu = self.c.res_prefix + "gpu"
        self.c.wait(lambda: self.allocatable().get(gpu, "0") == "0", 30,
                    f"{self.name}: allocatable {gpu} = 0 after the device plugin stopped")
        self.start_device_plugin()

    def restart_kubelet(self):
        self.kubelet.stop()
        self.start_kubelet()

    def allocatable(self):
        n = self.c.api("GET", f"/api/v1/nodes/{self.name}")
        return n.json().get("status", {}).get("allocatable", {}) if n.status_code == 200 else {}

    def pod_log(self, ns, name, uid, container):
        d = self.host(f"/var/log/pods/{ns}_{name}_{uid}/{container}")
        lines = []
        if not os.path.isdir(d):
            return None
        for fn in sorted(os.listdir(d)):
            with open(os.path.join(d, fn), errors="replace") as f:
                for line in f:
                    parts = line.rstrip("\n").split(" ", 3)
                    if len(parts) == 4:
                        lines.append(parts[3])
        return "\n".join(lines)

    def stop(self):
        if self.dp:
            self.dp.stop()
        if self.kubelet:
            self.kubelet.stop(timeout=10)
        if self.containerd and self.containerd.alive():
            for kind in ("tasks", "containers"):
                r = self.ctr(kind, "ls", "-q")
                for cid in r.stdout.split():
                    if kind == "tasks":
                        self.ctr("tasks", "kill", "-s", "SIGKILL", cid)
                        time.sleep(0.05)
                        self.ctr("tasks", "delete", "-f", cid)
                    else:
                        self.ctr("containers", "delete", cid)
            self.containerd.stop(timeout=10)
        if getattr(self, "ns", None):
            self.ns.close(self.dir)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


# ---- the cluster ----------------------------------------------------------------

class Cluster:
    def __init__(self, gpusched_bin, nodes=(), extender_replicas=2, proxy_mode="service",
                 workdir=None, bins=None, extender_config=None, extender_tls=False,
                 res_prefix="nvidia.com/", annot_prefix=PREFIX):
        self.gpusched = os.path.abspath(gpusched_bin)
        # renamed resources and annotations (docs/resources.md, Renaming): every
        # component gets them as a user sets them
        self.res_prefix, self.annot_prefix = res_prefix, annot_prefix
        # keys over deploy/'s: a dict, or f(index, port) -> dict per replica
        self.extender_config = extender_config or {}
        self.node_specs = list(nodes)
        self.extender_replicas = extender_replicas
        self.proxy_mode = proxy_mode
        self.extender_tls = extender_tls
        self.workdir = workdir or tempfile.mkdtemp(prefix="gpusched-e2e-")
        self.logdir = os.path.join(self.workdir, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.bins = bins or k8s_binaries()
        self.procs = []
        self.nodes = {}
        self.proxy = None
        self.cp_ns = None
        self.sysctls_held = False
        self.session = requests.Session()
        self.session.verify = False

    # -- helpers ---------------------------------------------------------------
    def names_args(self):
        """--resource-prefix/--annotation-prefix of the device plugin and webhook"""
        return [f"--resource-prefix={self.res_prefix}", f"--annotation-prefix={self.annot_prefix}"]

    def names_config(self):
        """the same names as the extender's config keys"""
        r = self.res_prefix
        return {"resource_gpu": r + "gpu", "resource_gpu_memory": r + "gpu-memory",
                "resource_gpu_cores": r + "gpu-cores", "resource_vcuda_core": r + "vcuda-core",
                "resource_vcuda_memory": r + "vcuda-memory", "resource_mig_prefix": r + "mig-",
                "annotation_prefix": self.annot_prefix}

    def wait(self, pred, timeout, what, interval=0.2, proc=None):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = pred()
                if last:
                    return last
            except (requests.RequestException, OSError, ValueError, KeyError) as e:
                last = e
            if proc is not None and not proc.alive():
                raise AssertionError(f"{what}: {proc.name} exited:\n{proc.tail()}")
            time.sleep(interval)
        extra = f"\n{proc.name} log:\n{proc.tail()}" if proc is not None else ""
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})"
                             f"{extra}")

    def start_proc(self, name, argv, ns=None):
        p = Proc(name, ns.argv(argv) if ns else argv, self.logdir)
        self.procs.append(p)
        return p

    def api(self, method, path, body=None, params=None, timeout=30, content_type=None,
            headers=None):
        headers = dict(headers or {}, Authorization=f"Bearer {self.token}")
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = content_type or "application/json"
        return self.session.request(method, self.server + path, data=data, params=params,
                                    headers=headers, timeout=timeout, verify=False)

    def kubectl(self, *args, input=None, check=True, timeout=60):
        r = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: rc {r.returncode}\n{r.stdout}"
                                 f"\n{r.stderr}")
        return r

    def apply(self, objs, *extra):
        if isinstance(objs, dict):
            objs = [objs]
        return self.kubectl("apply", *extra, "-f", "-",
                            input=json.dumps({"apiVersion": "v1", "kind": "List",
                                              "items": objs}))

    def pod(self, ns, name):
        r = self.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        return r.json() if r.status_code == 200 else None

    def pods(self, ns, selector=None):
        r = self.api("GET", f"/api/v1/namespaces/{ns}/pods",
                     params={"labelSelector": selector} if selector else None)
        r.raise_for_status()
        return r.json()["items"]

    def wait_pods(self, ns, names, phases=("Running",), timeout=60, ready_log=None):
        """Wait until every pod is in one of `phases` (and, with ready_log, its first
        container's log contains that text). Returns {name: pod}."""
        names = list(names)
        got = {}

        def check():
            for n in names:
                if n in got:
                    continue
                p = self.pod(ns, n)
                if p is None or p["status"].get("phase") not in phases:
                    return False
                if ready_log is not None:
                    c = p["spec"]["containers"][0]["name"]
                    log = self.pod_log(ns, n, c)
                    if not log or ready_log not in log:
                        return False
                got[n] = p
            return True
        try:
            self.wait(check, timeout, f"pods {names} in {phases}", interval=0.3)
        except AssertionError as e:
            left = [n for n in names if n not in got]
            raise AssertionError(f"{e}\n{self.describe_pods(ns, left)}")
        return got

    def describe_pods(self, ns, names):
        out = []
        for n in names:
            p = self.pod(ns, n)
            if p is None:
                out.append(f"{ns}/{n}: gone")
                continue
            st = p["status"]
            cs = [(c["name"], c.get("state")) for c in st.get("containerStatuses", [])]
            evs = [f"{e.get('reason')}: {e.get('message')}" for e in self.events(ns, n)
                   if e["involvedObject"].get("uid") == p["metadata"]["uid"]]
            out.append(f"{ns}/{n}: phase={st.get('phase')} node={p['spec'].get('nodeName')} "
                       f"reason={st.get('reason')} msg={st.get('message')} containers={cs} "
                       f"events={evs[-6:]}")
        return "\n".join(out)

    def delete_pods(self, ns, names=None, wait=True, timeout=60, grace=0):
        """Delete pods; grace 0 (the default) removes them from the API at once, kubelet
        then stops their containers and frees their devices (kubelet 1.20 confirms a
        graceful deletion only at its next 10 s status sync)."""
        if names is None:
            names = [p["metadata"]["name"] for p in self.pods(ns)]
        for n in names:
            self.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{n}",
                     body={"gracePeriodSeconds": grace})
        if wait:
            def gone():
                left = []
                for n in names:
                    p = self.pod(ns, n)
                    if p is None:
                        continue
                    if not p["spec"].get("nodeName") or p["spec"]["nodeName"] not in self.nodes:
                        # no kubelet will confirm: API-only node or never bound
                        self.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{n}",
                                 body={"gracePeriodSeconds": 0})
                    left.append(n)
                return not left
            self.wait(gone, timeout, f"pods {names} deleted", interval=0.3)

    def pod_log(self, ns, name, container):
        p = self.pod(ns, name)
        if p is None or p["spec"].get("nodeName") not in self.nodes:
            return None
        return self.nodes[p["spec"]["nodeName"]].pod_log(ns, name, p["metadata"]["uid"],
                                                         container)

    def events(self, ns, name):
        r = self.api("GET", f"/api/v1/namespaces/{ns}/events",
                     params={"fieldSelector": f"involvedObject.name={name}"})
        return r.json().get("items", []) if r.status_code == 200 else []

    def node(self, name):
        return self.nodes[name]

    def add_api_nodes(self, count, gpus=0, model="NVIDIA A100-SXM4-40GB", memory_mib=40960,
                      prefix="api-node", cpu="64", memory="256Gi", threads=8):
        """Node objects with status (capacity, Ready) and, with gpus > 0, a fresh GPU
        inventory annotation; no kubelet behind them."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def make(i):
            name = f"{prefix}-{i}"
            cap = {"cpu": cpu, "memory": memory, "pods": "110"}
            meta = {"name": name, "labels": {"kubernetes.io/hostname": name}}
            if gpus:
                inv = {"version": 1, "updated_at": now, "gpus": [
                    {"index": g, "uuid": f"GPU-{abs(hash(name)) % (1 << 32):08x}-api-{g:04d}",
                     "model": model, "memory_mib": memory_mib, "numa_node": 0,
                     "healthy": True, "reason": "", "links": [], "mig_enabled": False,
                     "mig": []} for g in range(gpus)]}
                meta["annotations"] = {PREFIX + "gpu-inventory": json.dumps(inv)}
                cap["nvidia.com/gpu"] = str(gpus)
                meta["labels"]["nvidia.com/gpu.present"] = "true"
            body = {"apiVersion": "v1", "kind": "Node", "metadata": meta,
                    "status": {"capacity": cap, "allocatable": cap, "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady",
                         "message": "API-only node", "lastHeartbeatTime": now,
                         "lastTransitionTime": now}]}}
            r = self.api("POST", "/api/v1/nodes", body=body)
            if r.status_code not in (200, 201, 409):
                raise AssertionError(f"creating node {name}: {r.status_code} {r.text}")
            return name
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(threads) as ex:
            return list(ex.map(make, range(count)))

    # -- start -----------------------------------------------------------------
    def start(self):
        try:
            self._start()
        except BaseException:
            self.dump_logs()
            self.stop()
            raise
        return self

    def _start(self):
        w = self.workdir
        self.images = build_images(os.path.join(cache_dir(), "images"))
        sysctls_acquire()
        self.sysctls_held = True
        self.cgroups_before = _cgroup_dirs()
        # control plane: its own mount namespace with /etc/hosts naming the nodes
        self.cp_ns = MountNS("control-plane", self.logdir)
        hosts = os.path.join(w, "hosts")
        with open("/etc/hosts") as f:
            orig = f.read()
        with open(hosts, "w") as f:
            f.write(orig.rstrip("\n") + "\n127.0.0.1 " +
                    " ".join(s.name for s in self.node_specs) + "\n")
        self.cp_ns.bind(hosts, "/etc/hosts")
        # etcd
        ep, pp, mp = free_port(), free_port(), free_port()
        self.start_proc("etcd", ["etcd", "--name", "e", "--data-dir", f"{w}/etcd",
                                 "--listen-client-urls", f"http://127.0.0.1:{ep}",
                                 "--advertise-client-urls", f"http://127.0.0.1:{ep}",
                                 "--listen-peer-urls", f"http://127.0.0.1:{pp}",
                                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
                                 "--initial-cluster", f"e=http://127.0.0.1:{pp}",
                                 "--listen-metrics-urls", f"http://127.0.0.1:{mp}"],
                        ns=self.cp_ns)
        # apiserver
        pki = os.path.join(w, "pki")
        os.makedirs(pki)
        subprocess.run(["openssl", "genrsa", "-out", f"{pki}/sa.key", "2048"], check=True,
                       capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", f"{pki}/sa.key", "-pubout", "-out",
                        f"{pki}/sa.pub"], check=True, capture_output=True)
        self.token = secrets.token_hex(16)
        with open(f"{pki}/tokens.csv", "w") as f:
            f.write(f'{self.token},{ASSIGNER},admin-uid,"system:masters"\n')
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self.kubeconfig = os.path.join(w, "admin.kubeconfig")
        write_kubeconfig(self.kubeconfig, self.server, self.token)
        apiserver = self.start_proc("kube-apiserver", [
            self.bins["kube-apiserver"], f"--etcd-servers=http://127.0.0.1:{ep}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={port}", "--insecure-port=0", f"--cert-dir={pki}",
            f"--token-auth-file={pki}/tokens.csv", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            "--service-cluster-ip-range=10.96.0.0/24", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--kubelet-preferred-address-types=Hostname,InternalIP",
            "--endpoint-reconciler-type=none"], ns=self.cp_ns)
        self.wait(lambda: self.api("GET", "/readyz", timeout=2).status_code == 200, 60,
                  "kube-apiserver /readyz", proc=apiserver)
        self.wait(lambda: self.api("GET", "/api/v1/namespaces/default").status_code == 200, 30,
                  "namespace default")
        # deploy/: the gpusched namespace, CRD and RBAC for real
        for f in ("namespace.yaml", "crd-gpuquota.yaml", "rbac-extender.yaml"):
            self.kubectl("apply", "-f", os.path.join(ROOT, "deploy", f))
        self.wait(lambda: self.api("GET", "/apis/gpusched.io/v1/gpuquotas").status_code == 200,
                  30, "GPUQuota CRD served")
        self._start_webhook()
        self._start_extenders()
        self._start_scheduler()
        for i, spec in enumerate(self.node_specs):
            node = KubeletNode(self, spec, i)
            self.nodes[spec.name] = node
            node.start()

    def _start_webhook(self):
        d = os.path.join(self.workdir, "webhook")
        r = subprocess.run([self.gpusched, "webhook", "gen-certs", "--out", d, "--ip",
                            "127.0.0.1"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        port = free_port()
        self.webhook_port = port
        wh = self.start_proc("webhook", [
            self.gpusched, "webhook", f"--listen=127.0.0.1:{port}",
            f"--tls-cert={d}/tls.crt", f"--tls-key={d}/tls.key",
            f"--kubeconfig={self.kubeconfig}", "--scheduler-name=gpu-scheduler",
            # every component here uses the admin token (deploy/ names the extender's
            # service account); test_webhook.py acts as another user to be refused
            f"--assigners={ASSIGNER}"] + self.names_args())

        def up():
            requests.get(f"https://127.0.0.1:{port}/healthz", verify=f"{d}/ca.crt", timeout=1)
            return True
        self.wait(up, 20, "webhook /healthz", proc=wh)
        self.webhook = wh
        with open(f"{d}/ca-bundle.txt") as f:
            ca = f.read().strip()
        with open(os.path.join(ROOT, "deploy", "webhook.yaml")) as f:
            docs = [x for x in yaml.safe_load_all(f) if x]
        regs = []
        for doc in docs:
            if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                for hook in doc["webhooks"]:
                    path = hook["clientConfig"]["service"].get("path", "/")
                    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                            "caBundle": ca}
                    # the GPU pod label follows --annotation-prefix (docs/resources.md)
                    for e in hook.get("objectSelector", {}).get("matchExpressions", []):
                        e["key"] = e["key"].replace("gpusched.io/", self.annot_prefix, 1)
                regs.append(doc)
        assert len(regs) == 2, "deploy/webhook.yaml: expected two webhook configurations"
        self.apply(regs)

    def _extender_certs(self):
        """extender_tls: two serving pairs for 127.0.0.1 (gen-certs), the first mounted in
        every replica (its own copy, as each pod mounts the Secret), the second for
        rotate_extender_cert; kube-scheduler trusts both CAs. "ca": the second is signed
        by the first's CA and the replicas set tls_ca to it; else each has its own CA
        and forwarding pins keys."""
        d = os.path.join(self.workdir, "extender-tls")
        os.makedirs(d, exist_ok=True)
        self.extender_pairs = []
        for n in ("first", "second"):
            out = os.path.join(d, n)
            same = ["--ca", self.extender_pairs[0]] if self.extender_pairs and \
                self.extender_tls == "ca" else []
            r = subprocess.run([self.gpusched, "webhook", "gen-certs", "--out", out, "--ip",
                                "127.0.0.1", "--service", "gpusched-extender", *same],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            self.extender_pairs.append(out)
        self.extender_ca = os.path.join(d, "cas.crt")
        with open(self.extender_ca, "w") as out:
            for pair in self.extender_pairs:
                with open(os.path.join(pair, "ca.crt")) as f:
                    out.write(f.read())

    def extender_live_dir(self, i):
        return os.path.join(self.workdir, "extender-tls", f"live-{i}")

    def rotate_extender_cert(self, i, pair):
        """Replace replica i's mounted pair with pair (a directory of tls.crt and
        tls.key), each file renamed into place, as kubelet updates a Secret volume."""
        live = self.extender_live_dir(i)
        for f in ("tls.key", "tls.crt"):
            shutil.copy(os.path.join(pair, f), os.path.join(live, f + ".tmp"))
            os.replace(os.path.join(live, f + ".tmp"), os.path.join(live, f))

    def extender_url(self, i):
        return f"{'https' if self.extender_tls else 'http'}://{self.extender_addr(i)}"

    def _start_extenders(self):
        with open(os.path.join(ROOT, "deploy", "extender.yaml")) as f:
            docs = [x for x in yaml.safe_load_all(f) if x]
        cm = next(x for x in docs if x["kind"] == "ConfigMap")
        base = yaml.safe_load(cm["data"]["extender.yaml"])
        backends = []
        self.extenders = []
        if self.extender_tls:
            self._extender_certs()
        for i in range(self.extender_replicas):
            port = free_port()
            cfg = dict(base)
            if self.extender_tls:
                live = self.extender_live_dir(i)
                os.makedirs(live, exist_ok=True)
                for f in ("tls.crt", "tls.key"):
                    shutil.copy(os.path.join(self.extender_pairs[0], f), live)
                cfg.update({"tls_cert": os.path.join(live, "tls.crt"),
                            "tls_key": os.path.join(live, "tls.key")})
                if self.extender_tls == "ca":
                    cfg["tls_ca"] = os.path.join(self.extender_pairs[0], "ca.crt")
            cfg.pop("in_cluster", None)
            cfg.update({"listen": f"127.0.0.1:{port}", "kubeconfig": self.kubeconfig,
                        # NAME@HOST:PORT, as deploy/ sets $(POD_NAME)@$(POD_IP):8888:
                        # a non-leader forwards /bind to the address (ext/forward.h)
                        "identity": f"extender-{i}@127.0.0.1:{port}",
                        "lease_namespace": "gpusched",
                        "log_format": "text"})
            cfg.update(self.names_config())
            extra = self.extender_config
            cfg.update(extra(i, port) if callable(extra) else extra)
            path = os.path.join(self.workdir, f"extender-{i}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(cfg, f)
            p = self.start_proc(f"extender-{i}", [self.gpusched, "extender", "--config", path])
            self.extenders.append(p)
            backends.append((f"extender-{i}", f"127.0.0.1:{port}"))
        for (ident, addr), p in zip(backends, self.extenders):
            self.wait(lambda: ExtenderProxy.ready(addr, self.extender_tls), 30, f"{ident} /readyz",
                      proc=p)
        self.wait(self.lease_holder, 30, "an extender holds the Lease")
        self.proxy = ExtenderProxy(backends, self.proxy_mode, self.lease_holder,
                                   tls=self.extender_tls)

    def start_controller_manager(self, controllers):
        """kube-controller-manager running only `controllers` (e.g. ["deployment",
        "replicaset", "job", "statefulset"]): the workload controllers that make the
        pods users run, none that needs a service-account key or touches Nodes. Stop
        it with .stop() on the returned Proc."""
        port = free_port()
        p = self.start_proc("kube-controller-manager", [
            self.bins["kube-controller-manager"], f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--port=0",
            "--leader-elect=false", "--controllers=" + ",".join(controllers),
            "--concurrent-deployment-syncs=2", "--v=1"], ns=self.cp_ns)

        def up():
            return requests.get(f"https://127.0.0.1:{port}/healthz", verify=False,
                                timeout=1).status_code == 200
        self.wait(up, 30, "kube-controller-manager /healthz", proc=p)
        return p

    def lease_holder(self):
        r = self.api("GET", "/apis/coordination.k8s.io/v1/namespaces/gpusched/leases/"
                            "gpusched-extender")
        if r.status_code != 200:
            return None
        return r.json().get("spec", {}).get("holderIdentity")

    def _start_scheduler(self, edit=None):
        """kube-scheduler with the shipped v1beta1 config (passed through edit(cfg), which
        changes the dict in place); returns once it is healthy and leads."""
        hz, mz, sp = free_port(), free_port(), free_port()
        cfg = scheduler_config_v1beta1(self.proxy.url, self.kubeconfig, hz, mz)
        if self.extender_tls:  # as docs/deploy.md says for HTTPS
            with open(self.extender_ca, "rb") as f:
                ca = base64.b64encode(f.read()).decode()
            for ext in cfg.get("extenders", []):
                ext["enableHTTPS"] = True
                ext["tlsConfig"] = {"caData": ca}
        for ext in cfg.get("extenders", []):  # the names the extender manages
            for r in ext.get("managedResources", []):
                if r["name"].startswith("nvidia.com/"):
                    r["name"] = self.res_prefix + r["name"][len("nvidia.com/"):]
        if edit:
            edit(cfg)
        self.scheduler_cfg = cfg
        path = os.path.join(self.workdir, "scheduler-config.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        self.scheduler = self.start_proc("kube-scheduler", [
            self.bins["kube-scheduler"], f"--config={path}", "--bind-address=127.0.0.1",
            f"--secure-port={sp}", "--port=0", "--v=2"])
        self.scheduler_metrics_port = mz

        def leads():
            if requests.get(f"http://127.0.0.1:{hz}/healthz", timeout=1).status_code != 200:
                return False
            r = self.api("GET", "/apis/coordination.k8s.io/v1/namespaces/gpusched/leases/"
                                "gpu-scheduler")
            return r.status_code == 200
        self.wait(leads, 30, "kube-scheduler healthy and leading", proc=self.scheduler)

    # -- stop ------------------------------------------------------------------
    def dump_logs(self, n=30):
        for p in self.procs:
            print(f"---- {p.name} ({p.log_path})\n{p.tail(n)}")
        for node in self.nodes.values():
            for p in (node.containerd, node.kubelet, node.dp):
                if p:
                    print(f"---- {p.name} ({p.log_path})\n{p.tail(n)}")

    def stop(self, keep_workdir=False):
        errors = []
        if self.nodes and getattr(self, "token", None):
            # let each kubelet stop its pods (CNI DEL removes the veths)
            with contextlib.suppress(Exception):
                r = self.api("GET", "/api/v1/pods", timeout=5)
                for p in r.json().get("items", []):
                    if p["spec"].get("nodeName") in self.nodes:
                        self.api("DELETE", f"/api/v1/namespaces/{p['metadata']['namespace']}"
                                           f"/pods/{p['metadata']['name']}",
                                 body={"gracePeriodSeconds": 0}, timeout=5)
                deadline = time.time() + 15
                while time.time() < deadline:
                    if all(not n.ctr("tasks", "ls", "-q").stdout.split()
                           for n in self.nodes.values() if n.containerd and n.containerd.alive()):
                        break
                    time.sleep(0.3)
        for node in reversed(list(self.nodes.values())):
            try:
                node.stop()
            except Exception as e:  # keep tearing down the rest
                errors.append(f"{node.name}: {e}")
        if self.proxy:
            self.proxy.close()
        for p in reversed(self.procs):
            p.stop()
        if self.cp_ns:
            self.cp_ns.close(self.workdir)
        # runc removes each container's cgroup; containerd's parent for them,
        # <controller>/k8s.io, stays: remove it when this run created it and no other
        # run's containers are in it (rmdir fails on a non-empty cgroup)
        for d in _cgroup_dirs() - getattr(self, "cgroups_before", _cgroup_dirs()):
            if d.endswith("/" + CGROUP_PARENT):
                with contextlib.suppress(OSError):
                    os.rmdir("/sys/fs/cgroup/" + d)
        if self.sysctls_held:
            self.sysctls_held = False
            sysctls_release()
        keep_logs = os.environ.get("GPUSCHED_E2E_LOGS")
        if keep_logs and os.path.isdir(self.logdir):  # docs/e2e.md: logs kept for a look
            with contextlib.suppress(OSError):
                shutil.copytree(self.logdir, os.path.join(keep_logs,
                                                          os.path.basename(self.workdir)))
        if not keep_workdir:
            with open("/proc/self/mountinfo") as f:
                busy = [l.split()[4] for l in f if l.split()[4].startswith(self.workdir)]
            if busy:
                errors.append(f"not removing {self.workdir}: still mounted: {busy}")
            else:
                subprocess.run(["rm", "-rf", "--one-file-system", self.workdir])
        if errors:
            raise RuntimeError("; ".join(errors))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- additions for the scale, HA, requeue and preemption scenarios ---------
    def restart_scheduler(self, edit=None):
        """Stop kube-scheduler and start it again with the harness's v1beta1 config passed
        through edit(cfg) (which changes the dict in place). The old scheduler's Lease is
        deleted so the new one leads at once instead of after the lease period."""
        self.scheduler.stop()
        self.api("DELETE", "/apis/coordination.k8s.io/v1/namespaces/gpusched/leases/"
                           "gpu-scheduler")
        self._start_scheduler(edit)

    def force_delete_all(self, ns, selector=None, timeout=60):
        """Delete every pod of ns (matching selector) with grace 0 in one collection call
        and wait until none is left: fast for hundreds of pods on API-only nodes."""
        params = {"gracePeriodSeconds": "0"}
        if selector:
            params["labelSelector"] = selector
        r = self.api("DELETE", f"/api/v1/namespaces/{ns}/pods", params=params, timeout=120)
        if r.status_code not in (200, 202):
            raise AssertionError(f"deleting pods: {r.status_code} {r.text[:300]}")
        self.wait(lambda: not self.pods(ns, selector), timeout, f"pods of {ns} deleted")

    def extender_addr(self, i):
        return self.proxy.backends[i][1]

    def kill_extender(self, i, sig=signal.SIGKILL):
        """Kill replica i (default SIGKILL: no lease release, no goodbye)."""
        self.extenders[i].stop(timeout=5, sig=sig)

    def restart_extender(self, i):
        """Start replica i again with its config (same identity and port); waits until it
        is ready (state rebuilt from the API server)."""
        path = os.path.join(self.workdir, f"extender-{i}.yaml")
        p = self.start_proc(f"extender-{i}", [self.gpusched, "extender", "--config", path])
        self.extenders[i] = p
        addr = self.extender_addr(i)
        self.wait(lambda: ExtenderProxy.ready(addr, self.extender_tls), 30,
                  f"extender-{i} /readyz", proc=p)
        return p

    def extender_metric(self, i, name, labels=None):
        """Sum of metric `name` (samples whose labels include `labels`) of replica i."""
        r = requests.get(f"{self.extender_url(i)}/metrics", timeout=5, verify=False)
        total = 0.0
        for line in r.text.splitlines():
            if not (line.startswith(name + " ") or line.startswith(name + "{")):
                continue
            if labels and not all(f'{k}="{v}"' in line for k, v in labels.items()):
                continue
            total += float(line.rsplit(" ", 1)[1])
        return total
