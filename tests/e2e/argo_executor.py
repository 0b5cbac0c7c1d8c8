"""The kubelet's part for Argo *resource* steps: run the real ``argoexec`` for their pods.

kwok runs no container, so an Argo ``resource:`` step (the pipeline's ``train`` and ``serve``)
would never create its TFJob or apply its InferenceService. :class:`ResourceStepRunner` watches
the Workflow pods of a namespace; for each Running pod whose ``main`` container is
``argoexec resource <action>`` it runs the real ``argoexec`` (built from Argo's sources by
``scripts/tools.sh``, ``hack/tools/argo.sh``) as a local process with that container's
environment (``ARGO_TEMPLATE`` as the workflow-controller rendered it, pod name/UID, node id,
deadline) and a kubeconfig holding the token of the pod's own ServiceAccount, so the pipeline
Role is what the API server enforces. argoexec creates the resource with its embedded kubectl,
polls it against the template's ``successCondition``/``failureCondition`` and writes the step's
WorkflowTaskResult, exactly as in a real pod. When it exits, the runner hands its exit code to
kwok (annotation ``e2e.fashion-mnist/executed``, or the failure label and exit-code annotation),
and kwok completes the pod (hack/e2e/kwok-stages.yaml).

Each argoexec runs in a private mount namespace with its own ``/tmp`` (``unshare``; argoexec
writes the manifest to the fixed path ``/tmp/manifest.yaml``), so parallel steps do not clash.
Container steps (ingest, select) are completed by kwok without running anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from e2e_kube import E2E_ANNOTATION_EXIT_CODE, E2E_LABEL_FAIL, Kubectl

ANNOTATION_EXECUTED = "e2e.fashion-mnist/executed"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"


def resource_action(pod: dict) -> str | None:
    """The action of an Argo resource-step pod (``create``, ``apply``...), else None."""
    for c in pod["spec"].get("containers", []):
        cmd = (c.get("command") or []) + (c.get("args") or [])
        for i in range(
            len(cmd) - 2
        ):  # `/var/run/argo/argoexec emissary ... -- argoexec resource X`
            if c["name"] == "main" and cmd[i : i + 2] == ["argoexec", "resource"]:
                return cmd[i + 2]
    return None


def container_env(pod: dict, name: str = "main") -> dict[str, str]:
    """A container's environment as the kubelet would set it (values and the downward-API
    fields Argo uses: metadata.name/namespace/uid), plus ``ARGO_TEMPLATE`` from the ``init``
    container (which hands it to ``main`` as /var/run/argo/template in a real pod). Raises
    KeyError for other sources."""
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
    }
    container = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    init = next((c for c in pod["spec"].get("initContainers", []) if c["name"] == "init"), {})
    env: dict[str, str] = {}
    # the template reaches `main` through a file the `init` container writes from its env
    template = [e for e in init.get("env", []) if e["name"] == "ARGO_TEMPLATE"]
    for e in template + container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


class ResourceStepRunner(threading.Thread):
    """Runs argoexec for every resource-step pod of ``namespace`` until :meth:`stop`.

    ``results`` maps pod name -> (exit code, argoexec output) once a step has run.
    """

    def __init__(self, kubectl: Kubectl, argoexec: Path, namespace: str, poll: float = 0.5):
        super().__init__(daemon=True, name="argoexec-runner")
        self.kubectl = kubectl
        self.argoexec = argoexec
        self.namespace = namespace
        self.poll = poll
        self.results: dict[str, tuple[int, str]] = {}
        self._seen: set[str] = set()
        self._halt = threading.Event()
        self._workers: list[threading.Thread] = []
        self._procs: list[subprocess.Popen] = []
        self._dir = Path(tempfile.mkdtemp(prefix="argoexec-", dir="/var/tmp"))
        self.errors: list[str] = []

    def _kubeconfig(self, pod: dict) -> Path:
        """A kubeconfig of the pod's ServiceAccount, its CA inline (argoexec's /tmp is a
        private tmpfs, so no file path under /tmp would resolve)."""
        from controllers import sa_kubeconfig

        sa = pod["spec"].get("serviceAccountName") or "default"
        dest = self._dir / f"{pod['metadata']['name']}.kubeconfig"
        return sa_kubeconfig(self.kubectl.kubeconfig, self.namespace, sa, dest)

    def _execute(self, pod: dict, action: str) -> None:
        name = pod["metadata"]["name"]
        try:
            kubeconfig = self._kubeconfig(pod)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                **container_env(pod),
                "HOME": str(self._dir),  # kubectl's discovery cache (~/.kube), not the cwd
                "KUBECONFIG": str(kubeconfig),
                "RESOURCE_STATE_CHECK_INTERVAL": "1s",
            }
            cmd = [
                "unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount -t tmpfs e2e-tmp /tmp && exec "$@"', "argoexec",
                str(self.argoexec), "resource", action, "--kubeconfig", str(kubeconfig),
            ]  # fmt: skip
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=self._dir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self._procs.append(proc)
            out, _ = proc.communicate()
            self.results[name] = (proc.returncode, out)
            pod_ref = ("pod", name, "-n", self.namespace)
            if proc.returncode == 0:
                self.kubectl("annotate", *pod_ref, f"{ANNOTATION_EXECUTED}=true", "--overwrite")
            else:
                code = f"{E2E_ANNOTATION_EXIT_CODE}={proc.returncode}"
                self.kubectl("annotate", *pod_ref, code, "--overwrite")
                self.kubectl("label", *pod_ref, f"{E2E_LABEL_FAIL}=true", "--overwrite")
        except Exception as e:  # reported by the test through self.errors
            self.errors.append(f"{name}: {e!r}")
            # fail the step instead of leaving its pod Running until the test's timeout
            self.kubectl.run("label", "pod", name, "-n", self.namespace, f"{E2E_LABEL_FAIL}=true")

    def run(self) -> None:  # noqa: D102 (threading.Thread API)
        while not self._halt.is_set():
            try:
                proc = self.kubectl.run(
                    "get", "pods", "-n", self.namespace, "-l", WORKFLOW_LABEL, "-o", "json"
                )
                pods = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
            except (subprocess.TimeoutExpired, ValueError, KeyError) as e:
                self.errors.append(f"listing pods: {e!r}")  # an API hiccup: poll again
                pods = []
            if not self._halt.is_set():
                for pod in pods:
                    name = pod["metadata"]["name"]
                    action = resource_action(pod)
                    running = (pod.get("status") or {}).get("phase") == "Running"
                    if action and running and name not in self._seen:
                        self._seen.add(name)
                        t = threading.Thread(target=self._execute, args=(pod, action), daemon=True)
                        t.start()
                        self._workers.append(t)
            time.sleep(self.poll)

    def stop(self) -> None:
        """Stop watching, kill argoexec processes still waiting on their resource, and remove
        the kubeconfigs (ServiceAccount tokens)."""
        self._halt.set()
        self.join(timeout=10)
        for _ in range(2):  # a worker may start its process while the first pass runs
            for p in self._procs:
                if p.poll() is None:
                    p.kill()
            for t in self._workers:
                t.join(timeout=10)
        shutil.rmtree(self._dir, ignore_errors=True)
