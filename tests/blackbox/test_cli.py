"""The command table: help, version, unknown commands."""
from conftest import run


def test_help_lists_commands(gpusched_bin):
    r = run(gpusched_bin, "help")
    assert r.returncode == 0
    assert "version" in r.stdout and "usage: gpusched" in r.stdout


def test_version(gpusched_bin):
    r = run(gpusched_bin, "version")
    assert r.returncode == 0 and r.stdout.startswith("gpusched ")


def test_unknown_command(gpusched_bin):
    r = run(gpusched_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr


def test_no_args_is_usage_error(gpusched_bin):
    r = run(gpusched_bin)
    assert r.returncode == 2 and "usage" in r.stderr
