"""The project's ``fashion-mnist`` InferenceService reconciled by the real KServe controller
(v0.20.0 cmd/manager, the pod of its install's Deployment on the real node; its webhooks,
including the pod mutator, served through its Service, tests/e2e/controllers.py).

Mode: **Standard** (``serving.kserve.io/deploymentMode: Standard``, the v0.20 name of
RawDeployment), not the Knative mode the overlays use. Reason: these tests run on kwok's
simulated nodes, in every e2e, also where the tier ``serving`` (Knative Serving and Traefik as
pods; the overlays' Serverless mode for real: test_serverless.py) is skipped and the platform has
Knative's CRDs only, so a Knative Service created by KServe would never be reconciled. In
Standard mode KServe itself creates the predictor Deployment,
Service and HPA, and the Deployment's pods go through KServe's pod-mutating webhook, which is
where the model volume and the request logger are injected: exactly what this test checks.
What Standard mode changes on the rendered object is only that annotation, plus (see
:func:`standard_mode`) the Knative-only autoscaling fields.

Simulated: no container runs (kwok marks the predictor pod Running/Ready). KServe v0.20 mounts a
``pvc://`` storageUri directly into the model container (volume ``kserve-pvc-source``, subPath
= the path in the URI, read-only at /mnt/models); it adds no storage-initializer init container
for PVCs (pkg/webhook/admission/pod/storage_initializer_injector.go), and the test asserts that.
"""

from __future__ import annotations

import controllers
import yaml
from e2e_kube import REPO_ROOT, Kubectl, wait_until

OVERLAY = REPO_ROOT / "overlays" / "local-k3d"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
TIMEOUT_S = 120


def rendered(kubectl: Kubectl, kind: str) -> dict:
    """The single object of ``kind`` in the rendered local-k3d overlay."""
    objs = [d for d in yaml.safe_load_all(kubectl("kustomize", str(OVERLAY))) if d]
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} in the rendered overlay"
    return found[0]


def standard_mode(isvc: dict, namespace: str) -> dict:
    """The rendered InferenceService in KServe's Standard mode, in ``namespace``.

    Knative-only fields are dropped: ``scaleMetric: concurrency`` / ``scaleTarget`` (Knative's
    KPA; KServe's HPA accepts only cpu/memory and its webhook rejects concurrency) and
    ``minReplicas: 0`` (scale to zero is Knative's; with an HPA KServe uses at least 1).
    """
    out = yaml.safe_load(yaml.safe_dump(isvc))
    out["metadata"]["namespace"] = namespace
    out["metadata"].setdefault("annotations", {})[MODE_ANNOTATION] = "Standard"
    pred = out["spec"]["predictor"]
    for knative_only in ("scaleMetric", "scaleTarget"):
        pred.pop(knative_only, None)
    pred["minReplicas"] = max(1, int(pred.get("minReplicas") or 0))
    return out


def test_inference_service_reconciled_with_pvc_mount_and_logger(
    platform, kubectl, kubeconfig, namespace
):
    isvc = rendered(kubectl, "InferenceService")
    pvc = rendered(kubectl, "PersistentVolumeClaim")
    controllers.provide_volume(kubeconfig, pvc, namespace)
    obj = standard_mode(isvc, namespace)
    kubectl.apply(obj)
    name = obj["metadata"]["name"]

    def predictor_pods():
        pods = kubectl.json(
            "get", "pods", "-n", namespace, "-l", f"serving.kserve.io/inferenceservice={name}"
        )["items"]
        return pods or None

    (pod, *_) = wait_until(predictor_pods, timeout=TIMEOUT_S, what=f"{name} predictor pod")
    deploy = kubectl.json("get", "deployment", f"{name}-predictor", "-n", namespace)
    assert deploy["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"

    def ready():
        got = kubectl.json("get", f"inferenceservice/{name}", "-n", namespace)
        conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions", [])}
        return got if conds.get("PredictorReady") == "True" else None

    wait_until(ready, timeout=TIMEOUT_S, what=f"{name} PredictorReady")
    platform.check_alive()

    model = isvc["spec"]["predictor"]["model"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    # the pod mutator (KServe's webhook, served locally) added what the Deployment lacks
    template = {c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]}
    assert "agent" in containers and "agent" not in template, (sorted(containers), template)

    # pvc://fashion-mnist-pvc/models/fashion-mnist/<N>: the PVC, its subPath the version named,
    # mounted read-only
    claim, sub_path = model["storageUri"].removeprefix("pvc://").split("/", 1)
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["kserve-pvc-source"]["persistentVolumeClaim"]["claimName"] == claim
    mounts = {m["name"]: m for m in containers["kserve-container"]["volumeMounts"]}
    assert mounts["kserve-pvc-source"]["mountPath"] == "/mnt/models"
    assert mounts["kserve-pvc-source"]["subPath"] == sub_path
    assert mounts["kserve-pvc-source"].get("readOnly") is True
    init = [c["name"] for c in pod["spec"].get("initContainers") or []]
    assert "storage-initializer" not in init, "pvc:// must be mounted, not downloaded"

    # the request logger: every request/response to message-dumper
    logger = isvc["spec"]["predictor"]["logger"]
    args = containers["agent"]["args"]
    assert args[args.index("--log-url") + 1] == logger["url"]
    assert args[args.index("--log-mode") + 1] == logger["mode"]

    # the runtime the project names, at the pinned tag, with the project's resources
    serving = containers["kserve-container"]
    assert serving["image"].endswith(f":{model['runtimeVersion']}")
    assert serving["resources"] == model["resources"]
    assert serving["securityContext"]["allowPrivilegeEscalation"] is False
