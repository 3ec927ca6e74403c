"""The container image's definition cannot drift: the Dockerfile and
`make image` (scripts/make-image) install one package list
(scripts/image-packages), run one root setup (scripts/image-root-setup) and
give the image the same user and entrypoint; and every shared library the
built binary links comes from a package on that list.

Runs everywhere (no root, no network); tests/image/ checks a built image.
"""
import os
import re
import shlex
import subprocess

import pytest

from conftest import ROOT



def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def image_packages():
    out = []
    for line in read("scripts/image-packages").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", line), f"bad package name {line!r}"
            out.append(line)
    return out


def dockerfile_runtime_stage():
    """The Dockerfile's last stage: its FROM, RUN lines (joined), USER, ENTRYPOINT."""
    text = read("Dockerfile").replace("\\\n", " ")
    stages = re.split(r"^FROM ", text, flags=re.M)
    last = stages[-1]
    base = last.split()[0]
    runs = " ".join(m.group(1) for m in re.finditer(r"^RUN (.*)$", last, flags=re.M))
    copies = [m.group(1) for m in re.finditer(r"^COPY (.*)$", last, flags=re.M)]
    user = re.search(r"^USER (\S+)$", last, flags=re.M).group(1)
    entry = re.search(r"^ENTRYPOINT (.*)$", last, flags=re.M).group(1)
    return base, runs, copies, user, entry


def make_image_args(flag):
    """Every value of --FLAG in scripts/make-image's umoci commands."""
    text = read("scripts/make-image").replace("\\\n", " ")
    return re.findall(r"--" + re.escape(flag) + r"[ =](\S+)", text)


def test_package_list_is_sane():
    pkgs = image_packages()
    assert len(pkgs) == len(set(pkgs)), "duplicate package in scripts/image-packages"
    assert "ca-certificates" in pkgs


def test_dockerfile_installs_the_list_and_runs_the_setup():
    base, runs, copies, _, _ = dockerfile_runtime_stage()
    assert base == "debian:12-slim"
    assert any("scripts/image-packages" in c and "scripts/image-root-setup" in c for c in copies)
    assert "apt-get install" in runs and "/tmp/image/image-packages" in runs
    assert "image-root-setup /" in runs
    # nothing installed besides the list: no package names on the install line
    install = runs.split("apt-get install", 1)[1].split("&&", 1)[0]
    words = [w for w in shlex.split(install, posix=False) if not w.startswith("-")]
    assert words == ["$(grep", "'^#'", "'^[[:space:]]*$'", "/tmp/image/image-packages)"], words


def test_make_image_installs_the_same_list_and_setup():
    text = read("scripts/make-image")
    assert "scripts/image-packages" in text and "scripts/image-root-setup" in text
    assert "grep -v -e '^#' -e '^[[:space:]]*$' scripts/image-packages" in text
    assert "--variant=minbase" in text     # what debian:12-slim is


def test_same_user_and_entrypoint():
    _, _, _, user, entry = dockerfile_runtime_stage()
    assert make_image_args("config.user") == [user]
    assert entry == '["' + make_image_args("config.entrypoint")[0] + '"]'
    setup = read("scripts/image-root-setup")
    uid = user.split(":")[0]
    assert f"gpusched:x:{uid}:{uid}:" in setup
    # the manifests that run as non-root ask for the image's user
    for f in ("deploy/extender.yaml", "deploy/webhook.yaml"):
        assert f"runAsUser: {uid}" in read(f), f


def test_every_linked_library_comes_from_a_listed_package(gpusched_bin):
    """readelf's NEEDED entries, each mapped to its Debian package by dpkg -S:
    a new library dependency fails here until scripts/image-packages names it."""
    syms = subprocess.run(["readelf", "-W", "--dyn-syms", gpusched_bin], capture_output=True,
                          text=True, check=True).stdout
    if re.search(r"\s__(asan|ubsan)_", syms):
        # clang links every pkg-config library without --as-needed, and the
        # image ships the release (gcc) build, which `make test` checks here
        pytest.skip("a sanitizer build: the image ships the release build")
    r = subprocess.run(["readelf", "-d", gpusched_bin], capture_output=True, text=True, check=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", r.stdout)
    assert "libjansson.so.4" in needed
    ldd = subprocess.run(["ldd", gpusched_bin], capture_output=True, text=True, check=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, flags=re.M))
    listed = set(image_packages()) | {"libc6"}      # libc6 is in every Debian root
    missing = []
    for lib in needed:
        path = paths.get(lib)
        assert path and path != "not", f"{lib} does not resolve: {ldd}"
        q = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if q.returncode != 0:
            q = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if q.returncode != 0:
            pytest.fail(f"{lib} ({path}) belongs to no Debian package")
        pkg = q.stdout.split(":", 1)[0]
        if pkg not in listed:
            missing.append(f"{lib} -> {pkg}")
    assert not missing, f"not in scripts/image-packages: {missing}"
