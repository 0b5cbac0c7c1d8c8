"""The ML layer of one environment as a Pulumi program, from the overlay itself.

The objects are exactly what ``kubectl kustomize overlays/<env>`` renders, the same bytes that
``scripts/deploy.sh`` and Argo CD's ``fashion-mnist-<env>`` Application apply: one Pulumi
resource per object, of the provider's type for its kind (``kubernetes:core/v1:Namespace``,
``kubernetes:serving.kserve.io/v1beta1:InferenceService``, ...), named ``namespace/name`` as
``pulumi_kubernetes.yaml.ConfigGroup`` names them. No manifest is copied here.

Pulumi's own Kubernetes example deploys a distributed-training ``batch/v1`` Job and exports its
name. This repository's training is not a Job of the ML layer: the pipeline's WorkflowTemplate
creates a TFJob per model and a PyTorchJob per run. ``training_run`` is that example's
counterpart: a Workflow from the WorkflowTemplate (what ``scripts/submit-pipeline.sh`` creates),
whose name is exported as ``trainingRun``.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pulumi
import yaml

from validation.gitops import sync_option

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = "fashion-mnist"
# the Workflow's logical name: Pulumi's provider names the object <this>-<8 random characters>
TRAINING_RUN = "training-run"
# the Workflow's annotation that makes each `up --train` a new run (its value: when it was asked)
SUBMISSION = "fashion-mnist.example.com/submission"


def overlay_dir(environment: str) -> Path:
    """``overlays/<environment>`` of this repository.

    Raises:
        ValueError: ``environment`` is not a plain name of a folder of ``overlays/`` with a
            kustomization.yaml.
    """
    path = REPO_ROOT / "overlays" / environment
    if (
        "/" in environment
        or environment.startswith(".")
        or not (path / "kustomization.yaml").is_file()
    ):
        have = sorted(p.name for p in (REPO_ROOT / "overlays").iterdir() if p.is_dir())
        raise ValueError(f"no environment {environment!r} (have: {', '.join(have)})")
    return path


def render(environment: str, kubectl: str = "kubectl") -> list[dict]:
    """The objects ``kubectl kustomize overlays/<environment>`` renders, in its order.

    Raises:
        ValueError: unknown environment (``overlay_dir``).
        RuntimeError: kustomize refused the overlay; the message is kubectl's.
    """
    proc = subprocess.run(
        [kubectl, "kustomize", str(overlay_dir(environment))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize overlays/{environment}: {proc.stderr.strip()}")
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


def type_token(obj: dict) -> str:
    """The Pulumi type of a Kubernetes object, as its provider names it:
    ``kubernetes:<group>/<version>:<kind>``, the core group written ``core``."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{obj['kind']}"


def logical_name(obj: dict) -> str:
    """``namespace/name`` (cluster-scoped: ``name``), ConfigGroup's naming: unique per type."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


class KubeObject(pulumi.CustomResource):
    """One Kubernetes object of any kind, applied by Pulumi's Kubernetes provider (server-side
    apply). Its inputs are the object's own top-level fields, so no field of the overlay is
    lost in a typed class; ``status`` is the live object's, as the last operation read it."""

    metadata: pulumi.Output[Any]
    status: pulumi.Output[Any]

    def __init__(self, obj: dict, opts: pulumi.ResourceOptions | None = None, name: str = ""):
        props = {k: v for k, v in copy.deepcopy(obj).items() if k != "status"}
        props["status"] = None  # an output: the provider returns the live object
        super().__init__(type_token(obj), name or logical_name(obj), props, opts)


def kept(obj: dict) -> bool:
    """Whether ``destroy`` leaves the object live (Pulumi's ``retainOnDelete``): it carries Argo
    CD's ``Delete=false`` sync option, as the PVC holding every model version and its Namespace
    do (base/ml/storage/pvc.yaml), so both tools keep the same objects, named once in git."""
    return sync_option(obj, "Delete") == "false"


def training_workflow(
    objects: list[dict], parameters: dict[str, str], submission: str = ""
) -> dict:
    """A Workflow of the rendered WorkflowTemplate's ``pipeline`` entrypoint, as
    ``scripts/submit-pipeline.sh`` creates it; its name is left to the provider, ``submission``
    (e.g. the time it was asked for) is its ``SUBMISSION`` annotation.

    Raises:
        ValueError: the overlay has no WorkflowTemplate, or a parameter it does not declare.
    """
    templates = [o for o in objects if o["kind"] == "WorkflowTemplate"]
    if len(templates) != 1:
        raise ValueError(f"the overlay renders {len(templates)} WorkflowTemplates, not one")
    template = templates[0]
    declared = {p["name"] for p in template["spec"]["arguments"]["parameters"]}
    unknown = sorted(set(parameters) - declared)
    if unknown:
        raise ValueError(f"{template['metadata']['name']} has no parameter {unknown} "
                         f"(one of {sorted(declared)})")  # fmt: skip
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "namespace": template["metadata"]["namespace"],
            "annotations": {SUBMISSION: submission},
        },
        "spec": {
            "workflowTemplateRef": {"name": template["metadata"]["name"]},
            "entrypoint": "pipeline",
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]},
        },
    }


def ml_layer(
    objects: list[dict],
    provider: pulumi.ProviderResource | None = None,
    training: dict[str, str] | None = None,
    submission: str = "",
) -> dict[str, pulumi.Output | str]:
    """Declare the rendered objects (``render``) and export what the stack offers; ``destroy``
    leaves the :func:`kept` ones live.

    ``training``: parameters of a training run to submit with them (``training_workflow``),
    None for none; a run is replaced (a new one) when its parameters or ``submission`` change.
    Exports: ``namespace``, ``workflowTemplate``, ``inferenceService``, ``inferenceServiceUrl``
    (the InferenceService's ``status.url`` when KServe has set it, else ""), and with a run
    ``trainingRun`` (the Workflow's name).
    """
    made = {}
    for obj in objects:
        opts = pulumi.ResourceOptions(provider=provider, retain_on_delete=kept(obj))
        made[(obj["kind"], logical_name(obj))] = KubeObject(obj, opts)
    by_kind = {kind: (name, res) for (kind, name), res in made.items()}
    isvc_name, isvc = by_kind["InferenceService"]
    exports: dict[str, pulumi.Output | str] = {
        "namespace": by_kind["Namespace"][0],
        "workflowTemplate": by_kind["WorkflowTemplate"][0].split("/")[-1],
        "inferenceService": isvc_name.split("/")[-1],
        "inferenceServiceUrl": isvc.status.apply(lambda s: (s or {}).get("url") or ""),
    }
    if training is not None:
        # another submission or other parameters are another run: replaced (deleted, then
        # created), never patched (Argo does not rerun a Workflow whose spec changes)
        run = KubeObject(
            training_workflow(objects, training, submission),
            pulumi.ResourceOptions(
                provider=provider,
                depends_on=list(made.values()),
                replace_on_changes=["*"],
                delete_before_replace=True,
            ),
            name=TRAINING_RUN,
        )
        exports["trainingRun"] = run.metadata.apply(lambda m: m["name"])
    for key, value in exports.items():
        pulumi.export(key, value)
    return exports
