"""Semantic checks (validation.semantics) catch broken copies of the real manifests."""

from __future__ import annotations

from decimal import Decimal

import pytest

from validation.cli import run
from validation.semantics import parse_quantity, plural

from .manifest_refs import ISVC, ISVC_REF, RBAC, WFT, WFT_REF, only

ROLE_REF = "Role/fashion-mnist/fashion-mnist-pipeline"
BINDING_REF = "RoleBinding/fashion-mnist/fashion-mnist-pipeline"
TRAIN = "spec.templates[2].resource"


def test_quantities_and_plurals():
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("2Gi") == 2 * 2**30
    assert parse_quantity("1536Mi") < parse_quantity("2Gi") < parse_quantity("3G")
    assert parse_quantity("1e3") == 1000
    assert parse_quantity("lots") is None
    assert [plural(k) for k in ("TFJob", "InferenceService", "WorkflowTaskResult", "Policy")] == [
        "tfjobs",
        "inferenceservices",
        "workflowtaskresults",
        "policies",
    ]


# --- 1. RBAC ------------------------------------------------------------------------------


def test_role_ref_to_missing_role(broken):
    broken.edit(RBAC, lambda d: d["roleRef"].update(name="fashion-mnist-pipelines"), index=2)
    (f,) = only(broken.check(), "rbac-refs")
    assert (f.file, f.obj, f.field) == (RBAC, BINDING_REF, "roleRef.name")
    assert "no Role fashion-mnist/fashion-mnist-pipelines" in f.message


def test_role_ref_to_unknown_cluster_role(broken):
    broken.edit(RBAC, lambda d: d["roleRef"].update(kind="ClusterRole", name="viewer"), index=2)
    (f,) = only(broken.check(), "rbac-refs")
    assert (f.file, f.obj, f.field) == (RBAC, BINDING_REF, "roleRef.name")
    assert "no ClusterRole viewer" in f.message


def test_builtin_cluster_role_is_a_valid_ref(broken):
    broken.edit(RBAC, lambda d: d["roleRef"].update(kind="ClusterRole", name="edit"), index=2)
    assert not [f for f in broken.check() if f.check == "rbac-refs"]


@pytest.mark.parametrize(
    ("rule", "verb", "resource", "why"),
    [
        (2, "patch", "inferenceservices.serving.kserve.io", "spec.templates[4]"),
        (2, "get", "inferenceservices.serving.kserve.io", "spec.templates[4]"),
        (1, "create", "tfjobs.kubeflow.org", "spec.templates[2]"),
        (1, "watch", "tfjobs.kubeflow.org", "success/failureCondition"),
        (0, "patch", "workflowtaskresults.argoproj.io", "Argo executor"),
    ],
)
def test_pipeline_role_grants_what_the_steps_need(broken, rule, verb, resource, why):
    broken.edit(RBAC, lambda d: d["rules"][rule]["verbs"].remove(verb), index=1)
    hits = only(broken.check(), "rbac-grants")
    assert {(f.file, f.obj, f.field) for f in hits} == {(RBAC, ROLE_REF, "rules")}
    (f,) = [f for f in hits if f"{verb!r} on {resource}" in f.message]
    assert f.message.startswith("Role fashion-mnist/fashion-mnist-pipeline ")
    assert why in f.message and WFT_REF in f.message


# --- 2. DAG cycles ------------------------------------------------------------------------


def test_dag_cycle(broken):
    broken.edit(WFT, lambda d: d["spec"]["templates"][0]["dag"]["tasks"][0].update(depends="serve"))
    hits = only(broken.check(), "workflow-dag")
    # one cycle through each of the three train tasks
    assert len(hits) == 3
    assert {(f.file, f.obj) for f in hits} == {(WFT, WFT_REF)}
    assert all(f.field.startswith("spec.templates[0].dag.tasks[") for f in hits)
    for f in hits:
        assert "dependency cycle" in f.message
        for task in ("ingest", "serve", "select"):
            assert repr(task)[1:-1] in f.message
    assert {m for m in ("train-cnn", "train-dropout", "train-batch-norm")} == {
        m
        for m in ("train-cnn", "train-dropout", "train-batch-norm")
        for f in hits
        if m in f.message
    }


def test_dag_self_dependency(broken):
    broken.edit(
        WFT,
        lambda d: d["spec"]["templates"][0]["dag"]["tasks"][4]["dependencies"].append("select"),
    )
    (f,) = only(broken.check(), "workflow-dag")
    assert f.field == "spec.templates[0].dag.tasks[4]"
    assert "'select' depends on itself" in f.message


# --- 3. TFJob conditions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "key", "text"),
    [
        (
            "status.replicaStatuses.Worker.succeeded",
            "status.replicaStatuses.worker.succeeded",
            "successCondition",
            "replica type 'worker' is not in the TFJob's tfReplicaSpecs ['Worker']",
        ),
        (
            "status.replicaStatuses.Worker.failed",
            "status.replicaStatuses.Chief.failed",
            "failureCondition",
            "replica type 'Chief'",
        ),
        (
            "succeeded = {{workflow.parameters.workers}}",
            "succeeded = 1",
            "successCondition",
            "= 1 but Worker has 2 replicas",
        ),
        (
            "status.replicaStatuses.Worker.failed",
            "status.replicaStatus.Worker.failed",
            "failureCondition",
            "not a TFJob status field",
        ),
        (
            "Worker.succeeded =",
            "Worker.completed =",
            "successCondition",
            "no 'completed'",
        ),
    ],
)
def test_tfjob_condition_semantics(broken, old, new, key, text):
    broken.replace(WFT, old, new)
    (f,) = only(broken.check(), "tfjob-conditions")
    assert (f.file, f.obj, f.field) == (WFT, WFT_REF, f"{TRAIN}.{key}")
    assert text in f.message


def test_tfjob_success_count_after_overlay_substitution(broken):
    # gpu-cloud sets workers=4; a TFJob hard-coding 4 replicas with the condition still
    # reading the parameter is fine, a parameter the manifest does not use is not.
    broken.replace(WFT, "replicas: {{workflow.parameters.workers}}", "replicas: 2")
    (f,) = only(broken.check("overlays/gpu-cloud"), "tfjob-conditions")
    assert "= 4 but Worker has 2 replicas" in f.message


# --- 4. limits >= requests ----------------------------------------------------------------


def test_limit_lower_than_request_in_embedded_tfjob(broken):
    broken.replace(WFT, '"memory": "4Gi"}}', '"memory": "1536Mi"}}')
    hits = only(broken.check(), "resource-limits")
    assert {f.obj for f in hits} == {
        f"TFJob/fashion-mnist/fashion-mnist-pipeline-x7k2p-{m}"
        for m in ("cnn", "dropout", "batch-norm")
    }
    assert {f.field for f in hits} == {
        f"{TRAIN}.manifest > "
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.memory"
    }
    assert all("1536Mi is lower than the request 2Gi" in f.message for f in hits)


def test_cpu_limit_lower_than_request(broken):
    broken.edit(
        ISVC, lambda d: d["spec"]["predictor"]["model"]["resources"]["limits"].update(cpu="400m")
    )
    (f,) = only(broken.check(), "resource-limits")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.resources.limits.cpu")


# --- 5. InferenceService ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "field", "text"),
    [
        ({"minReplicas": 4}, "spec.predictor.minReplicas", "minReplicas 4 > maxReplicas 3"),
        ({"minReplicas": -1}, "spec.predictor.minReplicas", "-1 < 0"),
    ],
)
def test_inferenceservice_replica_bounds(broken, update, field, text):
    broken.edit(ISVC, lambda d: d["spec"]["predictor"].update(update))
    (f,) = only(broken.check(), "inferenceservice")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, field)
    assert text in f.message


def test_inferenceservice_tensorflow_protocol(broken):
    broken.edit(ISVC, lambda d: d["spec"]["predictor"]["model"].update(protocolVersion="v2"))
    (f,) = only(broken.check(), "inferenceservice")
    assert f.field == "spec.predictor.model.protocolVersion"


def test_inferenceservice_runtime_must_exist_in_platform(broken, sources):
    broken.edit(
        ISVC, lambda d: d["spec"]["predictor"]["model"].update(runtime="kserve-tensorflow-servin")
    )
    kusts = ["base/ml", "base/platform/kserve-runtimes"]
    findings, _ = run(broken.root, kusts, check_versions=False, **sources)
    (f,) = only(findings, "inferenceservice")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.runtime")
    assert "'kserve-tensorflow-servin'" in f.message and "kserve-tensorflow-serving" in f.message


def test_inferenceservice_runtime_present_passes(broken, sources):
    kusts = ["base/ml", "base/platform/kserve-runtimes"]
    findings, _ = run(broken.root, kusts, check_versions=False, **sources)
    assert [f.format() for f in findings if f.severity == "error"] == []


# --- 6. min-accuracy ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["85", "-0.1", "high"])
def test_min_accuracy_is_a_fraction(broken, value):
    broken.replace(WFT, 'value: "0.85"', f'value: "{value}"')
    hits = only(broken.check(), "workflow-params")
    assert {(f.file, f.obj, f.field) for f in hits} == {
        (WFT, WFT_REF, "spec.arguments.parameters[6].value")
    }
