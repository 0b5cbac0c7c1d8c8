"""Serving topic: the InferenceService, its logger, and what the serve step applies."""

from __future__ import annotations

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
