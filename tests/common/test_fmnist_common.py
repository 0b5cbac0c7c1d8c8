"""The shared facts and the command-line convention (fmnist_common): no TensorFlow, one-line
errors, exit codes."""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys

import pytest

import fmnist_common
from fmnist_common import parse_version, predict_body, predict_path
from fmnist_common.cli import ConfigError, options_argv, positive_int, run_cli


def test_importing_the_shared_facts_and_clients_loads_no_tensorflow():
    code = (
        "import sys, fmnist_common, fmnist_common.cli, serving.client, serving.launch, "
        "loadtest.payload; print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("1", 1),
        ("0042", 42),
        (str(2**63 - 1), 2**63 - 1),
        (".staging-3-ab12", None),
        ("tmp", None),
        ("1a", None),
        ("", None),
        ("\u0663", None),
        ("-1", None),
        (" 1", None),
    ],
)
def test_version_directory_rule(name, version):
    assert parse_version(name) == version


def test_v1_request():
    body = predict_body([b"\xff\xd8a", b"\x89PNG"])
    assert body == {"instances": [{"b64": "/9hh"}, {"b64": "iVBORw=="}]}
    assert base64.b64decode(body["instances"][1]["b64"], validate=True) == b"\x89PNG"
    assert predict_path() == "/v1/models/fashion-mnist:predict"
    assert predict_path("m") == "/v1/models/m:predict"
    assert len(fmnist_common.CLASS_NAMES) == fmnist_common.NUM_CLASSES == 10


def test_free_ports_are_distinct():
    ports = fmnist_common.free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)


def test_options_argv_and_positive_int():
    assert options_argv({"--a": 1, "--b": "x y"}) == ["--a", "1", "--b", "x y"]
    assert positive_int("3") == 3
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prog")
    p.add_argument("--n", type=positive_int, default=1)
    return p


def test_run_cli_exit_codes(capsys):
    assert run_cli(lambda a: 0, _parser(), argv=[]) == 0
    assert run_cli(lambda a: 3, _parser(), argv=[]) == 3
    assert run_cli(lambda a: None, _parser(), argv=[]) == 0

    def config_error(args):
        raise ConfigError("no model under\n/x: run make demo first")

    assert run_cli(config_error, _parser(), argv=[]) == 1
    assert capsys.readouterr().err == "prog: error: no model under /x: run make demo first\n"

    def expected(args):
        raise LookupError("gone")

    assert run_cli(expected, _parser(), (LookupError,), []) == 1
    assert capsys.readouterr().err == "prog: error: gone\n"

    def bug(args):
        raise KeyError("bug")

    with pytest.raises(KeyError):  # not expected: keeps its traceback
        run_cli(bug, _parser(), (), [])
    with pytest.raises(SystemExit) as usage:
        run_cli(lambda a: 0, _parser(), argv=["--n", "0"])
    assert usage.value.code == 2


PID1_PROGRAM = """
import sys, time
from fmnist_common.cli import exit_on_term_as_pid1
if sys.argv[1] == "handler":
    assert exit_on_term_as_pid1()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("handler", [True, False])
def test_a_program_running_as_pid_1_exits_on_sigterm(handler):
    """A container's PID 1 (a new PID namespace here, as in a pod) gets no SIGTERM it has no
    handler for: without :func:`exit_on_term_as_pid1` the program outlives the signal (what a
    deleted pod's trainer did for its grace period); with it, it exits 143 at once."""
    import os
    import signal
    import time
    from pathlib import Path

    proc = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", sys.executable, "-c",
         PID1_PROGRAM, "handler" if handler else "none"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": "src"},
    )  # fmt: skip
    pid1 = 0
    try:
        assert proc.stdout.readline().strip() == "ready"
        (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        pid1 = int(child)
        os.kill(pid1, signal.SIGTERM)
        if handler:
            assert proc.wait(timeout=10) == 143
        else:
            time.sleep(2)
            assert proc.poll() is None, "PID 1 died of a signal it has no handler for"
    finally:
        if pid1 and proc.poll() is None:
            os.kill(pid1, signal.SIGKILL)  # SIGKILL reaches it; unshare then returns
        proc.kill()
        proc.wait()
