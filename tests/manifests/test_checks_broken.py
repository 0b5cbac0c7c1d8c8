"""Each check catches a deliberately broken copy of a real manifest, with file/object/field."""

from __future__ import annotations

import pytest

from validation.config import parse_versions_env, remote_refs
from validation.consistency import version_findings

from .manifest_refs import ISVC, ISVC_REF, KSVC, PVC, RBAC, WFT, WFT_REF, only


def test_baseline_copy_is_clean(broken):
    assert broken.check() == []


def test_schema_unknown_field_in_custom_resource(broken):
    broken.edit(ISVC, lambda d: d["spec"]["predictor"].update(minReplica=1))
    (f,) = only(broken.check(), "schema")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor")
    assert "minReplica" in f.message


def test_schema_builtin_kind_strict(broken):
    broken.edit(PVC, lambda d: d["spec"].update(accessMode=["ReadWriteOnce"]))
    (f,) = only(broken.check(), "schema")
    assert (f.file, f.obj) == (PVC, "PersistentVolumeClaim/fashion-mnist/fashion-mnist-pvc")
    assert f.field == "spec" and "accessMode" in f.message


def test_schema_of_tfjob_embedded_in_workflow(broken):
    broken.replace(WFT, "restartPolicy: OnFailure", "restartPolicies: OnFailure")
    hits = only(broken.check(), "schema")
    assert {f.file for f in hits} == {WFT}
    assert {f.obj for f in hits} == {
        f"TFJob/fashion-mnist/fashion-mnist-pipeline-x7k2p-{m}"
        for m in ("cnn", "dropout", "batch-norm")
    }
    assert all(
        f.field == "spec.templates[2].resource.manifest > spec.tfReplicaSpecs.Worker"
        and "restartPolicies" in f.message
        for f in hits
    )


def test_resources_limits_required(broken):
    def drop(d):
        del d["spec"]["templates"][3]["container"]["resources"]["limits"]["memory"]

    broken.edit(WFT, drop)
    (f,) = only(broken.check(), "resources")
    assert (f.file, f.obj) == (WFT, WFT_REF)
    assert f.field == "spec.templates[3].container.resources.limits.memory"


def test_security_context_restricted(broken):
    broken.edit(
        ISVC,
        lambda d: d["spec"]["predictor"]["model"]["securityContext"].update(
            allowPrivilegeEscalation=True
        ),
    )
    (f,) = only(broken.check(), "security-context")
    assert (f.file, f.obj) == (ISVC, ISVC_REF)
    assert f.field == "spec.predictor.model.securityContext.allowPrivilegeEscalation"


def test_security_context_in_embedded_tfjob(broken):
    indent = " " * 28  # inside the TFJob manifest string
    broken.replace(WFT, f"\n{indent}drop: [ALL]", f"\n{indent}drop: [NET_RAW]")
    hits = only(broken.check(), "security-context")
    assert {f.field for f in hits} == {
        "spec.templates[2].resource.manifest > "
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].securityContext.capabilities.drop"
    }


def test_image_must_be_pinned(broken):
    broken.edit(
        KSVC,
        lambda d: d["spec"]["template"]["spec"]["containers"][0].update(
            image="gcr.io/knative-releases/knative.dev/eventing/cmd/event_display"
        ),
    )
    (f,) = only(broken.check(), "image-tag")
    assert (f.file, f.obj) == (KSVC, "Service/fashion-mnist/message-dumper")
    assert f.field == "spec.template.spec.containers[0].image"


def test_latest_image_in_workflow_parameter(broken):
    broken.replace(WFT, "value: fashion-mnist/ml:0.1.0", "value: fashion-mnist/ml:latest")
    hits = only(broken.check(), "image-tag")
    fields = {f.field for f in hits}
    assert "spec.templates[1].container.image" in fields
    assert any("resource.manifest > spec.tfReplicaSpecs" in x for x in fields)


def test_server_needs_readiness_probe(broken):
    broken.edit(
        KSVC, lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
    )
    (f,) = only(broken.check(), "probes")
    assert (f.file, f.field) == (KSVC, "spec.template.spec.containers[0].readinessProbe")


def test_exemption_needs_reason(broken):
    ann = "validation.fashion-mnist.example.com/exempt"

    def exempt(d, reason):
        d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
        d["metadata"]["annotations"][ann] = "probes"
        if reason:
            d["metadata"]["annotations"][ann + "-reason"] = reason

    broken.edit(KSVC, lambda d: exempt(d, ""))
    (f,) = only(broken.check(), "exemption")
    assert f.file == KSVC and "reason" in f.message
    broken.edit(KSVC, lambda d: d["metadata"]["annotations"].update({ann + "-reason": "demo"}))
    assert broken.check() == []


def test_rbac_without_wildcards(broken):
    broken.edit(RBAC, lambda d: d["rules"][1].update(verbs=["*"]), index=1)
    (f,) = only(broken.check(), "rbac-wildcard")
    assert (f.file, f.obj, f.field) == (
        RBAC,
        "Role/fashion-mnist/fashion-mnist-pipeline",
        "rules[1].verbs",
    )


def test_cli_flag_unknown_to_training_parser(broken):
    broken.replace(WFT, "- --lr-schedule\n", "- --lr-scheduler\n")
    hits = only(broken.check(), "cli-flags")
    assert {f.file for f in hits} == {WFT}
    assert all(
        f.field.endswith("spec.tfReplicaSpecs.Worker.template.spec.containers[0].args")
        for f in hits
    )
    assert all("training.train rejects" in f.message for f in hits)


def test_cli_flag_unknown_to_select_parser(broken):
    broken.replace(WFT, "- --candidates-dir\n", "- --candidate-dir\n")
    hits = only(broken.check(), "cli-flags")
    assert [f.field for f in hits] == ["spec.templates[3].container.args"]


def test_model_types_must_match_code(broken):
    broken.replace(WFT, "value: batch_norm", "value: cnn")
    (f,) = only(broken.check(), "model-types")
    assert f.file == WFT and "batch_norm" in f.message


def test_training_output_must_be_selection_input(broken):
    broken.replace(WFT, '"/mnt/shared/candidates/{{inputs', '"/mnt/shared/candidate/{{inputs')
    hits = only(broken.check(), "paths")
    assert len(hits) == 3 and all("--saved-model-dir" in f.message for f in hits)


def test_storage_uri_must_be_published_path(broken):
    def edit(d):
        d["spec"]["predictor"]["model"]["storageUri"] = "pvc://fashion-mnist-pvc/models/other"

    broken.edit(ISVC, edit)
    hits = only(broken.check(), "paths")
    assert any(
        (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.storageUri")
        for f in hits
    )
    assert only(broken.check(), "serve-consistency")


def test_path_not_on_the_pvc(broken):
    broken.replace(
        WFT,
        "mountPath: /mnt/shared\n\n    - name: train",
        "mountPath: /mnt/data\n\n    - name: train",
    )
    hits = only(broken.check(), "paths")
    assert any("not on a mounted PVC" in f.message and "templates[1]" in f.field for f in hits)


def test_namespaces_of_rbac_subjects(broken):
    broken.edit(RBAC, lambda d: d["subjects"][0].update(namespace="default"), index=2)
    (f,) = only(broken.check(), "namespaces")
    assert (f.file, f.field) == (RBAC, "subjects[0].namespace")


def test_namespace_of_logger_url(broken):
    broken.replace(ISVC, "message-dumper.fashion-mnist.svc", "message-dumper.default.svc")
    (f,) = only(broken.check(), "namespaces")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.logger.url")


@pytest.mark.parametrize(
    ("old", "new", "field", "text"),
    [
        (
            "template: select\n",
            "template: selekt\n",
            "spec.templates[0].dag.tasks[4].template",
            "no template",
        ),
        ("entrypoint: pipeline", "entrypoint: main", "spec.entrypoint", "no template"),
        (
            "= {{workflow.parameters.workers}}",
            ">= {{workflow.parameters.workers}}",
            "spec.templates[2].resource.successCondition",
            "not an Argo condition",
        ),
        (
            "failureCondition: status.replicaStatuses.Worker.failed > 0",
            "failureCondition: status.replicaStatuses.Worker.failed > 0 && true",
            "spec.templates[2].resource.failureCondition",
            "not an Argo condition",
        ),
        (
            '"{{inputs.parameters.job-suffix}}"\n',
            '"{{inputs.parameters.suffix}}"\n',
            "spec.templates[2]",
            "not declared",
        ),
        (
            '"{{workflow.parameters.epochs}}"',
            '"{{workflow.parameters.epoch}}"',
            "spec.templates[2]",
            "not in spec.arguments",
        ),
    ],
)
def test_workflow_structure(broken, old, new, field, text):
    broken.replace(WFT, old, new)
    hits = only(broken.check(), "workflow")
    assert any(f.field == field and text in f.message and f.file == WFT for f in hits), [
        h.format() for h in hits
    ]


def test_memoize_only_where_argo_honours_it(broken):
    def move(d):
        t = d["spec"]["templates"]
        t[0]["memoize"] = t[1].pop("memoize")

    broken.edit(WFT, move)
    hits = only(broken.check(), "workflow")
    assert [f.field for f in hits] == ["spec.templates[0].memoize"]


def test_memoize_cache_label(broken):
    broken.edit("base/ml/pipeline/memoize-cache.yaml", lambda d: d["metadata"].pop("labels"))
    (f,) = only(broken.check(), "workflow")
    assert f.file == "base/ml/pipeline/memoize-cache.yaml" and f.field == "metadata.labels"


def test_serve_step_agrees_with_inferenceservice(broken):
    broken.replace(WFT, "              name: tensorflow\n", "              name: onnx\n")
    (f,) = only(broken.check(), "serve-consistency")
    assert f.file == WFT
    assert f.field == "spec.templates[4].resource.manifest > spec.predictor.model.modelFormat"


def test_render_failure_is_reported(broken):
    broken.replace(
        "overlays/local-k3d/patches/inferenceservice-scale-to-zero.yaml",
        "/spec/predictor/minReplicas",
        "/spec/predictor/nope/minReplicas",
    )
    (f,) = only(broken.check("overlays/local-k3d"), "render")
    assert f.kustomization == "overlays/local-k3d"


def test_json6902_test_op_guards_parameter_index(broken):
    broken.replace(WFT, "      - name: image-pull-policy\n", "      - name: pull-policy\n")
    (f,) = only(broken.check("overlays/gpu-cloud"), "render")
    assert "test" in f.message.lower()


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        ("base/platform/training-operator/kustomization.yaml", "?ref=v1.9.4", "?ref=v1.9.3"),
        ("base/platform/kserve/kustomization.yaml", "download/v0.20.0/", "download/v0.19.0/"),
        (
            "overlays/gpu-cloud/patches/workflowtemplate-gpu-training.yaml",
            "ml:0.1.0-gpu",
            "ml:0.0.9-gpu",
        ),
        (
            "overlays/gpu-cloud/patches/workflowtemplate-gpu-training.yaml",
            "registry.example.com/",
            "quay.io/",
        ),
        (ISVC, 'runtimeVersion: "2.18.0"', 'runtimeVersion: "2.6.2"'),
        (KSVC, "sha256:6102", "sha256:6103"),
    ],
)
def test_versions_agree_with_versions_env(broken, rel, old, new):
    broken.replace(rel, old, new)
    v = parse_versions_env(broken.root / "versions.env")
    (f,) = version_findings(broken.root, v, remote_refs(v))
    assert f.check == "versions" and f.file == rel and f.field.startswith("line ")
