"""The image `make image` builds: a valid OCI layout and a tarball that ctr
and docker load; the binary runs inside it (chroot, and runc with the
image's own config) as the unprivileged user, finds its libraries and the
CA bundle; the same inputs give the same digests."""
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import ROOT, build_dir
from fake_apiserver import FakeApiServer

APP = "/usr/local/bin/gpusched"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def host_version(gpusched_bin):
    return subprocess.run([gpusched_bin, "version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def chroot(bundle, *args, user="65532:65532", timeout=60):
    return subprocess.run(["chroot", f"--userspec={user}", os.path.join(bundle, "rootfs"), *args],
                          capture_output=True, text=True, timeout=timeout)


# ---- the layout and the tarball -------------------------------------------

def test_every_blob_matches_its_digest(layout):
    blobs = os.path.join(layout.path, "blobs", "sha256")
    names = sorted(os.listdir(blobs))
    for n in names:
        assert sha256_file(os.path.join(blobs, n)) == "sha256:" + n, n
    referenced = {layout.desc["digest"], layout.manifest["config"]["digest"]} | {
        l["digest"] for l in layout.manifest["layers"]}
    assert {"sha256:" + n for n in names} == referenced, "unreferenced or missing blobs"
    assert layout.desc["size"] == os.path.getsize(layout.blob_path(layout.desc["digest"]))


def test_manifest_and_config(layout, gpusched_bin):
    m, c = layout.manifest, layout.config
    assert layout.desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert [l["mediaType"] for l in m["layers"]] == \
        ["application/vnd.oci.image.layer.v1.tar+gzip"] * 2
    assert c["os"] == "linux" and c["architecture"] == "amd64"
    cfg = c["config"]
    assert cfg["User"] == "65532:65532"
    assert cfg["Entrypoint"] == [APP]
    assert any(e.startswith("PATH=") and "/usr/local/bin" in e for e in cfg["Env"])
    version = host_version(gpusched_bin).split()[1]
    assert cfg["Labels"]["org.opencontainers.image.version"] == version
    # diff_ids are the uncompressed layers' digests
    for layer, diff in zip(m["layers"], c["rootfs"]["diff_ids"]):
        with gzip.open(layout.blob_path(layer["digest"])) as f:
            assert "sha256:" + hashlib.sha256(f.read()).hexdigest() == diff
    assert len(c["history"]) == 2
    assert layout.desc["annotations"]["io.containerd.image.name"] == \
        "docker.io/library/gpusched:latest"


def test_app_layer_holds_the_stripped_binary_only(layout, gpusched_bin):
    with tarfile.open(layout.blob_path(layout.manifest["layers"][1]["digest"]), "r:gz") as t:
        members = {m.name: m for m in t.getmembers()}
        files = sorted(n for n, m in members.items() if m.isfile())
        limiter = "./usr/local/lib/gpusched/libgpusched-cuda.so"
        assert files in (["." + APP], sorted(["." + APP, limiter])), files
        app = members["." + APP]
        assert app.mode == 0o755 and app.uid == 0 and app.gid == 0
        data = t.extractfile(app).read()
    assert data.startswith(b"\x7fELF")
    assert len(data) < os.path.getsize(gpusched_bin), "not stripped"
    mtimes = {m.mtime for m in members.values()}
    assert len(mtimes) == 1, f"timestamps not fixed: {mtimes}"


def test_base_layer_has_no_device_nodes_and_no_host_files(layout):
    with tarfile.open(layout.blob_path(layout.manifest["layers"][0]["digest"]), "r:gz") as t:
        names = set()
        for m in t:
            names.add(m.name)
            assert not (m.ischr() or m.isblk()), f"device node {m.name} in the image"
            if m.name == "./var/lib/dpkg/status":
                status = t.extractfile(m).read().decode()
    assert "./etc/hostname" not in names and "./etc/resolv.conf" not in names
    assert "./etc/ssl/certs/ca-certificates.crt" in names
    pkgs = set(re.findall(r"^Package: (\S+)$", status, flags=re.M))
    assert "usr-is-merged" in pkgs and "usrmerge" not in pkgs and "perl" not in pkgs
    assert {"libgrpc29", "ca-certificates", "apt"} <= pkgs


def test_docker_manifest_matches_the_oci_manifest(image_dir, layout):
    (entry,) = layout.json("manifest.json")
    assert entry["RepoTags"] == ["gpusched:latest"]
    assert entry["Config"] == "blobs/sha256/" + layout.manifest["config"]["digest"][7:]
    assert entry["Layers"] == ["blobs/sha256/" + l["digest"][7:]
                               for l in layout.manifest["layers"]]


def test_tarball_is_the_layout(image_dir, layout):
    with tarfile.open(os.path.join(image_dir, "gpusched-image.tar")) as t:
        members = t.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert {m.mtime for m in members} == {members[0].mtime}
        assert {(m.uid, m.gid) for m in members} == {(0, 0)}
        for rel in ("oci-layout", "index.json", "manifest.json"):
            assert "./" + rel in names
            with open(os.path.join(layout.path, rel), "rb") as f:
                assert t.extractfile("./" + rel).read() == f.read(), rel
        blobs = {n for n in names if n.startswith("./blobs/sha256/")}
    assert blobs == {"./blobs/sha256/" + n for n in os.listdir(os.path.join(layout.path, "blobs", "sha256"))}


# ---- the binary inside -----------------------------------------------------

def test_binary_runs_as_the_image_user(bundle, gpusched_bin):
    r = chroot(bundle, APP, "version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == host_version(gpusched_bin)
    for cmd in ("device-plugin", "extender", "webhook", "status", "simulate"):
        r = chroot(bundle, APP, cmd, "--help")
        assert r.returncode == 0, (cmd, r.stderr)
        assert "usage" in (r.stdout + r.stderr).lower(), cmd
    r = chroot(bundle, "id", "-un")
    assert r.stdout.strip() == "gpusched"


def test_libraries_resolve_inside(bundle):
    r = chroot(bundle, "ldd", APP)
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stdout, r.stdout
    for lib in ("libjansson", "libmicrohttpd", "libcurl", "libyaml", "libgrpc",
                "libprotobuf-c", "libgnutls"):
        assert lib in r.stdout, lib


def test_libcurl_finds_the_image_ca_bundle(bundle, gpusched_bin, tmp_path):
    """A kubeconfig without certificate-authority leaves verification to the
    system bundle. A server whose CA is only in the image's bundle is
    trusted; with the image's bundle as built it is not."""
    bundle_file = os.path.join(bundle, "rootfs", "etc", "ssl", "certs", "ca-certificates.crt")
    with open(bundle_file) as f:
        assert f.read().count("BEGIN CERTIFICATE") > 100
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=image-test-ca", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    with FakeApiServer(tls=(str(cert), str(key))) as api:
        api.add_node("n1")
        kc_host = api.write_kubeconfig(tmp_path / "kubeconfig")   # no CA in it
        kc = os.path.join(bundle, "rootfs", "tmp", "kubeconfig")
        shutil.copy(kc_host, kc)
        os.chmod(kc, 0o644)
        r = chroot(bundle, APP, "status", "--kubeconfig", "/tmp/kubeconfig")
        assert r.returncode != 0
        assert re.search(r"certificate|SSL|TLS", r.stderr, re.I), r.stderr
        saved = open(bundle_file).read()
        try:
            with open(bundle_file, "a") as f:
                f.write(open(cert).read())
            r = chroot(bundle, APP, "status", "--kubeconfig", "/tmp/kubeconfig")
            assert r.returncode == 0, r.stderr
            assert any(p.startswith("/api/v1/nodes") for _, p, _ in api.requests)
        finally:
            with open(bundle_file, "w") as f:
                f.write(saved)


def test_runc_runs_the_image_config(bundle, gpusched_bin):
    """The image's own entrypoint and user, the way a runtime starts it."""
    cfg_path = os.path.join(bundle, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    assert cfg["process"]["args"] == [APP]
    assert cfg["process"]["user"]["uid"] == 65532
    cfg["process"]["args"].append("version")
    cfg["process"]["terminal"] = False
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    name = f"gpusched-image-test-{os.getpid()}"
    r = subprocess.run(["runc", "run", "--bundle", bundle, name],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    subprocess.run(["runc", "delete", "--force", name], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == host_version(gpusched_bin)


# ---- reproducible -----------------------------------------------------------

def test_same_inputs_same_digest(layout, gpusched_bin, tmp_path):
    """A second build (another build dir, the same cached Debian root, the
    same binary, limiter library and commit) gives the same manifest digest,
    byte for byte."""
    other = tmp_path / "build"
    other.mkdir()
    shutil.copy(gpusched_bin, other / "gpusched")
    lim = os.path.join(os.path.dirname(gpusched_bin), "libgpusched-cuda.so")
    if os.path.exists(lim):     # make-image ships the limiter when the build has it
        shutil.copy(lim, other / "libgpusched-cuda.so")
    env = dict(os.environ, IMAGE_CACHE=os.path.join(build_dir(), "image-cache"))
    r = subprocess.run([os.path.join(ROOT, "scripts", "make-image"), str(other)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    with open(other / "image" / "oci" / "index.json") as f:
        again = json.load(f)["manifests"][0]["digest"]
    assert again == layout.desc["digest"]
    assert sha256_file(other / "image" / "gpusched-image.tar") == \
        sha256_file(os.path.join(build_dir(), "image", "gpusched-image.tar"))
