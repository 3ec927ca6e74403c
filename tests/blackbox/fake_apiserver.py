"""A fake kube-apiserver for the black-box tests: real HTTP, in-memory objects.

It speaks enough of the Kubernetes REST API for every gpusched service:
core/v1 nodes, pods (with the binding subresource), events, namespaces,
coordination.k8s.io/v1 leases, and any other group/version/plural path
(custom resources) stored generically. Lists carry a resourceVersion;
watches (``?watch=1``) stream ADDED/MODIFIED/DELETED events from any
resourceVersion still in its history, send BOOKMARKs when asked, and end
after ``timeoutSeconds``. A list with ``limit`` is paged: ``metadata.continue``
names the rest of its snapshot, 410 once compacted. Label selectors (=, ==, !=, exists, !key) and field
selectors (=, ==, != on dotted paths such as spec.nodeName) are honoured.

Faults on demand, for testing how clients cope:

    api.fail("POST", r"/binding$", 500)          # next matching request -> 500
    api.fail("POST", r"/binding$", 504, after=True)  # ... carried out, answer lost
    api.fail("PUT", r"/leases/", 409, times=3)
    api.drop_watches()                            # cut every open watch stream
    api.drop_watches(gone=True)                   # ... after an ERROR 410 event
    api.compact()                                 # older resourceVersions -> 410 Gone

Writes follow the API server's rules: creates of an existing name are 409,
PUT with a stale metadata.resourceVersion is 409, a second Binding of a pod
is 409. PATCH accepts merge, strategic-merge (applied as a merge patch: maps
merge, lists are replaced) and JSON patch.

Usage:

    from fake_apiserver import FakeApiServer
    with FakeApiServer() as api:
        api.add_node("n1", labels={...}, annotations={...})
        api.add_pod("default", "p1", containers=[...])
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        ... run the binary with --kubeconfig kubeconfig ...
        assert api.get("pods", "p1", "default")["spec"]["nodeName"] == "n1"

Every request is recorded in ``api.requests`` as (method, path, body).

Run as a program (``python3 fake_apiserver.py``) it prints its URL on the
first line of stdout and serves until stdin closes; tests in other languages
drive its faults over HTTP: POST /_fake/fail {"method", "pattern", "status",
"times", "message"}, POST /_fake/drop-watches {"gone": bool},
POST /_fake/compact.
"""
import copy
import json
import re
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = {
    "pods": "Pod", "nodes": "Node", "events": "Event", "namespaces": "Namespace",
    "leases": "Lease", "configmaps": "ConfigMap", "secrets": "Secret",
    "services": "Service", "bindings": "Binding",
}
CLUSTER_SCOPED = {"nodes", "namespaces"}


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"bad JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(doc, ops):
    """RFC 6902 JSON patch: add, remove, replace, test, copy, move."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be an array")

    def walk(parts):
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        if kind == "test":
            cur = doc
            for p in parts:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            if cur != op.get("value"):
                raise ValueError(f"test failed at {op.get('path')}")
            continue
        if kind in ("copy", "move"):
            src = _pointer(op["from"])
            cur = doc
            for p in src:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            value = copy.deepcopy(cur)
            if kind == "move":
                parent, last = walk(src)
                del parent[int(last) if isinstance(parent, list) else last]
            kind, op = "add", {"value": value}
        parent, last = walk(parts)
        if kind == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "replace":
            key = int(last) if isinstance(parent, list) else last
            if not isinstance(parent, list) and key not in parent:
                raise KeyError(last)
            parent[key] = op["value"]
        else:
            raise ValueError(f"unknown op {kind!r}")
    return doc


def _dotted(obj, path):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return ""
        cur = cur[p]
    return "" if cur is None else str(cur)


def _match_fields(obj, sel):
    for term in filter(None, sel.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if _dotted(obj, k) == v:
                return False
        else:
            k, v = re.split("==?", term, maxsplit=1)
            if _dotted(obj, k) != v:
                return False
    return True


def _match_labels(obj, sel):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, sel.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = re.split("==?", term, maxsplit=1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class _Route:
    """A parsed API path: prefix (/api/v1 or /apis/G/V), plural, ns, name, sub."""

    def __init__(self, path):
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            self.prefix, rest = "/api/v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            self.prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
        else:
            raise KeyError(path)
        self.ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            self.ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise KeyError(path)
        self.plural = rest[0]
        self.name = rest[1] if len(rest) > 1 else None
        self.sub = rest[2] if len(rest) > 2 else None
        self.coll = (self.prefix, self.plural)


class FakeApiServer:
    def __init__(self, host="127.0.0.1", port=0, bookmark_interval=1.0, tls=None,
                 kubelet_admits=True):
        """tls: (cert_file, key_file) to serve HTTPS instead of HTTP.
        kubelet_admits: a Binding also sets the pod's status.startTime, as the
        node's kubelet does once it has admitted the pod (the extender's node
        lock waits for that); False leaves bound pods unadmitted."""
        self.kubelet_admits = kubelet_admits
        self.lock = threading.Condition()
        self.rv = 0
        self.compacted = 0
        self.store = {}        # (prefix, plural) -> {(ns, name): obj}
        self.history = []      # (rv, type, coll, ns, obj)
        self.faults = []       # [method, regex, status, times, message]
        self.delays = []       # [method, regex, seconds, times]
        self.snapshots = {}    # continue token -> (resourceVersion, the items left)
        self.list_pages = 0
        self.requests = []
        self.require_token = None  # set: requests without this bearer token get 401
        self.watch_gen = 0     # bumped by drop_watches()
        self.drop_gone = False
        self.open_watches = 0
        self.bookmark_interval = bookmark_interval
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.tls = tls
        if tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = None

    # ---- lifecycle ----------------------------------------------------------
    @property
    def url(self):
        host, port = self.httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def write_kubeconfig(self, path, namespace="default", token="fake-token", ca_file=None,
                         token_file=None):
        """A kubeconfig for this server; ca_file is embedded as
        certificate-authority-data (HTTPS); token_file: the user has a
        tokenFile and no token."""
        path = str(path)
        user = f"tokenFile: {token_file}" if token_file else f"token: {token}"
        ca = ""
        if ca_file:
            import base64
            with open(ca_file, "rb") as f:
                ca = "\n    certificate-authority-data: " + base64.b64encode(f.read()).decode()
        with open(path, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
current-context: fake
clusters:
- name: fake
  cluster:
    server: {self.url}{ca}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: {namespace}
users:
- name: fake
  user:
    {user}
""")
        return path

    # ---- faults -------------------------------------------------------------
    def fail(self, method, pattern, status, times=1, message="injected failure", after=False):
        """The next `times` requests with this method whose path (with query)
        matches `pattern` get `status` and a Status body. after=True: the
        request is carried out first (an answer lost on the way back, a
        timeout after the write)."""
        with self.lock:
            self.faults.append([method.upper(), re.compile(pattern), status, times, message,
                                after])

    def delay(self, method, pattern, seconds, times=1, body_has=None):
        """The next `times` requests with this method whose path matches
        `pattern` (and whose JSON body holds the text `body_has`, when given)
        are held `seconds` before they are served (a slow apiserver; other
        requests go on meanwhile)."""
        with self.lock:
            self.delays.append([method.upper(), re.compile(pattern), seconds, times, body_has])

    def drop_watches(self, gone=False):
        """Closes every open watch stream: abruptly, or with gone=True after
        an ERROR event with code 410 (the client must list again)."""
        with self.lock:
            self.watch_gen += 1
            self.drop_gone = gone
            self.lock.notify_all()

    def compact(self):
        """Forgets the history: watches from any older version get 410 Gone."""
        with self.lock:
            self.compacted = self.rv
            self.history.clear()

    def _take_delay(self, method, path, body):
        with self.lock:
            for d in self.delays:
                if d[0] == method and d[1].search(path) and d[3] > 0 and \
                        (d[4] is None or d[4] in json.dumps(body)):
                    d[3] -= 1
                    return d[2]
        return 0

    def _take_fault(self, method, path):
        with self.lock:
            for f in self.faults:
                if f[0] == method and f[1].search(path) and f[3] > 0:
                    f[3] -= 1
                    return f[2], f[4], f[5]
        return None

    # ---- object store -------------------------------------------------------
    def _bump(self, typ, coll, ns, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, typ, coll, ns, copy.deepcopy(obj)))
        if len(self.history) > 10000:
            self.compacted = self.history[0][0]
            del self.history[0]
        self.lock.notify_all()

    def _create(self, route, obj):
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            return 422, _status(422, "Invalid", "metadata.name: Required value")
        ns = route.ns if route.plural not in CLUSTER_SCOPED else None
        if ns:
            meta["namespace"] = ns
        objs = self.store.setdefault(route.coll, {})
        if (ns, name) in objs:
            return 409, _status(409, "AlreadyExists", f'{route.plural} "{name}" already exists')
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta.setdefault("creationTimestamp", _now())
        obj.setdefault("kind", KINDS.get(route.plural, route.plural.capitalize().rstrip("s")))
        obj.setdefault("apiVersion", route.prefix.replace("/apis/", "").replace("/api/", ""))
        objs[(ns, name)] = obj
        self._bump("ADDED", route.coll, ns, obj)
        return 201, obj

    def create(self, path, obj):
        """Creates an object under a collection path; returns the stored copy."""
        with self.lock:
            code, out = self._create(_Route(path), copy.deepcopy(obj))
            if code >= 300:
                raise ValueError(out["message"])
            return copy.deepcopy(out)

    def add_node(self, name, labels=None, annotations=None, capacity=None, taints=None):
        node = {"metadata": {"name": name, "labels": labels or {},
                             "annotations": annotations or {}},
                "spec": {"taints": taints} if taints else {},
                "status": {"capacity": capacity or {}, "allocatable": capacity or {}}}
        return self.create("/api/v1/nodes", node)

    def add_pod(self, ns, name, containers=None, annotations=None, node=None, phase="Pending",
                priority=None, labels=None):
        spec = {"containers": containers or [{"name": "c", "image": "x"}]}
        if node:
            spec["nodeName"] = node
        if priority is not None:
            spec["priority"] = priority
        pod = {"metadata": {"name": name, "namespace": ns, "annotations": annotations or {},
                            "labels": labels or {}},
               "spec": spec, "status": {"phase": phase}}
        return self.create(f"/api/v1/namespaces/{ns}/pods", pod)

    def get(self, plural, name, ns=None, prefix="/api/v1"):
        with self.lock:
            obj = self.store.get((prefix, plural), {}).get((ns, name))
            return copy.deepcopy(obj)

    def list(self, plural, prefix="/api/v1"):
        with self.lock:
            return [copy.deepcopy(o) for o in self.store.get((prefix, plural), {}).values()]

    def update(self, plural, name, ns=None, fn=None, prefix="/api/v1"):
        """Applies fn(obj) in place to a stored object and emits MODIFIED."""
        with self.lock:
            obj = self.store[(prefix, plural)][(ns, name)]
            fn(obj)
            self._bump("MODIFIED", (prefix, plural), ns, obj)
            return copy.deepcopy(obj)

    def delete(self, plural, name, ns=None, prefix="/api/v1"):
        with self.lock:
            obj = self.store[(prefix, plural)].pop((ns, name))
            self._bump("DELETED", (prefix, plural), ns, obj)

    # ---- request handling (called from handler threads) ---------------------
    def handle(self, method, path, query, body, ctype="application/json"):
        route = _Route(path)
        with self.lock:
            objs = self.store.setdefault(route.coll, {})
            if route.name is None:
                if method == "GET":
                    kind = KINDS.get(route.plural, route.plural.capitalize())
                    token = query.get("continue")
                    if token:  # a later page of a snapshot taken by the first one
                        snap = self.snapshots.get(token)
                        if snap is None or snap[0] < self.compacted:
                            return 410, _status(410, "Expired", "the provided continue "
                                                "parameter is too old")
                        rv, items = snap
                    else:
                        rv = self.rv
                        items = [copy.deepcopy(o) for (ns, _), o in sorted(objs.items(), key=str)
                                 if (route.ns is None or ns == route.ns)
                                 and _match_labels(o, query.get("labelSelector", ""))
                                 and _match_fields(o, query.get("fieldSelector", ""))]
                    meta = {"resourceVersion": str(rv)}
                    limit = int(query.get("limit") or 0)
                    if limit > 0 and len(items) > limit:
                        self.list_pages += 1
                        meta["continue"] = "page-%d" % self.list_pages
                        self.snapshots[meta["continue"]] = (rv, items[limit:])
                        items = items[:limit]
                    return 200, {"kind": kind + "List", "apiVersion": "v1", "metadata": meta,
                                 "items": items}
                if method == "POST":
                    if not isinstance(body, dict):
                        return 400, _status(400, "BadRequest", "body must be an object")
                    return self._create(route, body)
                return 405, _status(405, "MethodNotAllowed", method)
            key = (route.ns if route.plural not in CLUSTER_SCOPED else None, route.name)
            obj = objs.get(key)
            if route.sub == "binding" and method == "POST":
                return self._bind(route, obj, body)
            if obj is None:
                return 404, _status(404, "NotFound", f'{route.plural} "{route.name}" not found')
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                del objs[key]
                self._bump("DELETED", route.coll, key[0], obj)
                return 200, copy.deepcopy(obj)
            if method == "PUT":
                if not isinstance(body, dict):
                    return 400, _status(400, "BadRequest", "body must be an object")
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want and want != obj["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified; "
                                        "please apply your changes to the latest version")
                new = copy.deepcopy(body)
                new.setdefault("metadata", {})
                for k in ("uid", "creationTimestamp", "name", "namespace"):
                    if k in obj["metadata"]:
                        new["metadata"][k] = obj["metadata"][k]
                objs[key] = new
                self._bump("MODIFIED", route.coll, key[0], new)
                return 200, copy.deepcopy(new)
            if method == "PATCH":
                try:
                    if ctype == "application/json-patch+json":
                        new = _json_patch(obj, body)
                    elif ctype in ("application/merge-patch+json",
                                   "application/strategic-merge-patch+json"):
                        if not isinstance(body, dict):
                            raise ValueError("a merge patch must be an object")
                        new = _merge_patch(obj, body)
                    else:
                        return 415, _status(415, "UnsupportedMediaType", ctype)
                except (ValueError, KeyError, IndexError, TypeError) as ex:
                    return 422, _status(422, "Invalid", f"patch: {ex}")
                want = (new.get("metadata") or {}).get("resourceVersion")
                if want and want != obj["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified")
                if (new.get("metadata") or {}).get("uid") != obj["metadata"].get("uid"):
                    # as the real API server: a patch naming another UID (the object
                    # was re-created under its name) is refused
                    return 422, _status(422, "Invalid", "metadata.uid: field is immutable")
                objs[key] = new
                self._bump("MODIFIED", route.coll, key[0], new)
                return 200, copy.deepcopy(new)
            return 405, _status(405, "MethodNotAllowed", method)

    def _bind(self, route, pod, body):
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{route.name}" not found')
        target = ((body or {}).get("target") or {}).get("name")
        if not target:
            return 400, _status(400, "BadRequest", "binding: target.name is required")
        if pod["spec"].get("nodeName"):
            return 409, _status(409, "Conflict", f'pod {route.name} is already assigned to node '
                                f'"{pod["spec"]["nodeName"]}"')
        pod["spec"]["nodeName"] = target
        if self.kubelet_admits:
            pod.setdefault("status", {})["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                      time.gmtime())
        self._bump("MODIFIED", route.coll, route.ns, pod)
        return 201, _status(201, "", "", status="Success")

    def watch(self, route, query, write):
        """Streams events to write(bytes) until timeout, a drop, or a write error."""
        timeout = float(query.get("timeoutSeconds", "300"))
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        deadline = time.monotonic() + timeout
        with self.lock:
            gen = self.watch_gen
            try:
                since = int(query.get("resourceVersion") or self.rv)
            except ValueError:
                since = self.rv
            if since < self.compacted:
                write(_event("ERROR", _status(410, "Expired",
                                              f"too old resource version: {since} "
                                              f"({self.compacted})")))
                return
            self.open_watches += 1
        try:
            last_bookmark = time.monotonic()
            while True:
                with self.lock:
                    out = []
                    for rv, typ, coll, ns, obj in self.history:
                        if rv <= since or coll != route.coll:
                            continue
                        if route.ns is not None and ns != route.ns:
                            continue
                        if not (_match_labels(obj, labels) and _match_fields(obj, fields)):
                            continue
                        out.append((typ, obj))
                    if self.history and self.history[-1][0] > since:
                        since = self.history[-1][0]
                    if not out:
                        self.lock.wait(0.2)
                    dropped = self.watch_gen != gen
                    gone = self.drop_gone
                    cur_rv = self.rv
                if dropped and gone:
                    write(_event("ERROR", _status(410, "Expired", "too old resource version")))
                    return
                if dropped:
                    raise ConnectionAbortedError("watch dropped")
                for typ, obj in out:
                    write(_event(typ, obj))
                now = time.monotonic()
                if bookmarks and now - last_bookmark >= self.bookmark_interval:
                    kind = KINDS.get(route.plural, route.plural.capitalize())
                    write(_event("BOOKMARK", {"kind": kind, "apiVersion": "v1",
                                              "metadata": {"resourceVersion": str(cur_rv)}}))
                    last_bookmark = now
                if now >= deadline:
                    return
        finally:
            with self.lock:
                self.open_watches -= 1


def _status(code, reason, message, status="Failure"):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status,
            "message": message, "reason": reason, "code": code}


def _event(typ, obj):
    return (json.dumps({"type": typ, "object": obj}) + "\n").encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api = None  # set by FakeApiServer

    def log_message(self, *args):
        pass

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _do(self, method):
        api = self.api
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, _status(400, "BadRequest", "body is not JSON"))
        if url.path.startswith("/_fake/") and method == "POST":
            return self._control(url.path, body or {})
        if api.require_token and \
                self.headers.get("Authorization") != "Bearer " + api.require_token:
            return self._send(401, _status(401, "Unauthorized", "no or a wrong bearer token"))
        with api.lock:
            api.requests.append((method, self.path, body))
        time.sleep(api._take_delay(method, self.path, body))
        fault = api._take_fault(method, self.path)
        if fault and not fault[2]:
            return self._send(fault[0], _status(fault[0], "Injected", fault[1]))
        try:
            route = _Route(url.path)
        except KeyError:
            return self._send(404, _status(404, "NotFound", f"no route {url.path}"))
        if fault:  # carried out, then the answer is lost
            api.handle(method, url.path, query, body, (self.headers.get("Content-Type") or "")
                       .split(";")[0].strip())
            return self._send(fault[0], _status(fault[0], "Injected", fault[1]))
        if method == "GET" and query.get("watch") in ("1", "true") and route.name is None:
            return self._watch(route, query)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        code, out = api.handle(method, url.path, query, body, ctype)
        self._send(code, out)

    def _control(self, path, body):
        if path == "/_fake/fail":
            self.api.fail(body.get("method", "GET"), body.get("pattern", ""),
                          int(body.get("status", 500)), int(body.get("times", 1)),
                          body.get("message", "injected failure"), bool(body.get("after")))
        elif path == "/_fake/delay":
            self.api.delay(body.get("method", "GET"), body.get("pattern", ""),
                           float(body.get("seconds", 1)), int(body.get("times", 1)))
        elif path == "/_fake/drop-watches":
            self.api.drop_watches(bool(body.get("gone")))
        elif path == "/_fake/compact":
            self.api.compact()
        else:
            return self._send(404, _status(404, "NotFound", path))
        return self._send(200, {"ok": True})

    def _watch(self, route, query):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        try:
            self.api.watch(route, query, write)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionAbortedError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass

    def do_GET(self):
        self._do("GET")

    def do_POST(self):
        self._do("POST")

    def do_PUT(self):
        self._do("PUT")

    def do_PATCH(self):
        self._do("PATCH")

    def do_DELETE(self):
        self._do("DELETE")


if __name__ == "__main__":
    import sys
    with FakeApiServer() as server:
        print(server.url, flush=True)
        sys.stdin.read()
