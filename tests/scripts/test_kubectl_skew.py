"""scripts/lib.sh ``kubectl_for_cluster``: the cluster scripts use a kubectl within kubectl's
supported version skew of the API server (one minor version either way), or refuse naming both.

Fake kubectls report the versions they are given (as ``kubectl version -o json`` prints them);
one case runs the venv's real kubectl against a loopback HTTP server that answers ``/version``
as an API server does.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_KUBECTL = REPO / ".venv" / "bin" / "kubectl"
FAKE = """#!{python}
import json, sys
if sys.argv[1:3] != ["version", "-o"]:
    sys.exit("unexpected: " + " ".join(sys.argv[1:]))
print("kubectl's own stderr", file=sys.stderr)  # not the user's off a terminal
out = {{"clientVersion": {{"major": "1", "minor": {client!r}}}}}
if {server!r}:
    out["serverVersion"] = {{"major": "1", "minor": {server!r}}}
print(json.dumps(out))
sys.exit(0 if {server!r} else 1)  # as kubectl: 1 when the server does not answer
"""


def fake_kubectl(directory: Path, client: str, server: str, name: str = "kubectl") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text(FAKE.format(python=sys.executable, client=client, server=server))
    exe.chmod(0o755)
    return exe


def chosen(env_extra: dict[str, str], path_dir: Path | None = None):
    """Run kubectl_for_cluster in a shell that sourced lib.sh: (returncode, KUBECTL, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECTL"}
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    env.update(env_extra)
    proc = subprocess.run(
        ["bash", "-c", f'source {REPO}/scripts/lib.sh; kubectl_for_cluster; echo "$KUBECTL"'],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return proc.returncode, proc.stdout.strip(), proc.stderr


@pytest.mark.parametrize(("client", "server"), [("34", "34"), ("35", "34"), ("33", "34+")])
def test_a_given_kubectl_within_the_skew_is_kept(tmp_path, client, server):
    kubectl = fake_kubectl(tmp_path, client, server)
    rc, used, err = chosen({"KUBECTL": str(kubectl)})
    assert (rc, used) == (0, str(kubectl)), err


@pytest.mark.parametrize(("client", "server"), [("37", "34"), ("32", "34")])
def test_a_given_kubectl_outside_the_skew_is_refused_naming_both(tmp_path, client, server):
    kubectl = fake_kubectl(tmp_path, client, server)
    rc, _, err = chosen({"KUBECTL": str(kubectl)})
    assert rc == 1
    assert f"{kubectl} is 1.{client}" in err and "API server (1.34)" in err, err
    assert "install kubectl 1.33 to 1.35 or set KUBECTL" in err, err


def test_no_answer_from_the_server_says_nothing(tmp_path):
    kubectl = fake_kubectl(tmp_path, "37", "")
    rc, used, err = chosen({"KUBECTL": str(kubectl)})
    assert (rc, used, err) == (0, str(kubectl), "")


@pytest.mark.parametrize("output", ["[1, 2]", '"1.34"', "not json", ""])
def test_output_that_is_no_version_object_is_no_answer(tmp_path, output):
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/usr/bin/env bash\necho '{output}'\n")
    kubectl.chmod(0o755)
    rc, used, err = chosen({"KUBECTL": str(kubectl)})
    assert (rc, used) == (0, str(kubectl)) and "Traceback" not in err, err


def test_a_given_kubectl_that_is_no_command_is_refused_not_replaced(tmp_path):
    rc, _, err = chosen({"KUBECTL": str(tmp_path / "no-such-kubectl")})
    assert rc == 1 and "is not a command" in err, err


def test_an_out_of_skew_kubectl_is_refused_though_another_gets_no_answer(tmp_path):
    """PATH's kubectl answers (1.37 against 1.34); the venv's gets no answer (no kubeconfig the
    fake server knows): neither is used, and the refusal names both."""
    path_dir = tmp_path / "bin"
    path_kubectl = fake_kubectl(path_dir, "37", "34")
    rc, _, err = chosen({"KUBECONFIG": str(tmp_path / "none")}, path_dir)
    assert rc == 1 and f"{path_kubectl} is 1.37" in err, err
    assert f"{VENV_KUBECTL}: no version from it and the server" in err, err


@pytest.fixture
def api_server():
    """A loopback HTTP server answering /version as an API server 1.36 does; its kubeconfig."""

    class Version(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps({"major": "1", "minor": "36", "gitVersion": "v1.36.0"}).encode()
            self.send_response(200 if self.path.startswith("/version") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(("path_client", "venv_chosen"), [("33", True), ("35", False)])
def test_paths_kubectl_first_then_the_venvs(tmp_path, api_server, path_client, venv_chosen):
    """No KUBECTL set: PATH's kubectl when within the skew (1.35 of the server's 1.36), else
    (1.33) the venv's real kubectl (1.37, one minor), asked of a loopback API server."""
    assert VENV_KUBECTL.is_file(), "no .venv/bin/kubectl (make venv)"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{api_server}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    path_dir = tmp_path / "bin"
    path_kubectl = fake_kubectl(path_dir, path_client, "36")
    rc, used, err = chosen({"KUBECONFIG": str(kubeconfig)}, path_dir)
    assert (rc, used) == (0, str(VENV_KUBECTL if venv_chosen else path_kubectl)), err


def test_every_cluster_script_checks_its_kubectl():
    """The scripts that talk to a cluster call kubectl_for_cluster (install-platform.sh but in
    --render mode)."""
    for script in ("deploy.sh", "bootstrap-argocd.sh", "submit-pipeline.sh", "k3d-up.sh",
                   "install-platform.sh", "pulumi.sh"):  # fmt: skip
        assert "\nkubectl_for_cluster\n" in (REPO / "scripts" / script).read_text() or (
            "then kubectl_for_cluster; fi" in (REPO / "scripts" / script).read_text()
        ), script


def test_deploy_refuses_a_kubectl_outside_the_skew_before_any_change(tmp_path):
    kubectl = fake_kubectl(tmp_path, "37", "34")
    proc = subprocess.run(
        [str(REPO / "scripts" / "deploy.sh"), "local-k3d"],
        env={**os.environ, "KUBECTL": str(kubectl)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "kubectl's supported skew" in proc.stderr and "unexpected" not in proc.stderr
