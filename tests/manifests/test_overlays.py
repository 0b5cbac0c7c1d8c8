"""Overlays change what they mean to change (by name), and keep every other field."""

from __future__ import annotations

import re

import pytest
import yaml

from validation.main import expand
from validation.training import quantity, run_footprint

from .conftest import ROOT, by_name

# workflow parameters each environment sets (overlays/<env>/environment.yaml, by name)
ENV_PARAMS = {
    "image",
    "image-pull-policy",
    "workers",
    "pytorch-workers",
    "train-resources",
    "train-node-selector",
    "train-tolerations",
    "precision",
    "collective-timeout",
}
# integer fields each environment sets (Argo takes no parameter there): the field itself
ENV_FIELDS = {
    ("spec", "templates", "train-all", "parallelism"),  # training-parallelism
    ("spec", "activeDeadlineSeconds"),  # workflow-deadline-seconds
}


def leaves(node, path=()):
    """(path tuple, value) of every leaf of a JSON-like tree (list items by name if named)."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, (*path, str(k)))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from leaves(v, (*path, str(v.get("name", i)) if isinstance(v, dict) else str(i)))
    else:
        yield path, node


def patched_paths(kust_dir) -> set[tuple]:
    """Paths a kustomization's patches set: JSON6902 op paths, strategic-merge leaves."""
    k = yaml.safe_load((ROOT / kust_dir / "kustomization.yaml").read_text())
    out = {("spec", "predictor", "model", "runtimeVersion")} if k.get("replacements") else set()
    for p in k.get("patches") or []:
        patch = yaml.safe_load((ROOT / kust_dir / p["path"]).read_text())
        if isinstance(patch, list):
            out |= {
                tuple(x.replace("~1", "/") for x in op["path"].strip("/").split("/"))
                for op in patch
            }
        else:
            out |= {path for path, _ in leaves(patch) if path[0] != "metadata"}
    return out


def objects(rendered, kust):
    return {(o.kind, o.name, o.embedded_in): o.doc for o in expand(rendered[kust])}


@pytest.mark.parametrize(
    ("base", "overlay"),
    [
        ("base/ml", "overlays/local-k3d"),
        ("base/ml", "overlays/gpu-cloud"),
        ("argocd/apps/local-k3d", "argocd/apps/gpu-cloud"),
    ],
)
def test_overlays_keep_every_field_they_do_not_set(full_run, base, overlay):
    _, rendered = full_run
    changed = patched_paths(overlay) | {("spec", "arguments", "parameters", n) for n in ENV_PARAMS}
    changed |= ENV_FIELDS
    over, compared = objects(rendered, overlay), 0
    for key, doc in objects(rendered, base).items():
        if key[0] in ("TFJob", "PyTorchJob"):
            continue  # the training jobs are the pipeline's, with the overlay's parameter values
        got = dict(leaves(over[key]))
        for path, value in leaves(doc):
            if not any(path[: len(p)] == p for p in changed):
                assert got.get(path, "<missing>") == value, f"{key} {'.'.join(path)}"
                compared += 1
    assert compared > 50


def _one(objs, kind, name_part=""):
    return next(o for o in objs if o.kind == kind and name_part in o.name).doc


def _image_tag(overlay: str) -> str:
    """The content tag the overlay's kustomize images: entry names (scripts/build-image.sh)."""
    kust = yaml.safe_load((ROOT / "overlays" / overlay / "kustomization.yaml").read_text())
    (entry,) = kust["images"]
    return entry["newTag"]


def test_local_k3d_values(full_run):
    _, rendered = full_run
    objs = expand(rendered["overlays/local-k3d"])
    pvc = _one(objs, "PersistentVolumeClaim")["spec"]
    assert pvc["storageClassName"] == "local-path" and pvc["accessModes"] == ["ReadWriteOnce"]
    pred = _one(objs, "InferenceService")["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"], pred["scaleTarget"]) == (0, 5, 1)
    assert pred["logger"]["url"] == "http://message-dumper.fashion-mnist.svc.cluster.local"
    worker = _one(objs, "TFJob", "cnn")["spec"]["tfReplicaSpecs"]["Worker"]
    c = by_name(worker["template"]["spec"]["containers"], "tensorflow")
    assert c["image"] == f"fashion-mnist/ml:{_image_tag('local-k3d')}"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "Never"
    assert c["args"][c["args"].index("--collective-timeout") + 1] == "600"
    wt = _one(objs, "WorkflowTemplate")["spec"]
    # 2 jobs x 2 replicas x 500m: what a 4-CPU k3d has beside the platform (integers, not text)
    assert by_name(wt["templates"], "train-all")["parallelism"] == 2
    assert wt["activeDeadlineSeconds"] == 21600


def test_gpu_cloud_values(full_run):
    _, rendered = full_run
    objs = expand(rendered["overlays/gpu-cloud"])
    pvc = _one(objs, "PersistentVolumeClaim")["spec"]
    assert pvc["storageClassName"] == "nfs-rwx" and pvc["accessModes"] == ["ReadWriteMany"]
    pred = _one(objs, "InferenceService")["spec"]["predictor"]
    assert pred["minReplicas"] >= 1 and pred["model"]["runtimeVersion"].endswith("-gpu")
    assert pred["model"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for model in ("cnn", "dropout", "batch-norm"):
        worker = _one(objs, "TFJob", model)["spec"]["tfReplicaSpecs"]["Worker"]
        pod = worker["template"]["spec"]
        c = by_name(pod["containers"], "tensorflow")
        assert worker["replicas"] == 4 and c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert c["image"] == f"registry.example.com/fashion-mnist/ml-gpu:{_image_tag('gpu-cloud')}"
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu" and pod["nodeSelector"]
        assert c["args"][c["args"].index("--collective-timeout") + 1] == "1800"
    wt = _one(objs, "WorkflowTemplate")["spec"]
    assert by_name(wt["templates"], "train-all")["parallelism"] == 4  # 16 GPUs at once


@pytest.mark.parametrize("overlay", ["local-k3d", "gpu-cloud"])
def test_the_served_version_is_the_overlays_model_version(overlay, broken):
    """The storageUri names exactly the version of the overlay's ``model-version`` (one
    version's base path, never the directory of every version) and the canary's share is
    ``canary-traffic-percent``, as integers (issue 50 items 1 and 3)."""
    env = f"overlays/{overlay}/environment.yaml"
    broken.replace(env, 'model-version: "1"', 'model-version: "42"')
    broken.replace(env, 'canary-traffic-percent: "100"', 'canary-traffic-percent: "20"')
    objs = broken.render(f"overlays/{overlay}")
    (isvc,) = [o for o in objs if o.kind == "InferenceService" and not o.embedded_in]
    pred = isvc.doc["spec"]["predictor"]
    assert pred["model"]["storageUri"] == "pvc://fashion-mnist-pvc/models/fashion-mnist/42"
    assert pred["canaryTrafficPercent"] == 20


def test_argocd_apps_per_environment(full_run):
    _, rendered = full_run
    for env in ("local-k3d", "gpu-cloud"):
        apps = {o.name: o.doc for o in rendered[f"argocd/apps/{env}"] if o.kind == "Application"}
        assert apps["fashion-mnist"]["spec"]["source"]["path"] == f"overlays/{env}"
        assert apps["root"]["spec"]["source"]["path"] == f"argocd/apps/{env}"
        waves = {
            n: int(a["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", 0))
            for n, a in apps.items()
        }
        assert waves["training-operator"] < waves["kserve-runtimes"] < waves["fashion-mnist"]
        assert waves["cert-manager"] < waves["kserve"]  # KServe's webhook certificates
        # Knative's settings and its ingress before KServe's Serverless services and the ML app
        assert waves["knative-config"] < waves["kserve"] and waves["traefik"] < waves["kserve"]
        # every directory of base/platform is the path of an Application: all of it from git
        paths = {a["spec"]["source"]["path"] for a in apps.values()}
        platform = {f"base/platform/{d.name}" for d in (ROOT / "base" / "platform").iterdir()}
        assert platform <= paths, sorted(platform - paths)
        annotations = {
            o.name: (o.meta.get("annotations") or {}).get("argocd.argoproj.io/sync-options", "")
            for o in rendered["base/platform/knative-config"]
        }
        # upstream's objects: neither prune nor the Application's deletion may remove them
        kept = {"Prune=false", "Delete=false"}  # (Argo CD trims each option: annotations.go)
        assert annotations and all(
            kept <= {o.strip() for o in v.split(",")} for v in annotations.values()
        ), annotations
        assert len({a["spec"]["source"]["repoURL"] for a in apps.values()}) == 1


def test_one_runs_training_footprint_per_overlay(full_run):
    """What `make validate` prints per overlay: the largest `training-parallelism` jobs' replica
    requests, summed (local-k3d: 2 jobs x 2 replicas x 500m / 1Gi; gpu-cloud: every job, 4
    replicas each, 4 CPU / 16Gi / 1 GPU per replica)."""
    _, rendered = full_run
    local = run_footprint(expand(rendered["overlays/local-k3d"]))
    assert local == {"jobs": 2, "of": 4, "cpu": 2.0, "memory": 4 * 2**30, "nvidia.com/gpu": 0}
    gpu = run_footprint(expand(rendered["overlays/gpu-cloud"]))
    assert (gpu["jobs"], gpu["cpu"], gpu["memory"], gpu["nvidia.com/gpu"]) == (
        4,
        64,
        256 * 2**30,
        16,
    )


@pytest.mark.parametrize(
    ("text", "units"), [("500m", 0.5), ("2", 2), (1, 1), ("768Mi", 768 * 2**20), ("1G", 1e9)]
)
def test_quantities_read_as_kubernetes_reads_them(text, units):
    assert quantity(text) == units


def test_a_quantity_of_another_form_is_refused():
    with pytest.raises(ValueError, match="not a Kubernetes quantity: '1 Gi'"):
        quantity("1 Gi")


# what the reference docs say an overlay's predictor scales by (`field: N` in backticks)
DOC_REPLICA_FIGURE = re.compile(r"`(minReplicas|maxReplicas|scaleTarget): *(\d+)`")
OVERLAYS = ("local-k3d", "gpu-cloud")


def doc_replica_figures(text: str) -> list[tuple[str, str, int, str]]:
    """(overlay, field, value, paragraph's start) of each ``field: N`` figure of a markdown text.

    A paragraph (blank-line separated) with a figure must name exactly one overlay, the one the
    figure is about; AssertionError names the paragraph otherwise."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        figures = DOC_REPLICA_FIGURE.findall(para)
        if not figures:
            continue
        named = [o for o in OVERLAYS if o in para]
        assert len(named) == 1, f"names {named or 'no overlay'}, not one: {para[:120]!r}"
        out += [(named[0], field, int(value), para[:80]) for field, value in figures]
    return out


def test_doc_replica_figures_need_one_overlay():
    with pytest.raises(AssertionError, match="no overlay"):
        doc_replica_figures("scales at (`scaleTarget: 1`)\n")
    assert doc_replica_figures("local-k3d: `maxReplicas: 5`.") == [
        ("local-k3d", "maxReplicas", 5, "local-k3d: `maxReplicas: 5`.")
    ]


def test_docs_replica_figures_are_the_overlays(full_run):
    """The README's and docs' `scaleTarget`/`minReplicas`/`maxReplicas` figures are what the
    overlay they name renders (docs/results.md is history: its figures keep their day)."""
    _, rendered = full_run
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for doc in docs:
        if doc.name == "results.md":
            continue
        for overlay, field, value, where in doc_replica_figures(doc.read_text()):
            isvc = _one(expand(rendered[f"overlays/{overlay}"]), "InferenceService")
            actual = isvc["spec"]["predictor"][field]
            assert actual == value, f"{doc.name}: {field} {value}, {overlay} has {actual}: {where}"
            checked += 1
    assert checked >= 5
