"""Helpers for the e2e tests (fixtures are in ``conftest.py``): :class:`Kubectl`, the kubectl
wrapper every e2e test uses; :func:`wait_until`, a bounded poll; :func:`versions_env`; the label
and annotation that drive the kwok failure stages (hack/e2e/kwok-stages.yaml)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_LABEL_FAIL = "e2e.fashion-mnist/fail"
E2E_ANNOTATION_EXIT_CODE = "e2e.fashion-mnist/exit-code"
DEFAULT_TIMEOUT_S = 60.0


class KubectlError(AssertionError):
    """A kubectl command exited non-zero; carries the command, exit code and stderr."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}: {stderr.strip()}")


class Kubectl:
    """Runs the built kubectl against one kubeconfig.

    ``kubectl("get", "pods", "-n", ns)`` returns stdout (str) and raises :class:`KubectlError`
    on a non-zero exit (``check=False`` returns the CompletedProcess instead). Every call has a
    timeout (seconds, default 60) so a hung API call fails the test instead of hanging it.
    """

    def __init__(self, binary: str, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig K ARGS``; never raises on a non-zero exit."""
        cmd = [self.binary, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        return subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        kubeconfig: Path | None = None,
    ) -> str:
        """Run kubectl and return stdout; raise :class:`KubectlError` on a non-zero exit."""
        proc = self.run(*args, input=input, timeout=timeout, kubeconfig=kubeconfig)
        if proc.returncode != 0:
            raise KubectlError(list(args), proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout

    def json(self, *args: str, **kwargs: Any) -> Any:
        """Run ``kubectl ARGS -o json`` and return the decoded object."""
        return json.loads(self(*args, "-o", "json", **kwargs))

    def apply(self, objects: dict | list[dict], *extra: str, **kwargs: Any) -> str:
        """``kubectl apply -f -`` of one object or a list of objects (serialized as YAML)."""
        docs = objects if isinstance(objects, list) else [objects]
        return self("apply", "-f", "-", *extra, input=yaml.safe_dump_all(docs), **kwargs)

    def wait(self, target: str, condition: str, *extra: str, timeout: float = DEFAULT_TIMEOUT_S):
        """``kubectl wait --for=CONDITION TARGET`` bounded by ``timeout`` seconds.

        ``condition`` is kubectl's syntax: ``condition=Complete``,
        ``jsonpath={.status.phase}=Succeeded`` or ``delete``.
        """
        return self(
            "wait",
            f"--for={condition}",
            target,
            f"--timeout={int(timeout)}s",
            *extra,
            timeout=timeout + 15,
        )


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.5,
    what: str = "condition",
) -> Any:
    """Poll ``predicate()`` until it returns a truthy value (returned) or ``timeout`` seconds
    pass (AssertionError naming ``what`` and the last value/exception)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except (KubectlError, subprocess.TimeoutExpired) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last}")
        time.sleep(interval)


def create_namespace(kubectl: Kubectl, name: str) -> str:
    """Create namespace ``name`` and wait for its ``default`` ServiceAccount (pods cannot be
    admitted before the controller-manager creates it); returns ``name``."""
    kubectl("create", "namespace", name)
    wait_until(
        lambda: kubectl.run("get", "serviceaccount", "default", "-n", name).returncode == 0,
        timeout=30,
        what=f"ServiceAccount default in {name}",
    )
    return name


def versions_env() -> dict[str, str]:
    """The KEY=VALUE pairs of versions.env (the one place versions are pinned)."""
    out: dict[str, str] = {}
    for line in (REPO_ROOT / "versions.env").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def train_retry_limit(overlay: list[dict]) -> int:
    """The pipeline's ``train`` step retry limit (its ``retryStrategy.limit``) in the rendered
    overlay's WorkflowTemplate: a failing run makes ``limit + 1`` jobs."""
    (wft,) = [o for o in overlay if o["kind"] == "WorkflowTemplate"]
    (train,) = [t for t in wft["spec"]["templates"] if t["name"] == "train"]
    return int(train["retryStrategy"]["limit"])


def attempts(kubectl: Kubectl, ns: str, plural: str, workflow: str) -> list[dict]:
    """The training jobs (``tfjobs``/``pytorchjobs``) that Workflow ``workflow`` created in
    ``ns`` (its ownerReferences), one per attempt of its step, in attempt order (the name's
    ``-<attempt>`` suffix)."""
    items = kubectl.json("get", plural, "-n", ns)["items"]
    mine = [
        j
        for j in items
        if any(o["name"] == workflow for o in j["metadata"].get("ownerReferences") or [])
    ]
    return sorted(mine, key=lambda j: int(j["metadata"]["name"].rsplit("-", 1)[1]))


def one(objs: list[dict], kind: str) -> dict:
    """The single object of ``kind`` (AssertionError when there is not exactly one)."""
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} in the rendered overlay"
    return found[0]


def condition(job: dict, kind: str) -> bool:
    """True when the job (TFJob, PyTorchJob) has condition ``kind`` with status True."""
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conds)
