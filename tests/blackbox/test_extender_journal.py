"""The standalone extender's journal under concurrent /bind (ext/journal.h:
group commit), over real HTTP against the real binary.

Many binds at once, then kill -9 in the middle of them: after a restart
every bind that was answered 200 still holds its GPUs. And a journal that
cannot be written (the file size limit, RLIMIT_FSIZE, stands in for a full
disk): the binds of the failed group are answered 500 naming the cause,
hold no GPUs, and nothing of them is left in the journal, while the binds
answered before are all restored after a restart.
"""
import os
import signal
import sys
import threading

import pytest
import requests

from conftest import ROOT, free_port  # noqa: F401  (conftest's fixtures come with it)
from test_extender import Extender, gpu_node, pod, refused, write_nodes

NODES = [gpu_node(f"g{i:02d}", n=4) for i in range(40)]
SLOTS = [(f"g{i // 4:02d}", f"p{i:03d}") for i in range(4 * len(NODES))]  # (node, pod)


def one_gpu(name):
    return pod(name, {"nvidia.com/gpu": "1"})


def show_all(e, slots):
    """/filter each pod once (a standalone /bind needs it), on its own node."""
    s = requests.Session()
    for node, name in slots:
        r = s.post(e.url + "/filter", json={"Pod": one_gpu(name), "NodeNames": [node],
                                            "Nodes": None}, timeout=10)
        assert r.status_code == 200 and r.json()["NodeNames"] == [node], r.text


def bind_body(node, name):
    return {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": node}


def bind_concurrently(e, slots, threads=8, stop_after=None, on_enough=None):
    """Binds every slot from `threads` connections at once. Returns
    {name: status, -1 (refused: 200 with an Error) or None (no answer)}. When stop_after answers were 200,
    on_enough() runs once (e.g. kill -9) while the others are in flight."""
    todo = list(slots)
    answers, lock, fired = {}, threading.Lock(), []

    def work():
        s = requests.Session()
        while True:
            with lock:
                if not todo:
                    return
                node, name = todo.pop(0)
            try:
                r = s.post(e.url + "/bind", json=bind_body(node, name), timeout=20)
                code = r.status_code if r.status_code != 200 or r.json()["Error"] == "" else -1
            except requests.RequestException:
                code = None
            with lock:
                answers[name] = code
                ok = sum(1 for c in answers.values() if c == 200)
                fire = stop_after is not None and ok >= stop_after and not fired
                if fire:
                    fired.append(1)
            if fire:
                on_enough()

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    return answers


def holds_gpus(e, name):
    """DELETE /allocations/default/NAME: 200 when the pod held GPUs (a
    journal-restored allocation has no pod object, so this asks by name)."""
    r = requests.delete(f"{e.url}/allocations/default/{name}", timeout=10)
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


def test_kill9_during_concurrent_binds_keeps_every_answered_bind(gpusched_bin, tmp_path):
    nodes = write_nodes(tmp_path / "nodes.json", NODES)
    state = str(tmp_path / "state")
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", state, "--threads", "8"])
    show_all(e, SLOTS)
    first, rest = SLOTS[:80], SLOTS[80:]
    # a first round, answered in full: the journal's counters add up
    answers = bind_concurrently(e, first)
    assert all(c == 200 for c in answers.values()), answers
    records = e.metric("gpusched_extender_journal_records_total")
    flushes = e.metric("gpusched_extender_journal_flushes_total")
    assert records == len(first)
    assert 1 <= flushes <= records
    assert e.metric("gpusched_extender_journal_failed_flushes_total") == 0
    # the second round is cut short by kill -9 while binds are in flight
    answers = bind_concurrently(e, rest, stop_after=30,
                                on_enough=lambda: e.proc.send_signal(signal.SIGKILL))
    e.stop(signal.SIGKILL)
    ok = [name for name, c in answers.items() if c == 200]
    assert len(ok) >= 30
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", state])
    try:
        held = e.metric("gpusched_allocations")
        assert len(first) + len(ok) <= held <= len(SLOTS)
        lost = [name for _, name in first if not holds_gpus(e, name)]
        lost += [name for name in ok if not holds_gpus(e, name)]
        assert lost == []
    finally:
        e.stop()


def slow_disk():
    """The environment that preloads tests/blackbox/slowsync.c (10 ms more per
    fdatasync), built beside the binary."""
    build = os.environ.get("GPUSCHED_BUILD_DIR", os.path.join(ROOT, "build"))
    lib = os.path.join(build, "libslowsync.so")
    if not os.path.exists(lib):
        pytest.fail(f"{lib} not found (built with the tests; set GPUSCHED_BUILD_DIR)")
    return dict(os.environ, LD_PRELOAD=lib)


def test_binds_on_one_http_worker_share_flushes(gpusched_bin, tmp_path):
    """One HTTP worker serves all eight connections: binds share flushes only
    because a bind waiting for its flush does not hold the worker
    (ext/bindq.h); on the worker itself every bind would flush alone."""
    nodes = write_nodes(tmp_path / "nodes.json", NODES)
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(tmp_path / "state"),
                                "--threads", "1"], env=slow_disk())
    try:
        show_all(e, SLOTS)
        answers = bind_concurrently(e, SLOTS, threads=8)
        assert all(c == 200 for c in answers.values()), answers
        records = e.metric("gpusched_extender_journal_records_total")
        flushes = e.metric("gpusched_extender_journal_flushes_total")
        assert records == len(SLOTS)
        assert flushes <= records / 2, (flushes, records)
        # the bind's time on the server is counted once, when it is answered
        assert e.metric('gpusched_extender_requests_total{verb="bind",code="200"}') == len(SLOTS)
    finally:
        e.stop()


def limited(tmp_path, gpusched_bin, max_bytes):
    """A wrapper that runs gpusched with files limited to max_bytes (writes
    past it fail with EFBIG instead of killing the process)."""
    path = tmp_path / "gpusched-limited"
    path.write_text(f"""#!{sys.executable}
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({max_bytes}, {max_bytes}))
os.execv({gpusched_bin!r}, [{gpusched_bin!r}] + sys.argv[1:])
""")
    path.chmod(0o755)
    return str(path)


def test_failed_journal_write_fails_the_binds_and_keeps_state(gpusched_bin, tmp_path):
    nodes = write_nodes(tmp_path / "nodes.json", NODES)
    state = tmp_path / "state"
    limit = 6000
    e = Extender(limited(tmp_path, gpusched_bin, limit),
                 ["--nodes", nodes, "--state-dir", str(state), "--threads", "8"])
    try:
        slots = SLOTS[:40]
        show_all(e, slots)
        s = requests.Session()
        ok = []
        for node, name in slots[:20]:  # one at a time, until the journal is full
            r = s.post(e.url + "/bind", json=bind_body(node, name), timeout=10)
            if r.status_code != 200 or r.json()["Error"]:
                break
            ok.append(name)
        assert 1 <= len(ok) < 20, "the size limit never failed a write"
        refused(r, "File too large", "none of them was kept")
        size = os.path.getsize(state / "journal")
        assert size <= limit
        # many at once now: every group fails, none holds GPUs, the file is unchanged
        answers = bind_concurrently(e, slots[len(ok):])
        assert set(answers.values()) == {-1}, answers  # refused, 200 with an Error
        assert os.path.getsize(state / "journal") == size
        assert e.metric("gpusched_allocations") == len(ok)
        assert e.metric("gpusched_extender_journal_failed_flushes_total") >= 1
        assert e.metric("gpusched_extender_journal_unusable") == 0
        for node, name in slots[len(ok):len(ok) + 3]:  # their GPUs are free again
            r = s.post(e.url + "/filter", json={"Pod": one_gpu(name + "x"), "NodeNames": [node],
                                                "Nodes": None}, timeout=10)
            assert r.json()["NodeNames"] == [node], r.text
    finally:
        err = e.stop()
    assert "not kept" in err
    # without the limit: exactly the binds answered 200 come back
    e = Extender(gpusched_bin, ["--nodes", nodes, "--state-dir", str(state)])
    try:
        assert e.metric("gpusched_allocations") == len(ok)
        assert all(holds_gpus(e, name) for name in ok)
    finally:
        e.stop()


def test_journal_metrics_only_with_a_state_dir(gpusched_bin, tmp_path):
    nodes = write_nodes(tmp_path / "nodes.json", NODES[:1])
    e = Extender(gpusched_bin, ["--nodes", nodes])
    try:
        text = requests.get(e.url + "/metrics", timeout=10).text
        assert "gpusched_extender_journal_flushes_total" not in text
    finally:
        e.stop()
