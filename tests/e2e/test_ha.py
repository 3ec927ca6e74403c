"""HA (issue 12): two extender replicas with Lease election behind the one URL
kube-scheduler calls, routed as deploy/extender.yaml's Service does (the proxy's
"service" mode: every ready replica in turn), each replica's Lease identity
carrying its address as deploy/ sets it ($(POD_NAME)@$(POD_IP):8888).

1. Pods arriving with both replicas up are all placed on their first attempt: the
   replica that does not lead hands /bind to the leader (ext/forward.h) instead of
   answering 503 (which made every other pod wait out kube-scheduler's backoff),
   and /filter and /prioritize too: answered from its own view, which trails the
   leader's by the watch's delay, they sent binds to nodes the leader had just
   filled (shared pods packed 8 to a node use up its 8 kubelet devices), refused
   409 (CI, 1 run in 8 here under load).
2. The leader is SIGKILLed while pods keep arriving: every pod ends placed, none
   twice (one Scheduled event and one assignment each), no GPU oversubscribed; the
   survivor takes the Lease within its duration.
3. The killed replica comes back: its state is rebuilt from the API server (its
   /debug view of pods bound by the other replica equals their annotations), it
   follows and forwards, and more pods are placed without oversubscription. Its
   learned target workload equals the leader's, the pods that ended before it
   came back included (read from the ConfigMap the leader saves them in).

API-only nodes; one cluster for the module (~1 min, most of it the lease period)."""
import json
import threading
import time

import pytest
import requests

import scale

NS = "default"
GPU_NODES, GPUS = 16, 8


@pytest.fixture(scope="module")
def ha(host_clean):
    # the harness's identities are NAME@127.0.0.1:PORT, as deploy/ sets them
    # the leader saves the learned workload of ended pods every second (deploy/: 60)
    with scale.api_only_cluster(host_clean, extender_replicas=2, proxy_mode="service",
                                extender_config={"workload_save": 1}) as c:
        c.add_api_nodes(30, gpus=0, prefix="cpu")
        c.add_api_nodes(GPU_NODES, gpus=GPUS, prefix="gpu")
        yield c


def leader_index(c):
    holder = c.lease_holder() or ""
    for i, (ident, _) in enumerate(c.proxy.backends):
        if holder.startswith(ident + "@"):
            return i
    return None


def all_bound(c, names, timeout, what):
    state = {}

    def done():
        pods = scale.pods_by_name(c, NS)
        state["left"] = [n for n in names if not pods.get(n, {}).get("spec", {}).get("nodeName")]
        return not state["left"]
    try:
        c.wait(done, timeout, what, interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}: {c.describe_pods(NS, state.get('left', [])[:3])}")


def check_once(c, names):
    """Every pod placed once: one Scheduled event each, assignments consistent."""
    pods = scale.pods_by_name(c, NS)
    scale.check_assignments(pods, scale.inventories(c, "gpu"))
    r = c.api("GET", f"/api/v1/namespaces/{NS}/events",
              params={"fieldSelector": "reason=Scheduled"})
    scheduled = {}
    for e in r.json()["items"]:
        n = e["involvedObject"]["name"]
        scheduled[n] = scheduled.get(n, 0) + (e.get("count") or 1)
    twice = {n: k for n, k in scheduled.items() if n in names and k != 1}
    assert not twice, f"pods scheduled more than once: {twice}"
    return pods


def same_workload(c, at_least, what):
    """Both replicas' GET /debug/workload agree (and count at least at_least pods)."""
    state = {}

    def same():
        state["w"] = [requests.get(f"http://{addr}/debug/workload", timeout=5).json()
                      for _ident, addr in c.proxy.backends]
        return state["w"][0] == state["w"][1] and state["w"][0]["pods"] >= at_least
    try:
        c.wait(same, 20, what)
    except AssertionError as e:
        raise AssertionError(f"{e}: {state.get('w')}")


def saved_ended(c):
    """Pods that have ended in the ConfigMap the leader saves (None: not saved)."""
    r = c.api("GET", "/api/v1/namespaces/gpusched/configmaps/gpusched-workload")
    return json.loads(r.json()["data"]["workload.json"])["pods"] if r.status_code == 200 \
        else None


def test_failover(ha):
    c = ha
    lead = leader_index(c)
    assert lead is not None, c.lease_holder()
    follower = 1 - lead
    # 1. both up: binds through the follower are forwarded, none refused
    first = scale.create_pods(c, [scale.pod(f"ha-a{i}", scale.WHOLE1 if i % 2 else
                                            scale.SHARED10) for i in range(20)])
    all_bound(c, first, 60, "first wave bound")
    time.sleep(1)
    failed = scale.failed_scheduling(c, NS, set(first))
    if failed:  # why: a /filter whose wait for the previous /bind ran out, or one
        # the follower answered from its own view (the leader did not answer)
        why = {"leader's /filter waits that ran out": c.extender_metric(
                   lead, "gpusched_extender_filter_wait_seconds_count", {"outcome": "timeout"}),
               "verbs the follower answered itself": c.extender_metric(
                   follower, "gpusched_extender_forwarded_total", {"code": "0"})}
        raise AssertionError(f"with both replicas up, pods were refused: {failed} ({why})")
    for verb in ("filter", "bind"):
        fwd = c.extender_metric(follower, "gpusched_extender_forwarded_total",
                                {"verb": verb, "code": "200"})
        assert fwd > 0, f"the follower forwarded no /{verb}: the proxy sent it none?"
    # the follower learned the same target workload (cpufrag's classes) from the pods'
    # annotations as the leader did from its binds, so a failover does not change it
    same_workload(c, len(first), "both replicas' learned workloads to agree")

    # 2. SIGKILL the leader while pods keep arriving
    names = []
    stop = threading.Event()

    def arrive():
        k = 0
        while not stop.is_set() and k < 60:
            names.extend(scale.create_pods(c, [scale.pod(f"ha-b{k}", scale.WHOLE1 if k % 3
                                                         else scale.SHARED4)]))
            k += 1
            time.sleep(0.1)
    t = threading.Thread(target=arrive)
    t.start()
    try:
        time.sleep(1.5)
        t_kill = time.time()
        c.kill_extender(lead)
        c.wait(lambda: leader_index(c) == follower, 40, "the survivor takes the Lease",
               interval=0.2)
        took = time.time() - t_kill
    finally:
        stop.set()
        t.join()
    all_bound(c, names, 120, f"{len(names)} pods arriving across the failover bound")
    print(f"HA: survivor led {took:.1f} s after the SIGKILL; {len(names)} pods across it "
          f"all bound {time.time() - t_kill:.1f} s after it")
    check_once(c, first + names)
    # the first wave ends: the survivor still counts it and saves it for later replicas
    c.delete_pods(NS, first)
    c.wait(lambda: saved_ended(c) == len(first), 20, "the leader saves the ended pods",
           interval=0.5)

    # 3. the killed replica comes back: rebuilt from the API server, follows, forwards
    c.restart_extender(lead)
    # ... and learns what the survivor learned: the ended pods from the ConfigMap, the
    # live ones from their annotations (without the save it would count only the live)
    same_workload(c, len(first) + len(names), "the restarted replica's learned workload "
                  "to equal the leader's")
    addr = c.extender_addr(lead)
    pods = scale.pods_by_name(c, NS)
    for n in (names[0], names[-1]):
        d = requests.get(f"http://{addr}/debug/pods/{NS}/{n}", timeout=5).json()
        ann = pods[n]["metadata"]["annotations"]
        assert d["allocation"][scale.PREFIX + "gpu-uuids"] == ann[scale.PREFIX + "gpu-uuids"], \
            (n, d, ann)
    assert leader_index(c) == follower
    third = scale.create_pods(c, [scale.pod(f"ha-c{i}", scale.WHOLE1) for i in range(20)])
    all_bound(c, third, 60, "third wave bound")
    time.sleep(1)
    assert not scale.failed_scheduling(c, NS, set(third))
    assert c.extender_metric(lead, "gpusched_extender_forwarded_total",
                             {"verb": "bind", "code": "200"}) > 0
    check_once(c, first + names + third)
    c.force_delete_all(NS, "e2e=1")


def test_assignment_left_without_binding_is_replaced(ha):
    """A replica that dies between writing a pod's assignment annotations and creating
    its Binding leaves the pod Pending with an assignment the other replica restores
    (seen in this module's failover: the pod's next binds were refused 409, "already
    holds GPUs on node ...", or answered 200 with no Binding when kube-scheduler picked
    the same node). The leader's next /bind of such a pod replaces the assignment:
    pods created with one, on the node kube-scheduler will pick or on another, are
    all bound within seconds, with annotations that name their node and GPUs."""
    c = ha
    c.force_delete_all(NS, "e2e=1")
    inv = scale.inventories(c, "gpu")
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    objs = []
    for i in range(GPU_NODES):  # one per node
        node = f"gpu-{i}"
        uuid = sorted(inv[node])[GPUS - 1]
        o = scale.pod(f"ha-orphan{i}", scale.WHOLE1)
        o["metadata"]["annotations"] = {
            scale.PREFIX + "node": node, scale.PREFIX + "request-kind": "whole",
            scale.PREFIX + "gpu-uuids": uuid, scale.PREFIX + "gpu-indices": str(GPUS - 1),
            scale.PREFIX + "gpu-memory": str(inv[node][uuid]),
            scale.PREFIX + "gpu-milli": "1000", scale.PREFIX + "assigned-at": now}
        if i < 2:  # kube-scheduler must pick the assignment's node
            o["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        objs.append(o)
    names = scale.create_pods(c, objs)
    all_bound(c, names, 30, "pods left with an assignment and no Binding")
    pods = check_once(c, names)
    moved = [n for n in names if pods[n]["spec"]["nodeName"] !=
             next(o for o in objs if o["metadata"]["name"] == n)["metadata"]["annotations"][
                 scale.PREFIX + "node"]]
    print(f"HA: {len(names)} pods with an assignment and no Binding bound, "
          f"{len(moved)} to another node than their assignment's")
    c.force_delete_all(NS, "e2e=1")
