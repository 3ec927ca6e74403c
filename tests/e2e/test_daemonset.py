"""The device plugin as users run it: `make image`'s image, imported into the
node's containerd, running deploy/device-plugin.yaml's DaemonSet pod on the
real kubelet (issue 16).

The node of this module's cluster has no device plugin of the harness's own:
the only plugin is the container. The test
  - imports build/image/gpusched-image.tar with the README's `ctr images import`;
  - applies deploy/device-plugin.yaml (ServiceAccount, ClusterRole, binding,
    DaemonSet) with what this loopback cluster lacks substituted (below);
  - plays the DaemonSet controller (no kube-controller-manager runs here): a
    pod from the template per matching node, owned by the DaemonSet, with the
    controller's node affinity and tolerations, bound to its node as the
    default scheduler would; recreated when it disappears;
  - sees it register with kubelet (allocatable nvidia.com/gpu = GPUs x
    --replicas) and publish the inventory through the API with the
    ServiceAccount's RBAC; a GPU pod scheduled by the extender starts with its
    assigned GPUs;
  - deletes the plugin pod: the controller recreates it, the node re-advertises,
    the running GPU pod keeps its GPUs, and a new GPU pod gets the other ones.

Substitutions, each for something this test cluster has not (no
kube-controller-manager, no kube-proxy, no GPU, no NVIDIA runtime):
  - RuntimeClass `nvidia` with handler `runc` (the NVIDIA runtime's place);
  - `--fake-gpus` with the node's fake-GPU file mounted (no NVML here);
  - hostNetwork and KUBERNETES_SERVICE_HOST/PORT = the API server on loopback
    (no Service network); the metrics port made free;
  - the ServiceAccount's token (TokenRequest API) and the API server's CA in a
    Secret mounted where the ServiceAccount admission plugin would mount them.
The image, command, paths, user, security context, RBAC and the rest of the
DaemonSet are deploy/'s.
"""
import copy
import json
import os
import re
import subprocess
import threading
import time

import pytest
import yaml

import kcluster
from conftest import READY, check_pod_gpus, gpu_pod, split_uuids

NODE = "e2e-node-ds"
NGPUS = 4
DS_NS = "kube-system"
IMAGE_REF = "docker.io/library/gpusched:latest"     # what `image: gpusched:latest` resolves to
TOKEN_SECRET = "gpusched-device-plugin-e2e-token"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def image_tar():
    """build/image/gpusched-image.tar, (re)built by scripts/make-image when it is
    missing or older than the binary under test."""
    build = os.path.dirname(os.path.abspath(
        os.environ.get("GPUSCHED_BIN", os.path.join(kcluster.ROOT, "build", "gpusched"))))
    tar = os.path.join(build, "image", "gpusched-image.tar")
    binary = os.path.join(build, "gpusched")
    if not os.path.exists(tar) or os.path.getmtime(tar) < os.path.getmtime(binary):
        r = subprocess.run([os.path.join(kcluster.ROOT, "scripts", "make-image"), build],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            pytest.fail(f"scripts/make-image failed (scripts/deps installs its tools):\n"
                        f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return tar


def deploy_docs():
    with open(os.path.join(kcluster.ROOT, "deploy", "device-plugin.yaml")) as f:
        return [d for d in yaml.safe_load_all(f) if d]


@pytest.fixture(scope="module")
def ds_cluster(host_clean):
    bins, workdirs = host_clean
    tar = image_tar()
    spec = kcluster.NodeSpec(NODE, kcluster.fake_gpus_doc(NGPUS, tag=0xd5))
    original = kcluster.KubeletNode.start_device_plugin

    def start_device_plugin(node):       # this node's plugin is the DaemonSet's pod
        if node.name != NODE:
            original(node)
    c = kcluster.Cluster(os.environ.get("GPUSCHED_BIN", os.path.join(kcluster.ROOT, "build",
                                                                      "gpusched")),
                         nodes=[spec], extender_replicas=1, bins=bins)
    workdirs.append(c.workdir)
    kcluster.KubeletNode.start_device_plugin = start_device_plugin
    try:
        c.start()
    finally:
        kcluster.KubeletNode.start_device_plugin = original
    c.image_tar = tar
    yield c
    c.stop()


# ---- the DaemonSet controller's part ---------------------------------------------

DS_TOLERATIONS = [   # what the DaemonSet controller adds to every pod (1.20)
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


class DaemonSetController:
    """One pod of the DaemonSet on every node its nodeSelector matches, made as
    kube-controller-manager's DaemonSet controller makes it, bound as the default
    scheduler binds it; a pod that is gone is replaced."""

    def __init__(self, cluster, ns, name):
        self.c, self.ns, self.name = cluster, ns, name
        self.created = []
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def ds(self):
        r = self.c.api("GET", f"/apis/apps/v1/namespaces/{self.ns}/daemonsets/{self.name}")
        r.raise_for_status()
        return r.json()

    def pods(self, ds):
        sel = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
        r = self.c.api("GET", f"/api/v1/namespaces/{self.ns}/pods",
                       params={"labelSelector": sel})
        r.raise_for_status()
        return [p for p in r.json()["items"]
                if any(o.get("uid") == ds["metadata"]["uid"]
                       for o in p["metadata"].get("ownerReferences", []))]

    def nodes(self, ds):
        want = ds["spec"]["template"]["spec"].get("nodeSelector", {})
        r = self.c.api("GET", "/api/v1/nodes")
        r.raise_for_status()
        return [n["metadata"]["name"] for n in r.json()["items"]
                if all(n["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]

    def pod_for(self, ds, node):
        tmpl = copy.deepcopy(ds["spec"]["template"])
        meta = tmpl.get("metadata", {})
        meta["labels"] = dict(meta.get("labels", {}),
                              **{"pod-template-generation": str(ds["metadata"]["generation"])})
        meta.update({"generateName": self.name + "-", "namespace": self.ns,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                          "name": self.name, "uid": ds["metadata"]["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]})
        spec = tmpl["spec"]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        tols = spec.setdefault("tolerations", [])
        extra = list(DS_TOLERATIONS)
        if spec.get("hostNetwork"):
            extra.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                          "effect": "NoSchedule"})
        tols.extend(t for t in extra if t not in tols)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def reconcile(self):
        # as in 1.20's podsShouldBeOnNode: a node with a daemon pod, even a
        # terminating one, gets no new pod until the old one is gone
        ds = self.ds()
        have = {p["spec"].get("nodeName") or "" for p in self.pods(ds)}
        for node in self.nodes(ds):
            if node in have:
                continue
            r = self.c.api("POST", f"/api/v1/namespaces/{self.ns}/pods", self.pod_for(ds, node))
            r.raise_for_status()
            name = r.json()["metadata"]["name"]
            b = self.c.api("POST", f"/api/v1/namespaces/{self.ns}/pods/{name}/binding",
                           {"apiVersion": "v1", "kind": "Binding",
                            "metadata": {"name": name, "namespace": self.ns},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            b.raise_for_status()
            self.created.append(name)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as e:     # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            self._stop.wait(0.5)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(5)


# ---- the DaemonSet as deploy/ ships it, for this cluster -----------------------------

def apiserver_ca(c):
    with open(os.path.join(c.workdir, "pki", "apiserver.crt")) as f:
        return f.read()


def service_account_secret(c, sa):
    """The ServiceAccount's token from the TokenRequest API, with the API server's CA
    and the namespace: what the ServiceAccount admission plugin mounts in a pod."""
    r = c.api("POST", f"/api/v1/namespaces/{DS_NS}/serviceaccounts/{sa}/token",
              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 7200}})
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": TOKEN_SECRET, "namespace": DS_NS},
            "stringData": {"token": token, "ca.crt": apiserver_ca(c), "namespace": DS_NS}}


def substitute(ds, node, metrics_port, api_port):
    """deploy/'s DaemonSet with this cluster's substitutions (module docstring)."""
    ds = copy.deepcopy(ds)
    spec = ds["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    (ctr,) = spec["containers"]
    assert ctr["image"] == "gpusched:latest", ctr["image"]
    args = [a for a in ctr["args"] if not a.startswith("--metrics-listen")]
    args += [f"--metrics-listen=0.0.0.0:{metrics_port}",
             "--fake-gpus=/etc/gpusched/fake-gpus.json"]
    ctr["args"] = args
    for p in ctr.get("ports", []):
        if p["name"] == "metrics":
            p["containerPort"] = metrics_port
    ctr["env"] = ctr.get("env", []) + [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)}]
    ctr["volumeMounts"] = ctr.get("volumeMounts", []) + [
        {"name": "fake-gpus", "mountPath": "/etc/gpusched/fake-gpus.json", "readOnly": True},
        {"name": "sa-token", "mountPath": SA_DIR, "readOnly": True}]
    spec["volumes"] = spec.get("volumes", []) + [
        {"name": "fake-gpus", "hostPath": {"path": node.fake_gpus_path, "type": "File"}},
        {"name": "sa-token", "secret": {"secretName": TOKEN_SECRET}}]
    return ds


def inventory(c, node):
    n = c.api("GET", f"/api/v1/nodes/{node}").json()
    raw = n["metadata"].get("annotations", {}).get(kcluster.PREFIX + "gpu-inventory")
    return json.loads(raw) if raw else None


def ds_pods(c):
    r = c.api("GET", f"/api/v1/namespaces/{DS_NS}/pods",
              params={"labelSelector": "app.kubernetes.io/name=gpusched-device-plugin"})
    return [p for p in r.json()["items"] if not p["metadata"].get("deletionTimestamp")]


def logged_replicas(c, plugin):
    """Devices per GPU from the plugin pod's own log, or None before it says."""
    log = c.pod_log(DS_NS, plugin["metadata"]["name"], "device-plugin") or ""
    m = kcluster.DP_REPLICAS_LINE.search(log.encode())
    return int(m.group(1)) if m else None


def running_plugin(c, exclude=()):
    """The DaemonSet pod on NODE, Running and ready, not one of `exclude`."""
    for p in ds_pods(c):
        if (p["metadata"]["name"] not in exclude and p["spec"].get("nodeName") == NODE and
                p["status"].get("phase") == "Running"):
            return p
    return None


def plugin_diagnostics(c, ctl):
    """Every plugin pod the controller made: its state, events and log tail."""
    out = [f"controller errors: {ctl.errors}"]
    for name in ctl.created:
        out.append(c.describe_pods(DS_NS, [name]))
        log = c.pod_log(DS_NS, name, "device-plugin")
        out.append(f"{name} log: " + ("\n".join((log or "").splitlines()[-15:]) or "(none)"))
    return "\n".join(out)


def test_device_plugin_daemonset_on_a_real_kubelet(ds_cluster):
    c = ds_cluster
    node = c.node(NODE)
    # 1. the image, imported as README says (ctr, the node's containerd, k8s.io namespace)
    r = node.ctr("images", "import", c.image_tar)
    assert r.returncode == 0, r.stderr
    assert IMAGE_REF in node.ctr("images", "ls", "-q").stdout.split()

    # 2. deploy/device-plugin.yaml, substituted for this cluster
    docs = deploy_docs()
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    c.apply([{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
              "metadata": {"name": ds["spec"]["template"]["spec"]["runtimeClassName"]},
              "handler": "runc"}])
    c.apply([d for d in docs if d["kind"] != "DaemonSet"])
    c.apply([service_account_secret(c, sa)])
    api_port = int(c.server.rsplit(":", 1)[1])
    c.apply([substitute(ds, node, kcluster.free_port(), api_port)])

    ctl = DaemonSetController(c, DS_NS, ds["metadata"]["name"]).start()
    gpu_pods = []
    try:
        # 3. it runs, registers with kubelet, publishes the inventory with its RBAC
        plugin = c.wait(lambda: running_plugin(c), 90, "device-plugin pod Running")
        # devices per GPU as the plugin in the pod says it chose them: deploy/'s --replicas
        per_gpu = c.wait(lambda: logged_replicas(c, plugin), 60,
                         "the plugin's 'devices per GPU' line in its pod log")
        flags = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--replicas={per_gpu}" in flags, (per_gpu, flags)
        want = str(NGPUS * per_gpu)
        c.wait(lambda: node.allocatable().get("nvidia.com/gpu") == want, 60,
               f"{NODE} advertises nvidia.com/gpu={want} from the pod")
        inv = c.wait(lambda: inventory(c, NODE), 30, "inventory annotation from the pod")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", inv["updated_at"]), inv
        assert sorted(g["uuid"] for g in inv["gpus"]) == \
            sorted(g["uuid"] for g in node.spec.gpus["gpus"])
        log = c.pod_log(DS_NS, plugin["metadata"]["name"], "device-plugin") or ""
        assert "registered" in log, log[-2000:]
        statuses = plugin["status"]["containerStatuses"]
        assert statuses[0]["image"].endswith("gpusched:latest"), statuses
        assert plugin["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"

        # 4. a GPU pod scheduled by the extender starts with its GPUs
        c.apply([gpu_pod("ds-gpu-1", {"nvidia.com/gpu": 1})])
        gpu_pods.append("ds-gpu-1")
        p1 = c.wait_pods("default", ["ds-gpu-1"], timeout=60,
                         ready_log=READY)["ds-gpu-1"]
        assert p1["spec"]["schedulerName"] == "gpu-scheduler"
        first = check_pod_gpus(c, p1)
        cid1 = p1["status"]["containerStatuses"][0]["containerID"]

        # 5. delete the plugin pod; the controller recreates it; nothing is lost
        before = inv["updated_at"]
        time.sleep(1.1)                 # updated_at has whole seconds
        old = plugin["metadata"]["name"]
        try:
            c.delete_pods(DS_NS, [old], grace=30, timeout=60)
        except AssertionError as e:
            # kubelet 1.20 confirms a graceful deletion at a status sync once the
            # pod's resources are reclaimed; once in CI it had not after 60 s,
            # though the container had stopped within a second. What is tested
            # here is the pod that replaces it: delete it as an operator would.
            print(f"graceful deletion not confirmed ({e}); deleting with grace 0")
            c.delete_pods(DS_NS, [old], grace=0, timeout=60)
        new = c.wait(lambda: running_plugin(c, exclude=[old]), 90, "recreated plugin pod Running")
        assert new["metadata"]["name"] != old
        c.wait(lambda: (inventory(c, NODE) or {}).get("updated_at", "") > before, 60,
               "the new pod publishes the inventory again")
        c.wait(lambda: node.allocatable().get("nvidia.com/gpu") == want, 60,
               f"{NODE} re-advertises nvidia.com/gpu={want}")
        log = c.pod_log(DS_NS, new["metadata"]["name"], "device-plugin") or ""
        assert "registered" in log, log[-2000:]

        p1_after = c.pod("default", "ds-gpu-1")
        assert p1_after["status"]["phase"] == "Running"
        st = p1_after["status"]["containerStatuses"][0]
        assert st["containerID"] == cid1 and st["restartCount"] == 0
        assert p1_after["metadata"]["annotations"] == p1["metadata"]["annotations"]
        assert check_pod_gpus(c, p1_after) == first

        # the new plugin serves Allocate, and around the running pod's GPUs
        c.apply([gpu_pod("ds-gpu-2", {"nvidia.com/gpu": NGPUS - 1})])
        gpu_pods.append("ds-gpu-2")
        p2 = c.wait_pods("default", ["ds-gpu-2"], timeout=60,
                         ready_log=READY)["ds-gpu-2"]
        second = check_pod_gpus(c, p2)
        assert not set(first) & set(second), (first, second)
        assert sorted(first + second) == sorted(g["uuid"] for g in node.spec.gpus["gpus"])
        assert split_uuids(p2)["main"] == second
        assert not ctl.errors, ctl.errors
    except AssertionError as e:
        c.dump_logs()
        raise AssertionError(f"{e}\n{plugin_diagnostics(c, ctl)}") from None
    finally:
        ctl.stop()
        if gpu_pods:
            c.delete_pods("default", gpu_pods)
