"""Serving topic: the InferenceService, its logger, and what the serve step applies."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from validation.core import Context, Hit, check, dig

LOGGER_URL = re.compile(
    r"^https?://([^./:]+)\.([^./:]+)(?:\.svc(?:\.cluster\.local)?)?(?::\d+)?(?:/|$)"
)


def components(isvc) -> list[tuple[str, dict]]:
    """(component name, spec) of an InferenceService (predictor, transformer, explainer)."""
    return [(c, spec) for c, spec in (isvc.doc.get("spec") or {}).items() if isinstance(spec, dict)]


@check("inferenceservice")
def inference_service(ctx: Context) -> Iterator[Hit]:
    """Replica bounds, protocol v1 for tensorflow, and the runtime exists (when rendered)."""
    runtimes = {o.name for o in ctx.everywhere("ServingRuntime", "ClusterServingRuntime")}
    for o in ctx.kinds("InferenceService"):
        for comp, spec in components(o):
            lo, hi = spec.get("minReplicas"), spec.get("maxReplicas")
            for key, n in (("minReplicas", lo), ("maxReplicas", hi)):
                if isinstance(n, int) and n < 0:
                    yield o, f"spec.{comp}.{key}", f"{n} < 0"
            if isinstance(lo, int) and isinstance(hi, int) and 0 < hi < lo:  # 0: no upper bound
                yield o, f"spec.{comp}.minReplicas", f"minReplicas {lo} > maxReplicas {hi}"
            model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
            proto, runtime = model.get("protocolVersion"), model.get("runtime")
            if dig(model, "modelFormat", "name") == "tensorflow" and proto not in (None, "v1"):
                msg = f"{proto!r}: the tensorflow format (TF Serving) speaks v1 only"
                yield o, f"spec.{comp}.model.protocolVersion", msg
            if runtime and runtimes and runtime not in runtimes:
                msg = f"no ServingRuntime/ClusterServingRuntime {runtime!r} rendered"
                yield o, f"spec.{comp}.model.runtime", f"{msg} (have: {sorted(runtimes)})"


@check("logger-url")
def logger_url(ctx: Context) -> Iterator[Hit]:
    """An InferenceService logger sends to a rendered Service of its own namespace."""
    services = {(o.namespace, o.name) for o in ctx.kinds("Service")}
    for o in ctx.kinds("InferenceService"):
        for comp, spec in components(o):
            if not (url := (spec.get("logger") or {}).get("url")):
                continue
            field, m = f"spec.{comp}.logger.url", LOGGER_URL.match(url)
            if not m:
                yield o, field, f"logger url {url} is not http://<service>.<namespace>.svc"
            elif m.group(2) != o.namespace:
                yield o, field, f"logger namespace {m.group(2)} != {o.namespace}"
            elif services and (m.group(2), m.group(1)) not in services:
                yield o, field, f"no Service {m.group(2)}/{m.group(1)} for the logger"


@check("serve-consistency")
def serve_step(ctx: Context) -> Iterator[Hit]:
    """What the serve step applies (server-side) to the InferenceService in git writes no spec:
    git (Argo CD, scripts/deploy.sh) owns the spec, so no field has two owners."""
    in_git = {(o.namespace, o.name) for o in ctx.kinds("InferenceService") if not o.embedded_in}
    for e in ctx.kinds("InferenceService"):
        if e.embedded_in and (e.namespace, e.name) in in_git and "spec" in e.doc:
            yield e, "spec", "the spec of an InferenceService in git is git's: apply metadata only"


# KServe v0.20.0's autoscaling rules, per deployment mode (pinned sources):
#   pkg/constants/constants.go          ParseDeploymentMode (RawDeployment -> Standard,
#                                       Serverless -> Knative), AutoscalerAllowed*List
#   pkg/apis/serving/v1beta1/inference_service_validation.go
#                                       validateAutoScalingCompExtension: the webhook's rules
#   pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go
#                                       createHPA / getHPAMetrics: what Standard mode's HPA gets
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
CLASS_ANNOTATION = "serving.kserve.io/autoscalerClass"
KNATIVE_CLASS_ANNOTATION = "autoscaling.knative.dev/class"
LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")
HPA_METRICS = ("cpu", "memory")
KPA_METRICS = ("concurrency", "rps")
UPSTREAM_DEFAULT_MODE = "Serverless"  # kserve-v0.20.0.yaml, inferenceservice-config `deploy`


def _kserve_json(config, key: str) -> dict:
    """The JSON object under data ``key`` of an ``inferenceservice-config`` ConfigMap (KServe
    keeps each group of settings as one JSON string); {} when absent or not a JSON object."""
    data = config.doc.get("data")
    try:
        value = json.loads(data.get(key)) if isinstance(data, dict) else None
    except (TypeError, ValueError):
        value = None
    return value if isinstance(value, dict) else {}


def default_deployment_mode(ctx: Context) -> tuple[str, str]:
    """(mode, where it comes from): the rendered inferenceservice-config's
    ``defaultDeploymentMode``, else upstream's (the platform is not rendered with this check)."""
    for cm in ctx.everywhere("ConfigMap"):
        if cm.name != "inferenceservice-config":
            continue
        mode = _kserve_json(cm, "deploy").get("defaultDeploymentMode")
        if isinstance(mode, str) and mode:
            return LEGACY_MODES.get(mode, mode), f"ConfigMap {cm.namespace}/{cm.name}"
    return LEGACY_MODES[UPSTREAM_DEFAULT_MODE], "KServe's default inferenceservice-config"


def _int(value) -> int | None:
    """An integer field, else ``None`` (a wrong type is the schema check's finding)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unrequested_cpu(comp: str, spec: dict, runtimes: dict[str, dict]) -> list[str]:
    """Fields of the containers whose pod would have no CPU request (the HPA then reports
    'missing request for cpu' and never scales). What KServe fills in counts as a request: a
    ``model`` takes its ServingRuntime's container resources (MergeRuntimeContainers; only
    known when the runtime is rendered), a framework spec (``tensorflow:``, ...) and the first
    custom container take inferenceservice-config's default; further containers take nothing."""
    missing = []
    model = spec.get("model")
    if isinstance(model, dict) and dig(model, "resources", "requests", "cpu") is None:
        runtime = runtimes.get(model.get("runtime"))
        if runtime is not None and not any(
            dig(c, "resources", "requests", "cpu") is not None
            for c in dig(runtime, "spec", "containers") or []
            if isinstance(c, dict) and c.get("name") == "kserve-container"
        ):
            missing.append(f"spec.{comp}.model.resources.requests.cpu")
    containers = spec.get("containers")
    for i, c in enumerate(containers if isinstance(containers, list) else []):
        if i > 0 and isinstance(c, dict) and dig(c, "resources", "requests", "cpu") is None:
            missing.append(f"spec.{comp}.containers[{i}].resources.requests.cpu")
    return missing


def _hpa_rules(
    comp: str, spec: dict, webhook: bool, kserve_hpa: bool, runtimes: dict[str, dict]
) -> Iterator[tuple[str, str]]:
    """An HPA's rules: what KServe's webhook refuses when it checks (``webhook``: class
    ``hpa``, or Knative's HPA class), and what makes KServe's own HPA (``kserve_hpa``: Standard
    mode) never scale or scale on another metric than the one asked for."""
    auto = spec.get("autoScaling")
    if isinstance(auto, dict):  # then KServe reads autoScaling.metrics alone (getHPAMetrics)
        metrics = [m for m in auto.get("metrics") or [] if isinstance(m, dict)]
        for i, m in enumerate(metrics):
            if webhook and m.get("type") != "Resource":
                yield (
                    f"spec.{comp}.autoScaling.metrics[{i}].type",
                    f"{m.get('type')!r}: KServe's HPA takes Resource metrics only (the webhook "
                    "rejects it)",
                )
        uses_cpu = any(dig(m, "resource", "name") == "cpu" for m in metrics)
    else:
        metric = spec.get("scaleMetric") or "cpu"
        target = _int(spec.get("scaleTarget"))
        who = "KServe's webhook rejects it" if webhook else "KServe's HPA gets no such metric"
        if metric not in HPA_METRICS:
            yield (
                f"spec.{comp}.scaleMetric",
                f"{metric!r}: an HPA scales on {'/'.join(HPA_METRICS)} only ({who}; "
                "concurrency and rps are Knative's)",
            )
            return
        if target is not None and (target < 1 or (webhook and target > 100)):
            limits = "1-100" if webhook else "at least 1"
            yield f"spec.{comp}.scaleTarget", f"{target}: a {metric} target is {limits}"
        if metric == "memory" and spec.get("scaleTarget") is None and kserve_hpa:
            yield (
                f"spec.{comp}.scaleTarget",
                "scaleMetric memory without scaleTarget: KServe's HPA gets no metric and the "
                "API defaults it to 80 % CPU",
            )
        uses_cpu = metric == "cpu"
    if kserve_hpa:  # Knative's HPA class: Knative makes the HPA (max 0 = unbounded)
        lo = _int(spec.get("minReplicas"))
        lo = lo if lo is not None and lo >= 1 else 1  # KServe's HPA: at least 1
        hi = _int(spec.get("maxReplicas"))
        if hi is None or hi <= lo:
            yield (
                f"spec.{comp}.maxReplicas",
                f"maxReplicas {spec.get('maxReplicas')} with minReplicas {lo}: KServe's HPA gets "
                f"maxReplicas = {max(lo, hi or 0)} and never scales out (set maxReplicas > {lo}, "
                f"or {CLASS_ANNOTATION}: none for a fixed size)",
            )
    if uses_cpu:
        for field in _unrequested_cpu(comp, spec, runtimes):
            yield (
                field,
                "a CPU utilisation target needs a CPU request on every container of the pod: "
                "the HPA divides usage by it ('missing request for cpu': it never scales)",
            )


def _below_one(value) -> bool:
    target = _int(value)
    return target is not None and target < 1


def _annotations(o) -> dict:
    ann = o.meta.get("annotations")
    return {k: v for k, v in ann.items() if isinstance(v, str)} if isinstance(ann, dict) else {}


@check("inferenceservice-autoscaling")
def inference_service_autoscaling(ctx: Context) -> Iterator[Hit]:
    """KServe's autoscaling rules for the deployment mode each InferenceService gets (its
    annotation, else the rendered or upstream default): Standard mode's HPA takes cpu/memory
    with a CPU request and room to scale; Knative's KPA takes concurrency/rps."""
    default_mode, source = default_deployment_mode(ctx)
    runtimes = {o.name: o.doc for o in ctx.everywhere("ServingRuntime", "ClusterServingRuntime")}
    for o in ctx.kinds("InferenceService"):
        if o.embedded_in or not isinstance(o.doc.get("spec"), dict):
            continue  # the serve step applies metadata only (serve-consistency)
        ann = _annotations(o)
        mode = LEGACY_MODES.get(ann.get(MODE_ANNOTATION), ann.get(MODE_ANNOTATION))
        mode_text = f"{mode} mode" if mode else f"{default_mode} mode (default, from {source})"
        mode = mode or default_mode
        klass = ann.get(CLASS_ANNOTATION)
        if klass is not None and klass not in AUTOSCALER_CLASSES:
            msg = f"{klass!r} is not one of KServe's autoscaler classes {AUTOSCALER_CLASSES}"
            yield o, f"metadata.annotations.{CLASS_ANNOTATION}", msg
            continue
        for comp, spec in components(o):
            if mode == "Standard":
                if klass in (None, "hpa"):
                    rules = _hpa_rules(comp, spec, klass == "hpa", True, runtimes)
                    for field, msg in rules:
                        yield o, field, f"{mode_text}: {msg}"
                elif klass == "keda" and spec.get("scaleMetric"):
                    yield o, f"spec.{comp}.scaleMetric", f"{mode_text}: KEDA takes no scaleMetric"
            else:  # Knative, or any other value: the webhook's default branch (KPA)
                if ann.get(KNATIVE_CLASS_ANNOTATION) == "hpa.autoscaling.knative.dev":
                    for field, msg in _hpa_rules(comp, spec, True, False, runtimes):
                        yield o, field, f"{mode_text} (Knative's HPA class): {msg}"
                    continue
                metric = spec.get("scaleMetric") or "concurrency"
                if metric not in KPA_METRICS:
                    msg = (
                        f"{metric!r}: Knative's autoscaler (KPA) scales on "
                        f"{'/'.join(KPA_METRICS)} only (KServe's webhook rejects it; cpu/memory "
                        "need Standard mode or Knative's HPA class)"
                    )
                    yield o, f"spec.{comp}.scaleMetric", f"{mode_text}: {msg}"
                elif metric == "rps" and _below_one(spec.get("scaleTarget")):
                    msg = f"{mode_text}: an rps target is at least 1"
                    yield o, f"spec.{comp}.scaleTarget", msg
                if spec.get("deploymentStrategy"):
                    msg = f"{mode_text}: deploymentStrategy is Standard mode's only"
                    yield o, f"spec.{comp}.deploymentStrategy", msg


#: Where the two domains are set (what the messages name).
KNATIVE_DOMAIN_FILE = "base/platform/knative-config/config-domain.yaml"
KSERVE_INGRESS_FILE = "base/platform/kserve/patches/inferenceservice-config-ingress.yaml"


@check("knative-domain")
def knative_domain(ctx: Context) -> Iterator[Hit]:
    """Knative's ``config-domain`` serves every route under KServe's ``ingressDomain``: its
    domains with an empty selector (those every route gets; a selector domain, such as a
    cluster-local one, is left alone, as is upstream's ``_example``) are exactly that one. The
    two are set apart (Knative's format takes the domain as a data key, which no kustomize
    replacement can set), and KServe builds the URLs it publishes from its own while Knative
    routes by its own: a difference gives Routes that Traefik serves under one name and
    InferenceService URLs under another (404); with two default domains Knative takes the
    alphabetically first. Where Knative's settings are rendered (its ``config-network``)
    without a ``config-domain``, that is named too: Knative (>= 1.8) then makes every route
    cluster-local."""
    configs = [o for o in ctx.everywhere("ConfigMap")
               if (o.namespace, o.name) == ("kserve", "inferenceservice-config")]  # fmt: skip
    domains = (_kserve_json(o, "ingress").get("ingressDomain") for o in configs)
    wanted = sorted({d for d in domains if isinstance(d, str) and d})
    ours = {o.name: o for o in ctx.kinds("ConfigMap") if o.namespace == "knative-serving"}
    if "config-network" in ours and "config-domain" not in ours:
        msg = ("no config-domain beside Knative's settings: every route would be cluster-local;"
               f" add one naming KServe's ingressDomain ({KNATIVE_DOMAIN_FILE})")  # fmt: skip
        yield ours["config-network"], "metadata.name", msg
    if (cm := ours.get("config-domain")) is None or not wanted:
        return
    data = dig(cm.doc, "data", default={}) or {}
    domains = sorted(k for k, v in data.items() if k != "_example" and not str(v or "").strip())
    if domains != wanted:
        msg = (f"routes served under {' '.join(domains) or 'no domain'}, KServe's ingressDomain"
               f" is {' '.join(wanted)} ({KSERVE_INGRESS_FILE}): set both to the cluster's"
               " domain")  # fmt: skip
        yield cm, "data", msg


#: The KIngress class Traefik's Knative provider serves (traefik pkg/provider/kubernetes/knative:
#: ``traefik.ingress.networking.knative.dev``), the class base/platform/knative-config sets.
TRAEFIK_KNATIVE_CLASS = "traefik.ingress.networking.knative.dev"


def _flags(container: dict) -> dict[str, str]:
    """Traefik's flags in a container's ``command`` and ``args``: ``--key=value``, ``--key value``
    or a bare ``--key`` (``"true"``), keys lower-cased (Traefik's flag parser, paerser, matches
    them case-insensitively)."""
    words = [w for w in [*(container.get("command") or []), *(container.get("args") or [])]
             if isinstance(w, str)]  # fmt: skip
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        key, eq, value = word[2:].partition("=")
        if not eq:
            following = words[i + 1] if i + 1 < len(words) else "--"
            value = "true" if following.startswith("--") else following
        out[key.lower()] = value
    return out


def _containers(o) -> list[dict]:
    """The containers of a workload's pod template (mappings only)."""
    found = dig(o.doc, "spec", "template", "spec", "containers", default=[]) or []
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _port(address: str) -> int | None:
    """The port of a Traefik entry point address (``:8080``, ``0.0.0.0:8080/tcp``)."""
    m = re.search(r":(\d+)(?:/\w+)?$", address)
    return int(m.group(1)) if m else None


def _knative_traefiks(objs) -> list[tuple[object, dict, dict]]:
    """(workload, its Traefik container, that container's flags) for each container that runs
    Traefik's Knative provider: any ``--providers.knative*`` flag enables it (paerser), unless
    ``--providers.knative=false``."""
    found = []
    for o in objs:
        for c in _containers(o):
            flags = _flags(c)
            on = [
                k for k in flags if k == "providers.knative" or k.startswith("providers.knative.")
            ]
            if on and flags.get("providers.knative", "true").lower() != "false":
                found.append((o, c, flags))
    return found


def _targets(svc, container: dict) -> set[int]:
    """The container ports a Service's ports reach (a named targetPort through the container's
    named ports, a number as is, none: the port itself)."""
    named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []
             if isinstance(p, dict)}  # fmt: skip
    out = set()
    for p in dig(svc.doc, "spec", "ports", default=[]) or []:
        if isinstance(p, dict):
            target = p.get("targetPort", p.get("port"))
            target = named.get(target) if isinstance(target, str) else target
            if isinstance(target, int):
                out.add(target)
    return out


WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


@check("knative-ingress")
def knative_ingress(ctx: Context) -> Iterator[Hit]:
    """Knative's ingress class is served: config-network's ``ingress-class`` is Traefik's (the
    platform installs Traefik), and where Traefik is rendered it runs the Knative provider, with
    the experimental flag it refuses to start without, and public and private entry points,
    each with an address and behind the rendered Service the flags name, which selects
    Traefik's pods and targets that address's port (without the private one Traefik drops
    cluster-local routes, such as message-dumper's; without the Services Knative's Routes get
    no address)."""
    workloads = ctx.everywhere(*WORKLOADS)
    traefik_images = [c.get("image") for o in workloads for c in _containers(o)
                      if "traefik" in str(c.get("image", ""))]  # fmt: skip
    for cm in ctx.kinds("ConfigMap"):
        if (cm.namespace, cm.name) != ("knative-serving", "config-network"):
            continue
        cls = dig(cm.doc, "data", "ingress-class")
        if cls != TRAEFIK_KNATIVE_CLASS:
            yield (
                cm,
                "data.ingress-class",
                (
                    f"{cls!r}: the platform's ingress is Traefik (base/platform/traefik), whose"
                    f" Knative provider serves {TRAEFIK_KNATIVE_CLASS!r} only"
                ),
            )
        elif traefik_images and not _knative_traefiks(workloads):
            msg = f"the rendered Traefik ({traefik_images[0]}) runs no Knative provider"
            yield cm, "data.ingress-class", msg
    services = {(o.namespace, o.name): o for o in ctx.everywhere("Service")}
    for o, container, flags in _knative_traefiks(ctx.kinds(*WORKLOADS)):
        field = "spec.template.spec.containers[].args"
        labels = dig(o.doc, "spec", "template", "metadata", "labels", default={}) or {}
        if flags.get("experimental.knative", "").lower() != "true":
            yield o, field, "--experimental.knative is required by Traefik's Knative provider"
        for side in ("public", "private"):
            entries = [e.strip() for e in flags.get(f"providers.knative.{side}entrypoints", "")
                       .split(",") if e.strip()]  # fmt: skip
            ns = flags.get(f"providers.knative.{side}service.namespace")
            name = flags.get(f"providers.knative.{side}service.name")
            if not entries or not ns or not name:
                yield o, field, f"no {side} entry point and Service for Knative's routes"
                continue
            ports = {}
            for entry in entries:
                address = flags.get(f"entrypoints.{entry.lower()}.address")
                if address is None:
                    msg = f"{side} entry point {entry!r} has no --entryPoints.{entry}.address"
                    yield o, field, msg
                else:
                    ports[entry] = _port(address)
            svc = services.get((ns, name))
            if svc is None:
                yield o, field, f"{side} Service {ns}/{name} is not rendered"
                continue
            selector = dig(svc.doc, "spec", "selector", default={}) or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                yield o, field, f"{side} Service {ns}/{name} does not select Traefik's pods"
            reached = _targets(svc, container)
            for entry, port in ports.items():
                if port not in reached:
                    msg = f"{side} Service {ns}/{name} does not reach entry point {entry!r}"
                    yield o, field, f"{msg} (port {port})"
