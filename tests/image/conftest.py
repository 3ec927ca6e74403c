"""Fixtures for the image tests (`make image-check`): the image that
scripts/make-image wrote to $GPUSCHED_BUILD_DIR/image, and its root file
system unpacked once by umoci, the way a container runtime would see it.
They need root, umoci and runc (`scripts/deps`)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(os.path.join(ROOT, "tests", "blackbox"))


def build_dir():
    return os.path.abspath(os.environ.get("GPUSCHED_BUILD_DIR", os.path.join(ROOT, "build")))


@pytest.fixture(scope="session")
def gpusched_bin():
    path = os.environ.get("GPUSCHED_BIN", os.path.join(build_dir(), "gpusched"))
    assert os.access(path, os.X_OK), f"no binary at {path}"
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def image_dir():
    d = os.path.join(build_dir(), "image")
    if not os.path.isfile(os.path.join(d, "gpusched-image.tar")):
        pytest.fail(f"no image in {d}: run `make image` first")
    return d


class Layout:
    """An OCI image layout directory: index, manifest, config, blobs."""

    def __init__(self, path):
        self.path = path
        self.index = self.json("index.json")
        assert len(self.index["manifests"]) == 1, self.index
        self.desc = self.index["manifests"][0]
        self.manifest = self.blob_json(self.desc["digest"])
        self.config = self.blob_json(self.manifest["config"]["digest"])

    def json(self, rel):
        with open(os.path.join(self.path, rel)) as f:
            return json.load(f)

    def blob_path(self, digest):
        algo, hexd = digest.split(":", 1)
        return os.path.join(self.path, "blobs", algo, hexd)

    def blob_json(self, digest):
        with open(self.blob_path(digest)) as f:
            return json.load(f)


@pytest.fixture(scope="session")
def layout(image_dir):
    return Layout(os.path.join(image_dir, "oci"))


@pytest.fixture(scope="session")
def bundle(image_dir, tmp_path_factory):
    """`umoci unpack` of the image: an OCI runtime bundle (config.json + rootfs)."""
    if os.geteuid() != 0:
        pytest.skip("the image tests need root (umoci unpack, chroot, runc)")
    d = tmp_path_factory.mktemp("bundle") / "b"
    tag = os.environ.get("IMAGE_TAG", "latest")
    subprocess.run(["umoci", "unpack", "--image", f"{image_dir}/oci:{tag}", str(d)],
                   check=True, capture_output=True, timeout=300)
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)
