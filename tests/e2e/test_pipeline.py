"""The README's dev loop against the real control plane: deploy, run the pipeline, re-run it
(memoized), and fail it.

Real: ``scripts/deploy.sh local-k3d`` and ``scripts/submit-pipeline.sh --wait`` as the README
runs them; the API server (schemas, RBAC, admission); Argo's workflow-controller (DAG order,
parameter and ``{{=sprig...}}`` substitution, memoization written to its cache ConfigMap as
ServiceAccount argo/argo); ``argoexec`` for the resource steps (tests/e2e/argo_executor.py): it
creates each TFJob and applies the InferenceService annotation as the pipeline's ServiceAccount
and judges the TFJob by the template's success/failure conditions; the training-operator
(TF_CONFIG, pods, the TFJob's conditions).
Simulated: every container. kwok completes the ingest and select pods (exit 0) and the TFJob
worker pods (exit 0, or exit 1 on a node where they "fail": the pipeline's own
``train-node-selector`` parameter puts them there); no data is read and no model is trained.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import controllers
import pytest
import yaml
from argo_executor import ResourceStepRunner
from e2e_kube import REPO_ROOT, Kubectl, attempts, train_retry_limit

NAMESPACE = "fashion-mnist"
VARIANTS = ("cnn", "dropout", "batch-norm")  # the TFJobs' DAG tasks
TORCH_VARIANTS = ("pytorch",)  # the PyTorchJob's
FAIL_ON_NODE = '{"e2e.fashion-mnist/fail": "true"}'


def _env(kubectl: Kubectl, kubeconfig) -> dict[str, str]:
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KUBECTL": kubectl.binary,
        "TIMEOUT": "300",
        "POLL": "2",
    }


def _script(kubectl, kubeconfig, *argv: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO_ROOT / "scripts" / argv[0]), *argv[1:]],
        cwd=REPO_ROOT, env=_env(kubectl, kubeconfig), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def deployed(platform, kubectl: Kubectl, kubeconfig):
    """``scripts/deploy.sh local-k3d``, the PVC made bindable, argoexec standing in for the
    resource steps' containers."""
    proc = _script(kubectl, kubeconfig, "deploy.sh", "local-k3d")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pvc = kubectl.json("get", "pvc", "fashion-mnist-pvc", "-n", NAMESPACE)
    controllers.provide_volume(kubeconfig, pvc, NAMESPACE)
    runner = ResourceStepRunner(kubectl, controllers.tool_binary("argoexec"), NAMESPACE)
    runner.start()
    yield runner
    runner.stop()
    platform.check_alive()


def _submit(kubectl, kubeconfig, *params: str) -> tuple[subprocess.CompletedProcess, str, float]:
    argv = ["submit-pipeline.sh", "--wait"]
    for p in params:
        argv += ["-p", p]
    t0 = time.monotonic()
    proc = _script(kubectl, kubeconfig, *argv)
    name = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return proc, name.removeprefix("workflow.argoproj.io/"), time.monotonic() - t0


def _diagnose(kubectl, workflow: str, runner: ResourceStepRunner) -> str:
    """The Workflow's phase and message, each node's phase and message, argoexec's outputs."""
    proc = kubectl.run("get", "workflow", workflow, "-n", NAMESPACE, "-o", "json")
    if proc.returncode != 0:
        return proc.stderr
    status = json.loads(proc.stdout).get("status", {})
    lines = [f"workflow {status.get('phase')}: {status.get('message')}"]
    for n in (status.get("nodes") or {}).values():
        lines.append(f"  {n['displayName']}: {n.get('phase')} {n.get('message', '')}")
    for pod, (rc, out) in runner.results.items():
        lines.append(f"argoexec {pod} exit {rc}:\n{out[-1500:]}")
    return "\n".join(lines + runner.errors)


def _nodes(kubectl, workflow: str) -> dict[str, dict]:
    wf = kubectl.json("get", "workflow", workflow, "-n", NAMESPACE)
    return {n["displayName"]: n for n in wf["status"]["nodes"].values()}


@pytest.fixture(scope="module")
def first_run(deployed, kubectl, kubeconfig):
    proc, name, seconds = _submit(kubectl, kubeconfig, "epochs=1")
    assert proc.returncode == 0, f"{proc.stderr}\n{_diagnose(kubectl, name, deployed)}"
    steps = {pod for pod in deployed.results if pod.startswith(name)}
    # resource steps: 3 TFJobs, 1 PyTorchJob, the InferenceService
    assert len(steps) == 5, f"argoexec ran for {steps}\n{_diagnose(kubectl, name, deployed)}"
    return name


def test_pipeline_runs_the_dag_in_order(first_run, kubectl):
    nodes = _nodes(kubectl, first_run)
    start = {k: n.get("startedAt") for k, n in nodes.items()}
    end = {k: n.get("finishedAt") for k, n in nodes.items()}
    assert all(nodes[k]["phase"] == "Succeeded" for k in ("ingest", "select", "serve")), nodes
    for variant in VARIANTS + TORCH_VARIANTS:
        assert nodes[variant]["phase"] == "Succeeded"
        assert end["ingest"] <= start[variant] and end[variant] <= start["select"]
    assert end["select"] <= start["serve"]


def test_train_steps_created_their_tfjobs_through_the_operator(first_run, kubectl):
    for variant in VARIANTS:
        job = kubectl.json("get", "tfjob", f"{first_run}-{variant}-0", "-n", NAMESPACE)
        types = {c["type"]: c["status"] for c in job["status"]["conditions"]}
        assert types.get("Succeeded") == "True", job["status"]
        worker = job["spec"]["tfReplicaSpecs"]["Worker"]
        assert worker["restartPolicy"] == "Never"
        args = worker["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--run-id") + 1] == first_run
        assert args[args.index("--epochs") + 1] == "1"  # the -p given to submit-pipeline.sh
        owners = job["metadata"].get("ownerReferences", [])
        assert any(o["kind"] == "Workflow" and o["name"] == first_run for o in owners)


def test_train_step_created_the_pytorchjob_through_the_operator(first_run, kubectl):
    job = kubectl.json("get", "pytorchjob", f"{first_run}-pytorch-0", "-n", NAMESPACE)
    types = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert types.get("Succeeded") == "True", job["status"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    args = specs["Master"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--run-id") + 1] == first_run
    assert args[args.index("--epochs") + 1] == "1"
    owners = job["metadata"].get("ownerReferences", [])
    assert any(o["kind"] == "Workflow" and o["name"] == first_run for o in owners)


def test_serve_step_applied_the_inferenceservice(first_run, kubectl):
    """argoexec's server-side apply, as the pipeline's ServiceAccount, shares the object with
    deploy.sh: each field manager owns its own fields."""
    isvc = kubectl.json(
        "get", "inferenceservice", "fashion-mnist", "-n", NAMESPACE, "--show-managed-fields"
    )
    annotations = isvc["metadata"].get("annotations", {})
    assert annotations.get("fashion-mnist.example.com/published-by") == first_run, annotations
    managers = {m["manager"] for m in isvc["metadata"]["managedFields"]}
    assert {"fashion-mnist-deploy", "fashion-mnist-pipeline"} <= managers, managers
    assert isvc["spec"]["predictor"]["model"]["storageUri"].startswith("pvc://")


def test_second_run_hits_the_memoization_cache(first_run, deployed, kubectl, kubeconfig):
    proc, second, _ = _submit(kubectl, kubeconfig, "epochs=1")
    assert proc.returncode == 0, f"{proc.stderr}\n{_diagnose(kubectl, second, deployed)}"
    ingest = _nodes(kubectl, second)["ingest"]
    assert (ingest.get("memoizationStatus") or {}).get("hit") is True, ingest
    cache = ingest["memoizationStatus"]["cacheName"]
    # Argo keeps memoization caches in the controller's namespace, written as argo:argo
    cm = kubectl.json("get", "configmap", cache, "-n", "argo")
    assert ingest["memoizationStatus"]["key"] in cm["data"], cm["data"].keys()
    assert "templateName" not in ingest or ingest.get("type") == "Pod"
    assert not [
        n
        for n in _nodes(kubectl, second).values()
        if n.get("displayName") == "ingest" and n.get("phase") != "Succeeded"
    ]


def test_failed_training_fails_the_dev_loop_promptly(
    first_run, deployed, kubectl, kubeconfig, overlay
):
    """``scripts/train.sh cnn`` (the README's dev loop: the pipeline's ``train`` step alone) on
    a node where its workers exit 1: the operator marks each attempt's TFJob Failed, argoexec's
    failureCondition sees it, the step is retried (its retryStrategy: a new job per attempt)
    until its limit, then the step and the Workflow fail, and the script exits 1 without
    waiting for its timeout. (The full pipeline continues past a failed variant by design:
    selection publishes the best of the others.)"""
    limit = train_retry_limit(overlay)
    t0 = time.monotonic()
    proc = _script(
        kubectl, kubeconfig, "train.sh", "cnn", "-p", "epochs=1",
        "-p", f"train-node-selector={FAIL_ON_NODE}",
    )  # fmt: skip
    seconds = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Failed" in proc.stderr or "Error" in proc.stderr, proc.stderr
    assert seconds < 240, f"train.sh took {seconds:.0f} s to report the failure"
    failed = proc.stdout.strip().splitlines()[-1].removeprefix("workflow.argoproj.io/")
    owned = attempts(kubectl, NAMESPACE, "tfjobs", failed)
    # one job per attempt, every one Failed: the retry is bounded
    assert [j["metadata"]["name"] for j in owned] == [f"{failed}-cnn-{n}" for n in range(limit + 1)]
    for job in owned:
        conditions = {c["type"]: c for c in job["status"]["conditions"]}
        assert conditions["Failed"]["status"] == "True", job["status"]
        pods = kubectl.json(
            "get", "pods", "-n", NAMESPACE, "-l",
            f"training.kubeflow.org/job-name={job['metadata']['name']}",
        )  # fmt: skip
        codes = {
            s["state"]["terminated"]["exitCode"]
            for p in pods["items"]
            for s in p["status"].get("containerStatuses", [])
            if "terminated" in s.get("state", {})
        }
        assert codes <= {1}, codes


def test_overlays_apply_cleanly_and_idempotently(deployed, kubectl: Kubectl, namespace: str):
    """The README's ``deploy.sh local-k3d`` left nothing to change (``kubectl diff`` exits 0
    under its field manager), and ``overlays/gpu-cloud`` is accepted by the API server and the
    KServe/training-operator webhooks: a server-side dry run into a fresh namespace (the PVC of
    local-k3d cannot change class in place, and the kwok nodes have no GPUs)."""
    diff = kubectl.run(
        "diff", "--server-side", "--field-manager=fashion-mnist-deploy",
        "-k", str(REPO_ROOT / "overlays/local-k3d"),
    )  # fmt: skip
    assert diff.returncode == 0, diff.stdout + diff.stderr
    docs = [
        d
        for d in yaml.safe_load_all(kubectl("kustomize", str(REPO_ROOT / "overlays/gpu-cloud")))
        if d
    ]
    moved = []
    for d in docs:
        if d["kind"] == "Namespace":
            continue
        d["metadata"]["namespace"] = namespace
        for subject in d.get("subjects") or []:
            if subject.get("namespace") == NAMESPACE:
                subject["namespace"] = namespace
        moved.append(d)
    dry = kubectl.apply(moved, "--server-side", "--dry-run=server", "--field-manager=e2e")
    assert "inferenceservice.serving.kserve.io/fashion-mnist serverside-applied" in dry, dry
    assert "workflowtemplate.argoproj.io/fashion-mnist-pipeline serverside-applied" in dry, dry
