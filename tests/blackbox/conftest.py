"""Shared fixtures for the black-box tests: they drive the real binary.

GPUSCHED_BIN names the binary under test (CTest sets it); GPUSCHED_SHARED_DIR
the ../shared folder with the openb trace. Tests that need the trace use the
`openb_dir` fixture, which skips with a message when it is absent.
"""
import os
import socket
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def gpusched_bin():
    path = os.environ.get("GPUSCHED_BIN", os.path.join(ROOT, "build", "gpusched"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"gpusched binary not found at {path} (set GPUSCHED_BIN)")
    return path


@pytest.fixture(scope="session")
def openb_dir():
    shared = os.environ.get("GPUSCHED_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
    path = os.path.join(shared, "data", "openb")
    if not os.path.isdir(path):
        pytest.skip(f"openb trace not found at {path}")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(bin_, *args, timeout=120, **kw):
    return subprocess.run([bin_, *args], capture_output=True, text=True, timeout=timeout, **kw)
