"""A fake kubelet for the device-plugin tests, built on Debian's python3-grpcio.

It does what the real kubelet does with a device plugin (see
shared/specs/device-plugin-protocol.md, "Lifecycle"):

- serves the Registration service on <dir>/kubelet.sock; inside Register it
  checks the request, dials the plugin back on <dir>/<endpoint>, calls
  GetDevicePluginOptions and starts reading ListAndWatch on its own thread,
  and only then answers (the plugin must keep serving meanwhile);
- keeps every device list each stream sent, with the time it arrived;
- admits containers: GetPreferredAllocation (when offered), Allocate,
  PreStartContainer (when asked for);
- restarts like kubelet: stops serving, deletes the socket files in the
  directory (keeping regular files), and listens on kubelet.sock again.

It also serves a PodResourcesLister on a socket of its own whose answer the
test sets. Python stubs are generated from the project's own .proto files
(proto/) at test time with grpc_tools, or read from GPUSCHED_STUBS_DIR when
that names a folder of stubs generated beforehand (for a machine without
grpc_tools, such as the GPU machine of tests/gpu/).
"""
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_stubs = None


def stubs():
    """Generates and imports the stubs once per process; returns a namespace."""
    global _stubs
    if _stubs:
        return _stubs
    out = os.environ.get("GPUSCHED_STUBS_DIR")
    if not out:
        out = tempfile.mkdtemp(prefix="gpusched-stubs-")
        proto = os.path.join(ROOT, "proto")
        files = ["deviceplugin.proto", "podresources.proto",
                 "services/deviceplugin_services.proto", "services/podresources_services.proto"]
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto,
                        "-I", os.path.join(proto, "services"), "--python_out=" + out,
                        "--grpc_python_out=" + out] + [os.path.join(proto, f) for f in files],
                       check=True)
    sys.path.insert(0, out)
    sys.path.insert(0, os.path.join(out, "services"))
    import deviceplugin_pb2
    import deviceplugin_services_pb2_grpc
    import podresources_pb2
    import podresources_services_pb2_grpc

    class NS:
        pb = deviceplugin_pb2
        grpc = deviceplugin_services_pb2_grpc
        pr = podresources_pb2
        pr_grpc = podresources_services_pb2_grpc
    _stubs = NS
    return NS


# kubelet's IsExtendedResourceName, as far as a plugin can get it wrong
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class Plugin:
    """One registered plugin as kubelet sees it."""

    def __init__(self, kubelet, req):
        s = stubs()
        self.resource = req.resource_name
        self.endpoint = req.endpoint
        self.register_options = req.options
        self.channel = grpc.insecure_channel("unix:" + os.path.join(kubelet.dir, req.endpoint))
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = s.grpc.DevicePluginStub(self.channel)
        self.options = self.stub.GetDevicePluginOptions(s.pb.Empty(), timeout=10)
        self.cond = threading.Condition()
        self.lists = []          # (time, [Device, ...]) per message received
        self.stream_error = None
        self.stream_ended = False
        self.stream = self.stub.ListAndWatch(s.pb.Empty())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for msg in self.stream:
                with self.cond:
                    self.lists.append((time.monotonic(), list(msg.devices)))
                    self.cond.notify_all()
        except grpc.RpcError as e:
            with self.cond:
                self.stream_error = e
        with self.cond:
            self.stream_ended = True
            self.cond.notify_all()

    def devices(self):
        with self.cond:
            return self.lists[-1][1] if self.lists else None

    def wait(self, pred, timeout=5.0):
        """Waits until pred(devices) holds for the latest list; returns it."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                if self.lists and pred(self.lists[-1][1]):
                    return self.lists[-1][1]
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("no matching device list in %.1fs; last: %s" % (
                        timeout, [(d.ID, d.health) for d in self.lists[-1][1]]
                        if self.lists else None))
                self.cond.wait(left)

    def admit(self, available, size, must=()):
        """Kubelet's admission of one container: preferred, then Allocate."""
        s = stubs()
        chosen = list(must)
        if self.options.get_preferred_allocation_available:
            r = self.stub.GetPreferredAllocation(s.pb.PreferredAllocationRequest(
                container_requests=[s.pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available), must_include_deviceIDs=list(must),
                    allocation_size=size)]), timeout=10)
            assert len(r.container_responses) == 1
            chosen = [i for i in r.container_responses[0].deviceIDs if i in available]
        for i in available:
            if len(chosen) >= size:
                break
            if i not in chosen:
                chosen.append(i)
        return chosen, self.allocate(chosen)

    def allocate(self, ids):
        s = stubs()
        r = self.stub.Allocate(s.pb.AllocateRequest(
            container_requests=[s.pb.ContainerAllocateRequest(devices_ids=list(ids))]),
            timeout=30)
        assert len(r.container_responses) >= 1, "Allocate answered no container response"
        return r.container_responses[0]

    def prestart(self, ids):
        s = stubs()
        return self.stub.PreStartContainer(
            s.pb.PreStartContainerRequest(devices_ids=list(ids)), timeout=30)

    def close(self):
        self.stream.cancel()
        self.channel.close()


class FakeKubelet:
    def __init__(self, directory):
        self.dir = directory
        self.cond = threading.Condition()
        self.plugins = {}        # resource -> latest Plugin
        self.registrations = []  # (time, resource, endpoint)
        self.errors = []
        self.server = None
        self.register_delay = 0.0  # seconds the next Register is held (a slow kubelet)

    # --- Registration service ---
    def Register(self, req, context):
        with self.cond:
            delay, self.register_delay = self.register_delay, 0.0
        time.sleep(delay)
        try:
            if req.version != "v1beta1":
                raise ValueError("version %r is not supported by kubelet" % req.version)
            if "/" in req.endpoint or not req.endpoint:
                raise ValueError("endpoint %r is not a bare file name" % req.endpoint)
            if not _NAME.match(req.resource_name) or "kubernetes.io/" in req.resource_name:
                raise ValueError("the ResourceName %r is invalid" % req.resource_name)
            p = Plugin(self, req)
        except Exception as e:  # noqa: BLE001 - kubelet answers every failure with UNKNOWN
            with self.cond:
                self.errors.append(str(e))
            context.abort(grpc.StatusCode.UNKNOWN, "failed to register: %s" % e)
        with self.cond:
            old = self.plugins.get(req.resource_name)
            self.plugins[req.resource_name] = p
            self.registrations.append((time.monotonic(), req.resource_name, req.endpoint))
            self.cond.notify_all()
        if old:
            old.close()
        return stubs().pb.Empty()

    def start(self):
        s = stubs()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        servicer = type("Reg", (s.grpc.RegistrationServicer,), {"Register": lambda _s, r, c: self.Register(r, c)})()
        s.grpc.add_RegistrationServicer_to_server(servicer, self.server)
        self.server.add_insecure_port("unix:" + os.path.join(self.dir, "kubelet.sock"))
        self.server.start()
        return self

    def stop(self):
        if self.server:
            self.server.stop(0).wait(5)
            self.server = None
        with self.cond:
            plugins, self.plugins = list(self.plugins.values()), {}
        for p in plugins:
            p.close()

    def restart(self):
        """Like a kubelet restart: sockets in the directory go, kubelet.sock comes back."""
        self.stop()
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        with open(os.path.join(self.dir, "DEPRECATION"), "w") as f:
            f.write("kubelet restarted\n")
        return self.start()

    def wait_plugin(self, resource, timeout=5.0, after=0.0):
        """The plugin registered for `resource` at or after time `after`."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, r, _ in self.registrations:
                    if r == resource and t >= after and resource in self.plugins:
                        return self.plugins[resource]
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s did not register in %.1fs (errors: %s)" % (
                        resource, timeout, self.errors))
                self.cond.wait(left)


class FakePodResources:
    """kubelet's PodResourcesLister.List, answering what the test set."""

    def __init__(self, path):
        self.path = path
        self.pods = []  # (namespace, name, container, resource, [ids])
        self.calls = 0
        s = stubs()
        me = self

        class Lister(s.pr_grpc.PodResourcesListerServicer):
            def List(self, req, context):
                me.calls += 1
                out = s.pr.ListPodResourcesResponse()
                for ns, name, cname, res, ids in me.pods:
                    pr = out.pod_resources.add(namespace=ns, name=name)
                    c = pr.containers.add(name=cname)
                    for i in ids:  # one entry per device, as kubelet 1.21+
                        c.devices.add(resource_name=res, device_ids=[i])
                return out

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        s.pr_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port("unix:" + path)
        self.server.start()

    def stop(self):
        self.server.stop(0).wait(5)
