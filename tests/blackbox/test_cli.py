"""The command table: help, version, unknown commands."""
import pytest

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


@pytest.mark.parametrize("cmd", [["simulate", "stray"], ["status", "stray"], ["webhook", "stray"],
                                 ["device-plugin", "stray"], ["gen-trace", "--out", "/tmp/x", "stray"],
                                 ["webhook", "gen-certs", "--out", "/tmp/x", "stray"]])
def test_stray_argument_is_named(gpusched_bin, cmd):
    r = run(gpusched_bin, *cmd)
    assert r.returncode == 2 and "unexpected argument 'stray' (see --help)" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["simulate", "status", "webhook", "device-plugin", "gen-trace",
                                 "extender"])
def test_bad_flag_and_help(gpusched_bin, cmd):
    r = run(gpusched_bin, cmd, "--no-such-flag")
    assert r.returncode == 2 and r.stderr.startswith("gpusched %s: " % cmd) and \
        "--no-such-flag" in r.stderr, r.stderr
    r = run(gpusched_bin, cmd, "--help")
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stdout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_flag_takes_finite_numbers_only(gpusched_bin, value):
    # the extender read nan as "unset" and kept its default without a word
    r = run(gpusched_bin, "extender", "--bind-wait", value, "--nodes", "/nonexistent")
    assert r.returncode == 2 and f"--bind-wait: '{value}' is not a number" in r.stderr, r.stderr
