"""Schemas (kubeconform) and the pods topic catch broken copies of the real manifests."""

from __future__ import annotations

import pytest

from validation.core import CHECKS, Context, Obj

from .conftest import param, template
from .manifest_refs import (
    ISVC,
    ISVC_REF,
    KSVC,
    PVC,
    PYTORCH,
    PYTORCH_REPLICAS,
    PYTORCHJOB,
    TENSORFLOW,
    TFJOBS,
    WFT,
    WFT_REF,
    WORKER,
    only,
)


def test_baseline_copy_is_clean(broken):
    assert [f.format() for f in broken.check()] == []


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
    broken.replace(WFT, "restartPolicy: Never", "restartPolicies: Never")
    hits = only(broken.check(), "schema")
    assert {(f.file, f.field) for f in hits} == {(WFT, WORKER)} | {
        (WFT, r) for r in PYTORCH_REPLICAS
    }
    assert {f.obj for f in hits} == TFJOBS | {PYTORCHJOB}
    assert all("restartPolicies" in f.message for f in hits)


def test_schema_of_a_builtin_field_type(broken):
    broken.edit(PVC, lambda d: d["spec"]["resources"]["requests"].update(storage=["10Gi"]))
    (f,) = only(broken.check(), "schema")
    assert f.field == "spec.resources.requests.storage"


def test_resources_limits_required(broken):
    broken.edit(
        WFT, lambda d: template(d, "select")["container"]["resources"]["limits"].pop("memory")
    )
    (f,) = only(broken.check(), "resources")
    assert (f.file, f.obj) == (WFT, WFT_REF)
    assert f.field == "spec.templates[select].container.resources.limits.memory"


def test_limit_lower_than_request_in_embedded_tfjob(broken):
    resources = (
        '{"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "1536Mi"}}'
    )
    broken.edit(WFT, lambda d: param(d, "train-resources").update(value=resources))
    hits = only(broken.check(), "resource-limits")
    assert {f.obj for f in hits} == TFJOBS | {PYTORCHJOB}
    assert {f.field for f in hits} == {
        f"{c}.resources.limits.memory" for c in {TENSORFLOW} | PYTORCH
    }
    assert all("1536Mi is lower than request 2Gi" in f.message for f in hits)


def test_cpu_limit_lower_than_request(broken):
    broken.edit(
        ISVC, lambda d: d["spec"]["predictor"]["model"]["resources"]["limits"].update(cpu="400m")
    )
    (f,) = only(broken.check(), "resource-limits")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.resources.limits.cpu")


def test_security_context_restricted(broken):
    sc = lambda d: d["spec"]["predictor"]["model"]["securityContext"]  # noqa: E731
    broken.edit(ISVC, lambda d: sc(d).update(allowPrivilegeEscalation=True))
    (f,) = only(broken.check(), "security-context")
    assert (f.file, f.obj) == (ISVC, ISVC_REF)
    assert f.field == "spec.predictor.model.securityContext.allowPrivilegeEscalation"


def test_security_context_in_embedded_tfjob(broken):
    indent = " " * 28  # inside the TFJob manifest string
    broken.replace(WFT, f"\n{indent}drop: [ALL]", f"\n{indent}drop: [NET_RAW]")
    hits = only(broken.check(), "security-context")
    assert {f.field for f in hits} == {
        f"{c}.securityContext.capabilities.drop" for c in {TENSORFLOW} | PYTORCH
    }
    assert {f.obj for f in hits} == TFJOBS | {PYTORCHJOB}


def test_image_must_be_pinned(broken):
    image = "gcr.io/knative-releases/knative.dev/eventing/cmd/event_display"
    broken.edit(KSVC, lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image=image))
    (f,) = only(broken.check(), "image-tag")
    assert (f.file, f.obj) == (KSVC, "Service/fashion-mnist/message-dumper")
    assert f.field == "spec.template.spec.containers[event-display].image"


def test_latest_image_in_workflow_parameter(broken):
    broken.edit(WFT, lambda d: param(d, "image").update(value="fashion-mnist/ml:latest"))
    fields = {f.field for f in only(broken.check(), "image-tag")}
    assert {"spec.templates[ingest].container.image", f"{TENSORFLOW}.image"} <= fields


def test_malformed_image_reference(broken):
    # a reference with two tags (e.g. an images: newName that already carries one)
    broken.edit(WFT, lambda d: param(d, "image").update(value="fashion-mnist/ml:latest:0.1.0"))
    hits = only(broken.check(), "image-tag")
    assert hits and all("not a valid image reference" in f.message for f in hits)
    assert f"{TENSORFLOW}.image" in {f.field for f in hits}


def test_server_needs_readiness_probe(broken):
    broken.edit(
        KSVC, lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
    )
    (f,) = only(broken.check(), "probes")
    assert (f.file, f.field) == (
        KSVC,
        "spec.template.spec.containers[event-display].readinessProbe",
    )


def test_exemption_needs_reason(broken):
    ann = "validation.fashion-mnist.example.com/exempt"

    def exempt(d, reason):
        d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe", None)
        d["metadata"]["annotations"][ann] = "probes"
        if reason:
            d["metadata"]["annotations"][ann + "-reason"] = reason

    broken.edit(KSVC, lambda d: exempt(d, ""))
    (f,) = only(broken.check(), "exemption")
    assert f.file == KSVC and "reason" in f.message
    broken.edit(KSVC, lambda d: exempt(d, "demo"))
    assert broken.check() == []


def test_render_failure_is_reported(broken):
    broken.replace(
        "overlays/local-k3d/patches/inferenceservice-scale-to-zero.yaml",
        "/spec/predictor/",
        "/spec/nope/",
    )
    (f,) = only(broken.check("overlays/local-k3d"), "render")
    assert f.kustomization == "overlays/local-k3d"


def test_environment_values_are_set_by_parameter_name(broken):
    # overlays set workflow parameters by name: a renamed parameter fails the rendering
    broken.edit(WFT, lambda d: param(d, "workers").update(name="replicas"))
    for env in ("overlays/local-k3d", "overlays/gpu-cloud"):
        (f,) = only(broken.check(env), "render")
        assert "workers" in f.message


def test_containers_of_any_pod_spec():
    """Kinds the manifests do not use yet are checked too: every mapping with containers."""
    c = {"name": "app", "image": "example.com/app:1", "ports": [{"containerPort": 80}]}
    specs = {
        "Deployment": ({"template": {"spec": {"containers": [c]}}}, "spec.template.spec"),
        "CronJob": (
            {"jobTemplate": {"spec": {"template": {"spec": {"containers": [c]}}}}},
            "spec.jobTemplate.spec.template.spec",
        ),
        "Pod": ({"containers": [c]}, "spec"),
    }
    objs = [
        Obj({"kind": k, "metadata": {"name": "x"}, "spec": s}, "k", "f")
        for k, (s, _) in specs.items()
    ]
    ctx = Context(objs, {})
    missing = {(o.kind, fld) for o, fld, _ in CHECKS["resources"](ctx)}
    assert {
        (k, f"{p}.containers[app].resources.limits.cpu") for k, (_, p) in specs.items()
    } <= missing
    probes = {(o.kind, fld) for o, fld, _ in CHECKS["probes"](ctx)}
    assert probes == {("Deployment", "spec.template.spec.containers[app].readinessProbe")}


def test_a_mutable_pipeline_image_tag_is_refused_where_nodes_keep_images(broken):
    """The overlay's images: entry with a mutable tag and IfNotPresent: refused on every
    container that runs it (the steps, the TFJob's, the PyTorchJob's -torch); pulled Always
    it passes, but not where a container sets IfNotPresent itself or hard-codes a mutable tag
    of the same image; a pull policy Kubernetes does not know is refused."""
    kust = "overlays/local-k3d/kustomization.yaml"
    env = "overlays/local-k3d/environment.yaml"

    def found():
        return [f for f in broken.check("overlays/local-k3d") if f.check == "image-by-content"]

    assert not found()
    broken.edit(kust, lambda d: d["images"][0].update(newTag="src-0123456789AB"))
    assert found()  # lower-case hex only, as sha256sum prints it
    broken.edit(kust, lambda d: d["images"][0].update(newTag="0.1.0"))
    hits = found()
    fields = {f.field for f in hits}
    assert {"spec.templates[ingest].container.image", f"{TENSORFLOW}.image"} <= fields
    assert PYTORCH & {f.field.removesuffix(".image") for f in hits}, fields
    assert {f.obj for f in hits} >= {WFT_REF, *TFJOBS, PYTORCHJOB}
    assert any("'fashion-mnist/ml:0.1.0' pulled IfNotPresent" in f.message for f in hits)
    broken.edit(env, lambda d: d["data"].update({"image-pull-policy": "Always"}))
    assert not found()
    broken.edit(
        WFT, lambda d: template(d, "select")["container"].update(imagePullPolicy="IfNotPresent")
    )
    (f,) = found()
    assert f.field == "spec.templates[select].container.image", f
    broken.edit(kust, lambda d: d["images"][0].update(newTag="src-0123456789ab"))
    broken.edit(env, lambda d: d["data"].update({"image-pull-policy": "IfNotPresent"}))
    broken.edit(
        WFT, lambda d: template(d, "ingest")["container"].update(image="fashion-mnist/ml:0.1.0")
    )
    (f,) = found()  # a step that names the image itself: kustomize's images: leaves it
    assert f.field == "spec.templates[ingest].container.image", f
    broken.edit(env, lambda d: d["data"].update({"image-pull-policy": "always"}))
    hits = [f for f in found() if f.field == "spec.arguments.parameters[image-pull-policy].value"]
    assert hits and "'always' is none of Kubernetes' Always, IfNotPresent, Never" in hits[0].message


@pytest.mark.parametrize(
    "image",
    [
        "quay.io/argoproj/argocd:v3.4.0",
        "docker.io/argoproj/argocd:v3.5.1",  # the install's version on another registry
        "quay.io/argoproj/argocd@sha256:" + "a" * 64,
    ],
)
def test_the_write_back_runs_the_argo_cd_that_argocd_install_installs(broken, image):
    def found():
        hits = broken.check("base/ml", "argocd/install")
        return [f for f in hits if f.check == "write-back-image"]

    assert not found()
    broken.edit(WFT, lambda d: template(d, "write-back")["script"].update(image=image))
    (f,) = found()
    assert (f.obj, f.field) == (WFT_REF, "spec.templates[write-back].script.image")
    assert f"{image} is not the Argo CD argocd/install installs" in f.message
