"""deploy/extender.yaml's routing: kube-scheduler calls the extender through a Service
over both replicas, and both pass their readiness probe (/readyz is 200 on any
rebuilt replica, leader or not). A non-leader that refused /bind (it did, with 503,
before it forwarded to the leader) made kube-scheduler 1.20 put the pod in its
unschedulable queue, which it flushes after 60 s, so about half of all GPU pods
waited a minute before they were placed.

This switches the harness's proxy to "service" (a ready replica at random, as
kube-proxy picks) and requires each of 6 pods, created one at a time, to be bound
within 15 s: it fails while deploy/ routes /bind to non-leaders (chance of passing
by luck: 1/64)."""
import time

from conftest import NODE_A, NS, gpu_pod


def test_pods_bound_promptly_through_a_service(cluster):
    names = []
    cluster.proxy.mode = "service"
    try:
        for i in range(6):
            name = f"svc-{i}"
            names.append(name)
            t0 = time.time()
            cluster.apply(gpu_pod(name, {"nvidia.com/gpu": "1"}, node=NODE_A))
            try:
                cluster.wait(lambda: (cluster.pod(NS, name) or {"spec": {}})["spec"]
                             .get("nodeName"), 15, f"{name} bound")
            except AssertionError as e:
                evs = [ev.get("message") for ev in cluster.events(NS, name)
                       if ev.get("reason") == "FailedScheduling"]
                raise AssertionError(f"{e}; FailedScheduling: {evs}") from None
            print(f"{name} bound {time.time() - t0:.1f}s after creation")
            cluster.delete_pods(NS, [name])
    finally:
        cluster.proxy.mode = "leader"
        cluster.delete_pods(NS, names)
