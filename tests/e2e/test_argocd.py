"""Argo CD against the real API server: the README's bootstrap command, every Application and
AppProject accepted with Argo CD's own CRDs, and the health script run by a real Lua runtime.

Real: ``scripts/bootstrap-argocd.sh`` (offline, rendering ``argocd/install`` from the pinned
mirror) applies Argo CD v3.5.1 server-side into the e2e API server, which validates every object
against Argo CD's CRD schemas; the ``argocd-cm`` health scripts are read back from the cluster
and executed by Lua 5.1 (``lupa``; Argo CD embeds gopher-lua, a Lua 5.1).
Simulated: Argo CD's own pods are kwok pods (Ready, running nothing), so nothing is synced from
git here; the sync order itself is checked offline by ``make validate`` (``sync-waves``).
TFJobs and Workflows are run state created by pipeline runs, not objects Argo CD syncs, so the
install carries no TFJob health script (Argo CD would never use it for an Application's health).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from e2e_kube import REPO_ROOT, Kubectl
from lupa import lua51

ENVIRONMENTS = ("local-k3d", "gpu-cloud")
HEALTH_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


@pytest.fixture(scope="module")
def bootstrapped(kubectl: Kubectl, kubeconfig) -> str:
    """Runs the README's ``scripts/bootstrap-argocd.sh local-k3d`` once; returns its output."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl.binary}
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts/bootstrap-argocd.sh"), "local-k3d"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"bootstrap-argocd.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_bootstrap_applies_only_projects_and_root_app(bootstrapped, kubectl: Kubectl):
    apps = kubectl.json("get", "applications.argoproj.io", "-n", "argocd")["items"]
    assert [a["metadata"]["name"] for a in apps] == ["root"], (
        "bootstrap applies the root app only; the sync waves of argocd/apps order the rest"
    )
    projects = {
        p["metadata"]["name"] for p in kubectl.json("get", "appprojects", "-n", "argocd")["items"]
    }
    assert {"platform", "fashion-mnist"} <= projects, projects
    root = apps[0]["spec"]
    assert root["source"]["path"] == "argocd/apps/local-k3d"
    assert root["source"]["repoURL"].endswith(".git"), root["source"]["repoURL"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_application_accepted_by_the_api_server(bootstrapped, kubectl: Kubectl, env):
    out = kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=e2e", "--force-conflicts",
        "-k", str(REPO_ROOT / "argocd/apps" / env),
    )  # fmt: skip
    applied = [line for line in out.splitlines() if line.strip()]
    assert any(line.startswith("application.argoproj.io/") for line in applied), out
    assert any(line.startswith("appproject.argoproj.io/") for line in applied), out


def test_a_broken_application_is_refused(bootstrapped, kubectl: Kubectl):
    """The API server really validates against Argo CD's CRD schema (so the test above can fail)."""
    bad = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "broken", "namespace": "argocd"},
        "spec": {"project": "fashion-mnist", "destination": {}, "source": {"repoURL": 7}},
    }
    proc = kubectl.run("apply", "--dry-run=server", "-f", "-", input=__import__("json").dumps(bad))
    assert proc.returncode != 0
    assert "repoURL" in proc.stderr, proc.stderr


# --- health scripts, as Argo CD runs them -------------------------------------------------


def _health(script: str, obj: dict) -> dict:
    """Run one Argo CD health script the way Argo CD does: global ``obj``, returns a table."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    out = dict(result.items())
    assert out["status"] in HEALTH_STATUSES, out
    return out


@pytest.fixture(scope="module")
def health_scripts(bootstrapped, kubectl: Kubectl) -> dict[str, str]:
    data = kubectl.json("get", "configmap", "argocd-cm", "-n", "argocd")["data"]
    prefix = "resource.customizations.health."
    return {k.removeprefix(prefix): v for k, v in data.items() if k.startswith(prefix)}


@pytest.mark.parametrize("status", ["Healthy", "Progressing", "Degraded", "Suspended", "Missing"])
def test_application_health_passes_the_child_health_through(health_scripts, status):
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "ml", "namespace": "argocd"},
        "status": {"health": {"status": status, "message": f"child is {status}"}},
    }
    out = _health(health_scripts["argoproj.io_Application"], app)
    assert out["status"] == status
    assert out["message"] == f"child is {status}"
    fresh = _health(health_scripts["argoproj.io_Application"], {"kind": "Application"})
    assert fresh["status"] == "Progressing"
