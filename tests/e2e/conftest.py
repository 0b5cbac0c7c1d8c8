"""Fixtures for the e2e tests against the real control plane started by ``make e2e``.

``scripts/e2e-cluster.sh run -- pytest tests/e2e`` starts a real kube-apiserver (RBAC and the
default admission plugins on), etcd, kube-controller-manager and kube-scheduler, with kwok
simulating nodes and pod lifecycles (``hack/e2e/kwok-stages.yaml``), and exports
``FMNIST_E2E_KUBECONFIG`` (admin) and ``KUBECTL`` (the kubectl 1.34 built by scripts/tools.sh).
Without them every test here FAILS (never skips): run ``make e2e``. ``make test`` does not
collect this directory.

Helpers (plain functions/classes) live in ``e2e_kube.py``. Fixtures: ``kubeconfig`` (admin
kubeconfig path), ``kubectl`` (a :class:`Kubectl`), ``namespace`` (a fresh namespace per test,
deleted afterwards), ``sa_kubeconfig`` (a kubeconfig holding a ServiceAccount's token from the
TokenRequest API), ``restricted_pod_spec``, ``platform`` (the installed platform and its running
controllers).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_kube import REPO_ROOT, Kubectl, create_namespace


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    """Admin kubeconfig of the running e2e control plane (fails the test when absent)."""
    path = os.environ.get("FMNIST_E2E_KUBECONFIG")
    if not path or not Path(path).is_file():
        pytest.fail(
            "no e2e control plane: FMNIST_E2E_KUBECONFIG is unset or missing. "
            "Run the e2e tests with `make e2e` (scripts/e2e-cluster.sh run -- ...)."
        )
    return Path(path)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    """A :class:`Kubectl` bound to the admin kubeconfig; checks the API server is ready."""
    binary = os.environ.get("KUBECTL")
    if not binary or not Path(binary).is_file():
        pytest.fail("KUBECTL (the kubectl built by scripts/tools.sh) is unset; run `make e2e`")
    k = Kubectl(binary, kubeconfig)
    proc = k.run("get", "--raw", "/readyz", timeout=20)
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        pytest.fail(f"e2e API server not ready: {proc.stdout.strip()} {proc.stderr.strip()}")
    return k


@pytest.fixture(scope="session")
def platform(kubectl: Kubectl, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory):
    """The platform installed by ``scripts/install-platform.sh`` (offline), its controllers
    running as the install's pods on the real node (``controllers.py``), once per session."""
    import controllers

    # under the run's directory when there is one: kept with the cluster's logs after a
    # failure (scripts/e2e-cluster.sh keep_logs), where its message points
    run_dir = os.environ.get("FMNIST_E2E_DIR")
    workdir = Path(run_dir) / "logs" / "platform" if run_dir else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    return controllers.start_platform(kubeconfig, workdir or tmp_path_factory.mktemp("controllers"))


@pytest.fixture(scope="module")
def overlay(kubectl: Kubectl) -> list[dict]:
    """The rendered local-k3d overlay (``kubectl kustomize overlays/local-k3d``), as a list."""
    import yaml

    rendered = kubectl("kustomize", str(REPO_ROOT / "overlays" / "local-k3d"))
    return [d for d in yaml.safe_load_all(rendered) if d]


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace ``e2e-<test>-<random>``, deleted (without waiting) after the test. At
    most 27 characters: KServe's predictor host label ``<isvc>-predictor-<namespace>`` must fit
    in 63."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:16].strip("-")
    name = create_namespace(kubectl, f"e2e-{stem}-{uuid.uuid4().hex[:6]}")
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false")


@pytest.fixture
def sa_kubeconfig(kubectl: Kubectl, kubeconfig: Path, tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``sa_kubeconfig(namespace, name, duration="1h") -> Path`` writes a kubeconfig
    whose only credential is a token of ServiceAccount ``namespace/name`` issued by the
    TokenRequest API (``kubectl create token``); cluster and CA are the admin kubeconfig's."""

    import controllers

    def make(namespace: str, name: str, duration: str = "1h") -> Path:
        dest = tmp_path / f"kubeconfig-{namespace}-{name}"
        return controllers.sa_kubeconfig(kubeconfig, namespace, name, dest, duration)

    return make


@pytest.fixture
def restricted_pod_spec() -> Callable[..., dict]:
    """Factory: ``restricted_pod_spec(restart_policy="Never") -> dict`` a pod spec with one
    container that satisfies the ``restricted`` Pod Security Standard and has requests and
    limits (kwok runs no container; the image is never pulled)."""

    def make(restart_policy: str = "Never") -> dict:
        return {
            "restartPolicy": restart_policy,
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/e2e/noop:0.0.0",
                    "command": ["true"],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "100m", "memory": "64Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        }

    return make
