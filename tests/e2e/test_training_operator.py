"""The project's TFJob and PyTorchJob through the real Kubeflow training-operator (v1.9.4, the
pod of its install's Deployment on the real node, its validating webhook served through its
Service with its own rotator's certificate; tests/e2e/controllers.py).

The jobs are the ones the repository defines: the ``train`` (TFJob) and ``train-pytorch``
(PyTorchJob) templates of the WorkflowTemplate as rendered by ``kubectl kustomize
overlays/local-k3d`` (the environment's parameter values substituted the way Argo does,
``model-type=cnn``). They are created directly here, not through Argo (the Workflow tests cover
that path).

Simulated: no container runs. kwok moves each pod the operator creates to Running and then
(pods owned by a TFJob or PyTorchJob) to Succeeded with exit code 0, or, for a pod labelled
``e2e.fashion-mnist/fail: "true"``, to Failed with exit code 1 (hack/e2e/kwok-stages.yaml).
TF_CONFIG and MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK are therefore checked as the operator
writes them into the pod spec, not as TensorFlow or PyTorch read them (those are read by the
real processes of tests/training/test_multiworker.py and test_torch_ddp.py). The namespace
enforces the ``restricted`` Pod Security Standard, so the API server itself rejects a replica
pod that is not restricted.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import controllers
import yaml
from e2e_kube import E2E_LABEL_FAIL, Kubectl, wait_until

from validation.argo import RETRIES, substitute

WORKERS_TIMEOUT_S = 120


def one(objs: list[dict], kind: str) -> dict:
    """The single object of ``kind`` (AssertionError when there is not exactly one)."""
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} in the rendered overlay"
    return found[0]


def render_job(
    overlay: list[dict], name: str, model_type: str, template: str = "train"
) -> tuple[dict, dict]:
    """(job, parameter values) from the WorkflowTemplate's ``train`` (TFJob) or
    ``train-pytorch`` (PyTorchJob) template with Argo's substitutions; AssertionError naming
    any placeholder left (the template changed)."""
    wt = one(overlay, "WorkflowTemplate")
    params = {p["name"]: str(p["value"]) for p in wt["spec"]["arguments"]["parameters"]}
    values = {f"workflow.parameters.{k}": v for k, v in params.items()}
    values |= {"workflow.name": name, "inputs.parameters.model-type": model_type}
    values[RETRIES] = "0"  # the step's first attempt (its retryStrategy)
    train = next(t for t in wt["spec"]["templates"] if t["name"] == template)
    text = substitute(train["resource"]["manifest"], values)
    assert "{{" not in text, f"unsubstituted placeholder in the train manifest: {text}"
    return yaml.safe_load(text), params


def setup_namespace(kubectl: Kubectl, kubeconfig: Path, overlay: list[dict], ns: str) -> None:
    """Restricted Pod Security in ``ns``; the project's PVC, bound (controllers.provide_volume)."""
    kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite"
    )
    controllers.provide_volume(kubeconfig, one(overlay, "PersistentVolumeClaim"), ns)


def condition(job: dict, kind: str) -> bool:
    """True when the TFJob has condition ``kind`` with status True."""
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conds)


def wait_for_condition(kubectl: Kubectl, job: dict, kind: str) -> dict:
    """The job (TFJob or PyTorchJob, as created) once it has condition ``kind``."""
    ref = f"{job['kind'].lower()}/{job['metadata']['name']}"
    ns = job["metadata"]["namespace"]
    return wait_until(
        lambda: (j := kubectl.json("get", ref, "-n", ns)) and condition(j, kind) and j,
        timeout=WORKERS_TIMEOUT_S,
        what=f"{ref} {kind}",
    )


def test_tfjob_succeeds_with_tf_config_pvc_resources_restricted(
    platform, kubectl, kubeconfig, overlay, namespace
):
    setup_namespace(kubectl, kubeconfig, overlay, namespace)
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    job, params = render_job(overlay, name, "cnn")
    job["metadata"]["namespace"] = namespace
    kubectl.apply(job)
    workers = int(params["workers"])
    assert workers == 2

    def worker_pods():
        pods = kubectl.json(
            "get", "pods", "-n", namespace, "-l",
            f"training.kubeflow.org/job-name={job['metadata']['name']}",
        )["items"]  # fmt: skip
        return pods if len(pods) == workers else None

    pods = wait_until(worker_pods, timeout=WORKERS_TIMEOUT_S, what=f"{workers} worker pods")
    final = wait_for_condition(kubectl, job, "Succeeded")
    platform.check_alive()
    assert final["status"]["replicaStatuses"]["Worker"]["succeeded"] == workers

    resources = json.loads(params["train-resources"])
    hosts = [f"{job['metadata']['name']}-worker-{i}.{namespace}.svc:2222" for i in range(workers)]
    for pod in pods:
        index = int(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"])
        (c,) = pod["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["cluster"] == {"worker": hosts}
        assert tf_config["task"] == {"type": "worker", "index": index}
        assert c["resources"] == resources
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["shared"] == "/mnt/shared"
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["shared"]["persistentVolumeClaim"]["claimName"] == "fashion-mnist-pvc"
        psc, csc = pod["spec"]["securityContext"], c["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"]["type"] == "RuntimeDefault"
        assert csc["allowPrivilegeEscalation"] is False
        assert csc["capabilities"]["drop"] == ["ALL"]
        assert pod["spec"]["restartPolicy"] == "Never"  # the TFJob's restartPolicy


def test_tfjob_with_a_failing_worker_fails(platform, kubectl, kubeconfig, overlay, namespace):
    """A worker exiting 1 (restartPolicy Never: no in-place restart) fails the TFJob: the
    ``Failed`` condition the pipeline's failureCondition reads, within a bounded time."""
    setup_namespace(kubectl, kubeconfig, overlay, namespace)
    job, _ = render_job(overlay, f"e2e-{uuid.uuid4().hex[:6]}", "dropout")
    job["metadata"]["namespace"] = namespace
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    worker["metadata"].setdefault("labels", {})[E2E_LABEL_FAIL] = "true"
    kubectl.apply(job)
    final = wait_for_condition(kubectl, job, "Failed")
    assert not condition(final, "Succeeded")
    platform.check_alive()


def test_pytorchjob_gets_the_operators_environment_and_succeeds(
    platform, kubectl, kubeconfig, overlay, namespace
):
    """The pipeline's PyTorchJob: the operator creates the Master and the Workers, gives each
    MASTER_ADDR (the Master's Service), MASTER_PORT (its pytorchjob-port), WORLD_SIZE (every
    replica) and RANK (Master 0, Worker i -> i + 1), and reports Succeeded when the Master did,
    which is what the step's successCondition reads."""
    setup_namespace(kubectl, kubeconfig, overlay, namespace)
    job, params = render_job(overlay, f"e2e-{uuid.uuid4().hex[:6]}", "pytorch", "train-pytorch")
    job["metadata"]["namespace"] = namespace
    kubectl.apply(job)
    name = job["metadata"]["name"]
    world = 1 + int(params["pytorch-workers"])
    assert world == 2

    def replica_pods():
        pods = kubectl.json(
            "get", "pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={name}",
        )["items"]  # fmt: skip
        return pods if len(pods) == world else None

    pods = wait_until(replica_pods, timeout=WORKERS_TIMEOUT_S, what=f"{world} replica pods")
    final = wait_for_condition(kubectl, job, "Succeeded")
    platform.check_alive()
    assert final["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    ranks = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        rtype = labels["training.kubeflow.org/replica-type"]
        index = int(labels["training.kubeflow.org/replica-index"])
        (c,) = pod["spec"]["containers"]
        assert c["name"] == "pytorch" and c["image"].endswith("-torch")
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        assert env["MASTER_ADDR"] == f"{name}-master-0"
        assert env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == str(world)
        ranks[(rtype, index)] = int(env["RANK"])
        assert c["resources"] == json.loads(params["train-resources"])
        assert pod["spec"]["restartPolicy"] == "Never"  # the PyTorchJob's restartPolicy
        # the operator's init container on Workers (waits for the Master's Service): the
        # restricted template of base/platform/training-operator, or restricted Pod Security
        # admission would have rejected the pod (upstream's default has no securityContext)
        inits = pod["spec"].get("initContainers") or []
        assert [i["name"] for i in inits] == (["init-pytorch"] if rtype == "worker" else [])
        for i in inits:
            assert i["securityContext"]["allowPrivilegeEscalation"] is False
            assert i["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert ranks == {("master", 0): 0, ("worker", 0): 1}


def test_pytorchjob_with_a_failing_master_fails(platform, kubectl, kubeconfig, overlay, namespace):
    """The Master exiting 1 fails the PyTorchJob (the ``Failed`` condition the step reads)."""
    setup_namespace(kubectl, kubeconfig, overlay, namespace)
    job, _ = render_job(overlay, f"e2e-{uuid.uuid4().hex[:6]}", "pytorch", "train-pytorch")
    job["metadata"]["namespace"] = namespace
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"] = copy.deepcopy(
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    )  # the manifest shares one pod template between Master and Worker (a YAML anchor)
    master["metadata"].setdefault("labels", {})[E2E_LABEL_FAIL] = "true"
    kubectl.apply(job)
    final = wait_for_condition(kubectl, job, "Failed")
    assert not condition(final, "Succeeded")
    platform.check_alive()


def test_tfjob_webhook_rejects_an_invalid_tfjob(platform, kubectl, namespace):
    """The operator's validating webhook is served (on 127.0.0.1) and consulted by the API
    server: a TFJob without a container named ``tensorflow`` is denied by it."""
    bad = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "e2e-invalid", "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "not-tensorflow", "image": "registry.invalid/x:1"}]
        }}}}},
    }  # fmt: skip
    proc = kubectl.run("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad))
    assert proc.returncode != 0
    assert "validator.tfjob.training-operator.kubeflow.org" in proc.stderr, proc.stderr
    assert "denied the request" in proc.stderr, proc.stderr  # answered, not unreachable
    assert "must have at least one container with name tensorflow" in proc.stderr
