"""Serving and CLI/paths topics catch broken copies of the real manifests."""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import by_name, template
from .manifest_refs import ISVC, ISVC_REF, PYTORCH, TENSORFLOW, WFT, only

RUNTIMES = ("base/ml", "base/platform/kserve-runtimes")


def predictor(d: dict) -> dict:
    """The InferenceService's predictor."""
    return d["spec"]["predictor"]


@pytest.mark.parametrize(
    ("update", "field", "text"),
    [
        ({"minReplicas": 4}, "spec.predictor.minReplicas", "minReplicas 4 > maxReplicas 3"),
        ({"minReplicas": -1}, "spec.predictor.minReplicas", "-1 < 0"),
    ],
)
def test_inferenceservice_replica_bounds(broken, update, field, text):
    broken.edit(ISVC, lambda d: predictor(d).update(update))
    (f,) = only(broken.check(), "inferenceservice")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, field)
    assert text in f.message


def test_inferenceservice_tensorflow_protocol(broken):
    broken.edit(ISVC, lambda d: predictor(d)["model"].update(protocolVersion="v2"))
    (f,) = only(broken.check(), "inferenceservice")
    assert f.field == "spec.predictor.model.protocolVersion"


def test_inferenceservice_runtime_must_exist_in_platform(broken):
    broken.edit(ISVC, lambda d: predictor(d)["model"].update(runtime="kserve-tensorflow-servin"))
    assert not [f for f in broken.check() if f.check == "inferenceservice"]  # platform not rendered
    (f,) = only(broken.check(*RUNTIMES), "inferenceservice")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.runtime")
    assert "'kserve-tensorflow-servin'" in f.message and "kserve-tensorflow-serving" in f.message


def test_inferenceservice_runtime_present_passes(broken):
    assert [f.format() for f in broken.check(*RUNTIMES)] == []


def test_logger_url_namespace(broken):
    url = "http://message-dumper.default.svc.cluster.local"
    broken.edit(ISVC, lambda d: predictor(d)["logger"].update(url=url))
    (f,) = only(broken.check(), "logger-url")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.logger.url")


def test_logger_url_service_exists(broken):
    url = "http://message-dump.fashion-mnist.svc.cluster.local"
    broken.edit(ISVC, lambda d: predictor(d)["logger"].update(url=url))
    (f,) = only(broken.check(), "logger-url")
    assert "no Service fashion-mnist/message-dump" in f.message


def test_serve_step_leaves_the_spec_to_git(broken):
    def serve_other_model(d):
        res = template(d, "serve")["resource"]
        manifest = yaml.safe_load(res["manifest"])
        manifest["spec"] = {"predictor": {"model": {"modelFormat": {"name": "onnx"}}}}
        res["manifest"] = yaml.safe_dump(manifest)

    broken.edit(WFT, serve_other_model)
    (f,) = only(broken.check(), "serve-consistency")
    assert f.file == WFT
    assert f.field == "spec.templates[serve].resource.manifest > spec"


# --- CLI / paths --------------------------------------------------------------------------


def args_of(d: dict, tmpl: str) -> list:
    """The container args of a container template."""
    return template(d, tmpl)["container"]["args"]


def test_cli_flag_unknown_to_training_parser(broken):
    broken.replace(WFT, "- --lr-schedule\n", "- --lr-scheduler\n")  # TFJob and PyTorchJob
    hits = only(broken.check(), "cli-flags")
    assert {(f.file, f.field) for f in hits} == {(WFT, f"{c}.args") for c in {TENSORFLOW} | PYTORCH}
    rejects = {f.message.split(" rejects")[0] for f in hits}
    assert rejects == {"training.train", "training.torch_train"}


def test_cli_flag_unknown_to_select_parser(broken):
    def rename(d):
        args = args_of(d, "select")
        args[args.index("--candidates-dir")] = "--candidate-dir"

    broken.edit(WFT, rename)
    (f,) = only(broken.check(), "cli-flags")
    assert f.field == "spec.templates[select].container.args"


def test_model_types_must_match_code(broken):
    def retype(d):
        args = by_name(template(d, "train-all")["dag"]["tasks"], "batch-norm")["arguments"]
        by_name(args["parameters"], "model-type")["value"] = "cnn"

    broken.edit(WFT, retype)
    (f,) = only(broken.check(), "model-types")
    assert f.file == WFT and "batch_norm" in f.message


def test_training_output_must_be_selection_input(broken):
    broken.replace(WFT, '"/mnt/shared/candidates/{{inputs', '"/mnt/shared/candidate/{{inputs')
    hits = only(broken.check(), "paths")
    assert len(hits) == 3 and all("--saved-model-dir" in f.message for f in hits)


def test_storage_uri_must_be_published_path(broken):
    uri = "pvc://fashion-mnist-pvc/models/other/1"
    broken.edit(ISVC, lambda d: predictor(d)["model"].update(storageUri=uri))
    (f,) = only(broken.check(), "paths")
    assert (f.file, f.obj, f.field) == (ISVC, ISVC_REF, "spec.predictor.model.storageUri")
    assert "not a version where selection publishes" in f.message


@pytest.mark.parametrize("version", ["0", "v2", "1.5", "", "-3", "9223372036854775808", "1/2", "٣"])
def test_the_overlays_model_version_must_be_a_version(broken, version):
    """``make validate`` refuses an overlay whose ``model-version`` is not a TF Serving version
    (ASCII digits, 1 to int64): the rendered storageUri must end in one (issue 50 item 2)."""
    env = "overlays/local-k3d/environment.yaml"
    broken.replace(env, 'model-version: "1"', f"model-version: {json.dumps(version)}")
    hits = only(broken.check("overlays/local-k3d"), "paths")
    assert hits and all(f.field == "spec.predictor.model.storageUri" for f in hits)
    reasons = ("does not end in the model version it serves", "not a version where selection")
    assert any(r in hits[0].message for r in reasons), hits[0].message  # 1/2: models/.../1 is not


def test_the_overlays_model_version_names_the_served_path(broken):
    env = "overlays/gpu-cloud/environment.yaml"
    broken.replace(env, 'model-version: "1"', 'model-version: "12"')
    assert not [f for f in broken.check("overlays/gpu-cloud") if f.check == "paths"]


def test_path_not_on_the_pvc(broken):
    mounts = lambda d: template(d, "select")["container"]["volumeMounts"][0]  # noqa: E731
    broken.edit(WFT, lambda d: mounts(d).update(mountPath="/mnt/data"))
    hits = only(broken.check(), "paths")
    assert any(
        "not on a mounted PVC" in f.message and f.field == "spec.templates[select].container.args"
        for f in hits
    )


def standard(d: dict, **predictor_fields) -> None:
    """Make the InferenceService Standard mode (KServe's HPA) and update its predictor."""
    d["metadata"].setdefault("annotations", {})["serving.kserve.io/deploymentMode"] = "Standard"
    for knative_only in ("scaleMetric", "scaleTarget"):
        predictor(d).pop(knative_only)
    predictor(d).update(predictor_fields)


def autoscaling_findings(broken) -> list:
    return [f for f in broken.check() if f.check == "inferenceservice-autoscaling"]


def test_autoscaling_standard_mode_on_cpu_passes(broken):
    broken.edit(ISVC, lambda d: standard(d, scaleMetric="cpu", scaleTarget=50))
    assert autoscaling_findings(broken) == []
    broken.edit(ISVC, lambda d: d["metadata"]["annotations"].update(
        {"serving.kserve.io/deploymentMode": "RawDeployment"}))  # fmt: skip
    assert autoscaling_findings(broken) == []


def test_autoscaling_knative_metric_in_standard_mode_is_refused(broken):
    broken.edit(ISVC, lambda d: standard(d, scaleMetric="concurrency", scaleTarget=4))
    (f,) = autoscaling_findings(broken)
    assert (f.obj, f.field) == (ISVC_REF, "spec.predictor.scaleMetric")
    assert "Standard mode" in f.message and "cpu/memory only" in f.message


def test_autoscaling_hpa_metric_in_the_default_knative_mode_is_refused(broken):
    broken.edit(ISVC, lambda d: predictor(d).update(scaleMetric="cpu"))
    (f,) = autoscaling_findings(broken)
    assert f.field == "spec.predictor.scaleMetric"
    assert "Knative mode (default, from KServe's default" in f.message
    assert "webhook rejects it" in f.message


@pytest.mark.parametrize(
    ("edit", "field", "text"),
    [
        (lambda p: p.pop("maxReplicas"), "spec.predictor.maxReplicas", "never scales out"),
        (lambda p: p.update(maxReplicas=1), "spec.predictor.maxReplicas", "maxReplicas 1 with"),
        (
            lambda p: p.update(
                containers=[
                    {"name": "kserve-container", "image": "x:1"},  # gets the config's default
                    {"name": "sidecar", "image": "y:1", "resources": {"requests": {}}},
                ]
            ),
            "spec.predictor.containers[1].resources.requests.cpu",
            "needs a CPU request on every container",
        ),
        (lambda p: p.update(scaleTarget=0), "spec.predictor.scaleTarget", "at least 1"),
        (
            lambda p: p.update(scaleMetric="memory", scaleTarget=None),
            "spec.predictor.scaleTarget",
            "memory without scaleTarget",
        ),
    ],
)
def test_autoscaling_standard_mode_that_would_never_scale_is_refused(broken, edit, field, text):
    def breaking(d):
        standard(d, scaleMetric="cpu", scaleTarget=50)
        edit(predictor(d))
        predictor(d).pop("scaleTarget") if predictor(d).get("scaleTarget", 1) is None else None

    broken.edit(ISVC, breaking)
    (f,) = autoscaling_findings(broken)
    assert (f.obj, f.field) == (ISVC_REF, field)
    assert text in f.message, f.message


def test_autoscaling_unknown_autoscaler_class_is_refused(broken):
    broken.edit(ISVC, lambda d: standard(d, scaleMetric="cpu", scaleTarget=50))
    broken.edit(ISVC, lambda d: d["metadata"]["annotations"].update(
        {"serving.kserve.io/autoscalerClass": "kpa"}))  # fmt: skip
    (f,) = autoscaling_findings(broken)
    assert f.field == "metadata.annotations.serving.kserve.io/autoscalerClass"


def test_autoscaling_cpu_request_may_come_from_the_runtime(broken):
    """KServe merges the ServingRuntime's container into the model's: a request there counts
    (kserve-tensorflow-serving asks for 1 CPU); a runtime without one leaves the pod without."""

    def no_model_request(d):
        standard(d, scaleMetric="cpu", scaleTarget=50)
        predictor(d)["model"]["resources"]["requests"].pop("cpu")

    broken.edit(ISVC, no_model_request)
    assert [f for f in broken.check(*RUNTIMES) if f.check == "inferenceservice-autoscaling"] == []
    runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": "no-requests", "namespace": "fashion-mnist"},
        "spec": {
            "supportedModelFormats": [{"name": "tensorflow", "version": "2"}],
            "containers": [{"name": "kserve-container", "image": "x:1"}],
        },
    }
    broken.append(ISVC, runtime)
    broken.edit(
        ISVC,
        lambda d: predictor(d)["model"].update(runtime="no-requests"),
        kind="InferenceService",
    )
    (f,) = [f for f in broken.check(*RUNTIMES) if f.check == "inferenceservice-autoscaling"]
    assert f.field == "spec.predictor.model.resources.requests.cpu"


def test_autoscaling_targets_as_the_webhook_bounds_them(broken):
    """With class hpa the webhook bounds every target to 1-100; without it (the webhook does not
    check) an HPA's CPU utilisation may exceed 100 %."""
    broken.edit(ISVC, lambda d: standard(d, scaleMetric="cpu", scaleTarget=150))
    assert autoscaling_findings(broken) == []
    broken.edit(ISVC, lambda d: d["metadata"]["annotations"].update(
        {"serving.kserve.io/autoscalerClass": "hpa"}))  # fmt: skip
    (f,) = autoscaling_findings(broken)
    assert f.field == "spec.predictor.scaleTarget" and "1-100" in f.message


def test_autoscaling_odd_types_do_not_crash(broken):
    broken.edit(ISVC, lambda d: standard(d, scaleMetric="cpu", scaleTarget="50", maxReplicas="3"))
    findings = autoscaling_findings(broken)
    assert [f.field for f in findings] == ["spec.predictor.maxReplicas"]


KNATIVE = ("base/platform/knative-config", "base/platform/traefik")
NETWORK = "base/platform/knative-config/config-network.yaml"
TRAEFIK = "base/platform/traefik/deployment.yaml"


def traefik_args(d: dict) -> list[str]:
    """The Traefik container's args (mutable)."""
    return d["spec"]["template"]["spec"]["containers"][0]["args"]


def test_knative_ingress_is_served_by_the_rendered_traefik(broken):
    assert [f.format() for f in broken.check(*KNATIVE)] == []
    broken.edit(
        NETWORK,
        lambda d: d["data"].update({"ingress-class": "kourier.ingress.networking.knative.dev"}),
    )
    (f,) = only(broken.check(*KNATIVE), "knative-ingress")
    assert (f.file, f.field) == (NETWORK, "data.ingress-class")
    assert "'kourier.ingress.networking.knative.dev'" in f.message and "Traefik" in f.message


DOMAIN = "base/platform/knative-config/config-domain.yaml"
KSERVE_INGRESS = "base/platform/kserve/patches/inferenceservice-config-ingress.yaml"


def _kserve_domain(domain: str):
    def edit(d: dict) -> None:
        ingress = json.loads(d["data"]["ingress"])
        d["data"]["ingress"] = json.dumps({**ingress, "ingressDomain": domain})

    return edit


def test_knative_domain_is_kserve_ingress_domain(broken):
    """Knative's config-domain and KServe's ingressDomain are set apart: a change to one only
    is named; a change to both passes; a second domain in config-domain is named too."""
    both = ("base/platform/knative-config", "base/platform/kserve")
    assert [f for f in broken.check(*both) if f.check == "knative-domain"] == []
    broken.edit(KSERVE_INGRESS, _kserve_domain("ml.example.org"))
    (f,) = only(broken.check(*both), "knative-domain")
    assert (f.file, f.field) == (DOMAIN, "data")
    assert "routes served under example.com, KServe's ingressDomain is ml.example.org" in f.message
    assert KSERVE_INGRESS in f.message
    broken.edit(DOMAIN, lambda d: d.update(data={"ml.example.org": ""}))
    assert [f for f in broken.check(*both) if f.check == "knative-domain"] == []
    # a cluster-local selector domain and upstream's example are no default domain
    selector = "selector:\n  networking.knative.dev/visibility: cluster-local\n"
    extra = {"svc.cluster.local": selector, "_example": "x"}
    broken.edit(DOMAIN, lambda d: d["data"].update(extra))
    assert [f for f in broken.check(*both) if f.check == "knative-domain"] == []
    broken.edit(DOMAIN, lambda d: d["data"].update({"svc.cluster.local": ""}))
    (f,) = only(broken.check(*both), "knative-domain")
    assert "svc.cluster.local" in f.message
    kfile = broken.root / "base/platform/knative-config/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("  - config-domain.yaml\n", ""))
    (f,) = only(broken.check(*both), "knative-domain")
    assert f.file.endswith("config-network.yaml") and "no config-domain" in f.message
    assert DOMAIN in f.message


@pytest.mark.parametrize(
    ("old", "new", "text"),
    [
        ("--experimental.knative=true", "--log.format=json", "--experimental.knative is required"),
        ("--providers.knative.privateService.name=traefik-internal",
         "--providers.knative.privateService.name=traefik-private",
         "private Service traefik/traefik-private is not rendered"),
        ("--entryPoints.web-internal.address=:8081", "--entryPoints.internal.address=:8081",
         "private entry point 'web-internal' has no --entryPoints.web-internal.address"),
        ("--providers.knative.publicEntrypoints=web",
         "--providers.knative.publicEntrypoints=web,web-internal",
         "public Service traefik/traefik does not reach entry point 'web-internal' (port 8081)"),
        ("--entryPoints.web.address=:8080", "--entryPoints.web.address=:9999",
         "public Service traefik/traefik does not reach entry point 'web' (port 9999)"),
    ],
)  # fmt: skip
def test_traefik_knative_provider_flags(broken, old, new, text):
    broken.edit(TRAEFIK, lambda d: traefik_args(d).__setitem__(traefik_args(d).index(old), new))
    (f,) = only(broken.check(*KNATIVE), "knative-ingress")
    assert f.file == TRAEFIK and text in f.message, f.message


def test_traefik_flags_as_its_parser_reads_them(broken):
    """paerser's flags: case-insensitive keys, ``--key value``, a bare ``--key``; the provider on
    without ``--providers.knative`` itself (any of its flags); odd port lists do not crash."""

    def rewrite(d):
        args = traefik_args(d)
        args.remove("--providers.knative=true")
        args[:] = [a.lower() if a.startswith("--entryPoints") else a for a in args]
        i = args.index("--experimental.knative=true")
        args[i : i + 1] = ["--experimental.knative"]
        d["spec"]["template"]["spec"]["containers"][0]["ports"].append(None)

    broken.edit(TRAEFIK, rewrite)
    assert [f.format() for f in broken.check(*KNATIVE)] == []


def test_a_service_that_selects_other_pods_is_named(broken):
    broken.edit(
        "base/platform/traefik/services.yaml",
        lambda d: d["spec"]["selector"].update(app="traefik-old"),
        name="traefik-internal",
    )
    (f,) = only(broken.check(*KNATIVE), "knative-ingress")
    assert "private Service traefik/traefik-internal does not select Traefik's pods" in f.message


def test_knative_ingress_without_traefik_rendered_is_named(broken):
    def no_provider(d):
        traefik_args(d)[:] = [a for a in traefik_args(d) if "knative" not in a]

    broken.edit(TRAEFIK, no_provider)
    (f,) = only(broken.check(*KNATIVE), "knative-ingress")
    assert f.file == NETWORK
    assert "the rendered Traefik (docker.io/library/traefik:" in f.message
    assert "runs no Knative provider" in f.message
