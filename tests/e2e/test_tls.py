"""kube-scheduler calling the extender over HTTPS, as docs/deploy.md sets it up
(tls_cert/tls_key in every replica, enableHTTPS and tlsConfig.caData in the scheduler's
config), through a proxy that passes TCP connections to a replica as kube-proxy does.
The proxy sends every connection to the replica that does not lead, so each /filter,
/prioritize and /bind reaches the leader by the follower's HTTPS forwarding. Then the
Secret turns, one replica at a time (kubelet updates each node's copy on its own):
pods keep being bound, with no restart, while the two replicas serve different keys
and after. Twice: forwarding that trusts the follower's own keys (a new CA, the
follower turning first), and forwarding that trusts the CA (tls_ca; a pair from the
same CA, the leader turning first)."""
import ssl

import pytest

import scale
from conftest import gpu_pod

NS = "default"


@pytest.fixture(scope="module", params=["pinned", "ca"])
def tls(host_clean, request):
    with scale.api_only_cluster(host_clean, extender_replicas=2, proxy_mode="follower",
                                extender_tls=request.param) as c:
        c.add_api_nodes(2, gpus=4, prefix="gpu")
        yield c


def leader_index(c):
    holder = c.lease_holder() or ""
    return next(i for i, (ident, _) in enumerate(c.proxy.backends)
                if holder.startswith(ident + "@"))


def served(c, i):
    host, port = c.extender_addr(i).rsplit(":", 1)
    return ssl.get_server_certificate((host, int(port)))


def bind_pods(c, names):
    for n in names:
        c.apply(gpu_pod(n, {"nvidia.com/gpu": "1"}))
    for n in names:
        c.wait(lambda: (c.pod(NS, n) or {"spec": {}})["spec"].get("nodeName"), 30,
               f"{n} bound by kube-scheduler over HTTPS")
        ann = c.pod(NS, n)["metadata"].get("annotations", {})
        assert ann.get("gpusched.io/node") == c.pod(NS, n)["spec"]["nodeName"], ann


def test_https_with_a_rotated_secret(tls):
    c = tls
    lead = leader_index(c)
    follow = 1 - lead
    fwd = "gpusched_extender_forwarded_total"
    ok = {"result": "ok"}

    # forwarded binds answered (200: a bind the leader refused, to be retried, is
    # 200 too), at least one per pod bind_pods saw bound
    bind_pods(c, ["tls-1", "tls-2"])
    binds = c.extender_metric(follow, fwd, {"verb": "bind", "code": "200"})
    assert binds >= 2, binds
    first = served(c, lead)
    assert served(c, follow) == first

    # pinned keys: the follower's copy turns first; it serves the new key, pins it
    # beside the old one, and still forwards to the leader on the old key. With
    # tls_ca the leader's turns first: the follower trusts its new key by the CA
    order = [follow, lead] if c.extender_tls == "pinned" else [lead, follow]
    c.rotate_extender_cert(order[0], c.extender_pairs[1])
    c.wait(lambda: served(c, order[0]) != first, 10, "the first replica serves the new pair")
    bind_pods(c, ["tls-3", "tls-4"])
    now = c.extender_metric(follow, fwd, {"verb": "bind", "code": "200"})
    assert now >= binds + 2, (binds, now)
    binds = now
    assert c.extender_metric(order[0], "gpusched_extender_tls_reloads_total", ok) == 1

    # then the other's
    c.rotate_extender_cert(order[1], c.extender_pairs[1])
    c.wait(lambda: served(c, lead) == served(c, follow), 10, "both serve the new pair")
    bind_pods(c, ["tls-5", "tls-6"])
    assert c.extender_metric(follow, fwd, {"verb": "bind", "code": "200"}) >= binds + 2
    assert c.extender_metric(order[1], "gpusched_extender_tls_reloads_total", ok) == 1
    assert c.extender_metric(follow, fwd, {"code": "0"}) == 0
    # kube-scheduler opened connections with the new certificate: the follower's
    # old connections were closed after their answers
    conns = c.proxy.counts.get((c.extender_addr(follow), "connection"), 0)
    assert conns >= 2, c.proxy.counts
    assert c.proxy.counts.get((c.extender_addr(lead), "connection"), 0) == 0, c.proxy.counts
