"""Bursts on one node (issue 12, problems 4 and 5): 2, 5 and 20 GPU pods of mixed
shapes (whole, shared) created at once for e2e-node-a (4 GPUs), with the device
plugin's default flags (--replicas 1) and with deploy/device-plugin.yaml's.

Checked: no pod fails admission (phase Failed, UnexpectedAdmissionError), none
starts with another pod's GPUs or limits (each container's environment equals its
own pod's assignment), none is stuck (every pod bound to the node runs; pods are
placed while kubelet has devices for them), and no pod is bound where kubelet has
no device left (bound pods never exceed the node's nvidia.com/gpu allocatable)."""
import time

import pytest

from conftest import NODE_A, NS, READY, check_pod_gpus, deploy_dp_args, gpu_pod


def shapes(n):
    """n pods: whole 1-GPU pods (one per ten, at least one) and shared 8Gi + 10 % pods.
    Everything fits the node's 4 x 80 GB by GPU memory and compute."""
    whole = max(1, n // 10)
    out = [(f"burst-{n}-w{i}", {"nvidia.com/gpu": "1"}) for i in range(whole)]
    out += [(f"burst-{n}-s{i}", {"nvidia.com/gpu": "1", "nvidia.com/gpu-memory": "8Gi",
                                 "nvidia.com/gpu-cores": "10"}) for i in range(n - whole)]
    return out


FLAGS = {"default": [], "deploy": None}   # None: deploy/device-plugin.yaml's


@pytest.fixture(scope="module", params=list(FLAGS))
def node_a(request, cluster):
    flags = FLAGS[request.param]
    if flags is None:
        flags = deploy_dp_args()
    node = cluster.node(NODE_A)
    if node.dp_args != flags:
        node.restart_device_plugin(flags)
    yield node, request.param
    # leave deploy/'s flags behind, as the session started with them
    if node.dp_args != deploy_dp_args():
        node.restart_device_plugin(deploy_dp_args())


@pytest.mark.parametrize("n", [2, 5, 20])
def test_burst(cluster, node_a, n):
    node, flags = node_a
    devices = int(node.allocatable()["nvidia.com/gpu"])
    objs = [gpu_pod(name, lim, node=NODE_A) for name, lim in shapes(n)]
    names = [o["metadata"]["name"] for o in objs]
    try:
        cluster.apply(objs)   # one request: the pods arrive together
        expect_bound = min(n, devices)
        state = {}

        def settled():
            bound, running, problems = [], [], []
            for nm in names:
                p = cluster.pod(NS, nm)
                if p is None:
                    problems.append(f"{nm} vanished")
                    continue
                st = p["status"]
                if st.get("phase") == "Failed":
                    problems.append(f"{nm} Failed: {st.get('reason')}: {st.get('message')}")
                if p["spec"].get("nodeName"):
                    bound.append(nm)
                    if st.get("phase") == "Running" and READY in (
                            cluster.pod_log(NS, nm, "main") or ""):
                        running.append(nm)
            state.update(bound=bound, running=running, problems=problems)
            if problems:
                raise AssertionError("; ".join(problems))
            return len(bound) == expect_bound and len(running) == len(bound)
        try:
            cluster.wait(settled, 90 if n == 20 else 60,
                         f"{expect_bound} of {n} pods bound and running ({flags} flags, "
                         f"{devices} devices)", interval=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}\nstate: {state}\n{cluster.describe_pods(NS, names)}")
        # bound pods never exceed what kubelet can give; the rest wait unbound
        time.sleep(2)
        bound = [nm for nm in names if cluster.pod(NS, nm)["spec"].get("nodeName")]
        assert len(bound) <= devices, f"{len(bound)} pods bound to {devices} devices"
        whole_seen, shared_seen = {}, {}
        for nm in bound:
            p = cluster.pod(NS, nm)
            assert p["status"]["phase"] == "Running", cluster.describe_pods(NS, [nm])
            lim = p["spec"]["containers"][0]["resources"]["limits"]
            shared = "nvidia.com/gpu-memory" in lim
            uuids = check_pod_gpus(cluster, p, memory_mib=8192 if shared else None,
                                   milli=100 if shared else None)
            if shared:
                shared_seen.update({u: nm for u in uuids})
            else:
                for u in uuids:
                    assert u not in whole_seen, f"{u} given to {whole_seen.get(u)} and {nm}"
                    whole_seen[u] = nm
        both = set(whole_seen) & set(shared_seen)
        assert not both, "GPUs both whole and shared: " + \
            str([(u, whole_seen[u], shared_seen[u]) for u in both])
        for nm in names:
            if nm not in bound:
                p = cluster.pod(NS, nm)
                assert p["status"]["phase"] == "Pending", cluster.describe_pods(NS, [nm])
    finally:
        cluster.delete_pods(NS, names, timeout=90)
