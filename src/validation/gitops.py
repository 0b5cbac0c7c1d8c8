"""GitOps topic: what Argo CD does with the rendered overlays (sync waves, drift)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from validation.argo import WORKFLOW_KINDS, workflow_spec
from validation.core import Context, Hit, Obj, check, dig
from validation.workflow import memo_caches

WAVE = "argocd.argoproj.io/sync-wave"
# Storage classes of the target clusters that bind on first consumer and are not rendered
# here: k3s' built-in local-path (local-k3d).
KNOWN_WAIT_FOR_FIRST_CONSUMER = {"local-path"}
CLAIM = re.compile(r'"claimName": "([^"]*)"|"pvc://([^/"]*)')


def wave(o: Obj) -> int:
    """The object's Argo CD sync wave (0 when unset)."""
    return int((o.meta.get("annotations") or {}).get(WAVE, 0))


def claims_of(o: Obj) -> set[str]:
    """PVC names an object consumes: each ``claimName`` and ``pvc://`` URI in its spec."""
    spec = workflow_spec(o) if o.kind in WORKFLOW_KINDS else o.doc.get("spec")
    return {a or b for a, b in CLAIM.findall(json.dumps(spec))}


@check("sync-waves")
def sync_waves(ctx: Context) -> Iterator[Hit]:
    """No first-consumer-bound PVC in an earlier sync wave than its consumers."""
    classes = ctx.everywhere("StorageClass")
    wffc = {o.name for o in classes if o.doc.get("volumeBindingMode") == "WaitForFirstConsumer"}
    consumers = [o for o in ctx.ours if not o.embedded_in and o.kind != "PersistentVolumeClaim"]
    for pvc in ctx.kinds("PersistentVolumeClaim"):
        if dig(pvc.doc, "spec", "storageClassName") not in wffc | KNOWN_WAIT_FOR_FIRST_CONSUMER:
            continue
        for o in consumers:
            if o.namespace == pvc.namespace and pvc.name in claims_of(o) and wave(o) > wave(pvc):
                msg = f"wave {wave(pvc)} < wave {wave(o)} of its consumer {o.ref}: the storage"
                msg += " class binds on first consumer, the PVC stays Pending and Argo CD never"
                yield pvc, f"metadata.annotations[{WAVE}]", f"{msg} reaches that wave"


@check("argocd-drift")
def memoize_cache_drift(ctx: Context) -> Iterator[Hit]:
    """Applications syncing a memoize cache ConfigMap ignore its differences."""
    for app in ctx.kinds("Application"):
        if not (synced := ctx.rendered.get(str(dig(app.doc, "spec", "source", "path")))):
            continue
        ignores = dig(app.doc, "spec", "ignoreDifferences", default=[])
        ignored = {i.get("name") for i in ignores if i.get("kind") == "ConfigMap"}
        caches = {name for _, name in memo_caches(Context(synced, ctx.rendered))}
        for cm in (o for o in synced if o.kind == "ConfigMap" and o.name in caches - ignored):
            msg = f"ConfigMap {cm.namespace}/{cm.name} is a memoize cache the Argo controller"
            msg += " rewrites: ignore its differences (or leave it out of git)"
            yield app, "spec.ignoreDifferences", msg
