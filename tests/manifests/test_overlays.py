"""Overlays change what they mean to change, and keep every other field of the CRs."""

from __future__ import annotations

import pytest
import yaml

from validation.cli import expand

from .conftest import ROOT

CR_KINDS = {"WorkflowTemplate", "InferenceService", "Service", "Application", "TFJob"}


def leaves(node, path=()):
    """(path tuple, value) of every leaf of a JSON-like tree."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, (*path, str(k)))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from leaves(v, (*path, str(i)))
    else:
        yield path, node


def patched_paths(kust_dir) -> set[tuple]:
    """JSON6902 op paths of every patch file of a kustomization (as tuples)."""
    k = yaml.safe_load((ROOT / kust_dir / "kustomization.yaml").read_text())
    out = set()
    for p in k.get("patches") or []:
        ops = yaml.safe_load((ROOT / kust_dir / p["path"]).read_text())
        if isinstance(ops, list):
            for op in ops:
                if op["op"] != "test":
                    parts = op["path"].strip("/").split("/")
                    out.add(tuple(x.replace("~1", "/").replace("~0", "~") for x in parts))
    return out


def by_key(objs):
    return {(o.kind, o.namespace, o.name, o.embedded_in): o for o in objs}


@pytest.mark.parametrize(
    ("base", "overlay"),
    [
        ("base/ml", "overlays/local-k3d"),
        ("base/ml", "overlays/gpu-cloud"),
        ("argocd/apps/local-k3d", "argocd/apps/gpu-cloud"),
        ("base/ml/training", "overlays/local-k3d/training"),
        ("base/ml/training", "overlays/gpu-cloud/training"),
    ],
)
def test_patches_keep_unchanged_fields_of_custom_resources(full_run, base, overlay):
    _, rendered = full_run
    base_objs, over_objs = by_key(rendered[base]), by_key(rendered[overlay])
    patched = patched_paths(overlay)
    compared = 0
    for key, b in base_objs.items():
        if b.kind not in CR_KINDS or b.doc.get("apiVersion", "").startswith("v1"):
            continue
        o = over_objs[key]
        over_leaves = dict(leaves(o.doc))
        for path, value in leaves(b.doc):
            if any(path[: len(p)] == p for p in patched):
                continue
            assert over_leaves.get(path, "<missing>") == value, f"{b.ref} {'.'.join(path)}"
            compared += 1
    assert compared > 50


def _one(objs, kind, name_part=""):
    return next(o for o in objs if o.kind == kind and name_part in o.name)


def test_local_k3d_values(full_run):
    _, rendered = full_run
    objs, _ = expand(rendered["overlays/local-k3d"])
    pvc = _one(objs, "PersistentVolumeClaim").doc["spec"]
    assert pvc["storageClassName"] == "local-path" and pvc["accessModes"] == ["ReadWriteOnce"]
    pred = _one(objs, "InferenceService").doc["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"], pred["scaleTarget"]) == (0, 5, 1)
    assert pred["logger"] == {
        "mode": "all",
        "url": "http://message-dumper.fashion-mnist.svc.cluster.local",
    }
    tfjob = _one(objs, "TFJob", "cnn").doc["spec"]["tfReplicaSpecs"]["Worker"]
    c = tfjob["template"]["spec"]["containers"][0]
    assert c["image"] == "fashion-mnist/ml:0.1.0" and c["imagePullPolicy"] == "IfNotPresent"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert tfjob["replicas"] == 2 and tfjob["restartPolicy"] == "OnFailure"
    assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_gpu_cloud_values(full_run):
    _, rendered = full_run
    objs, _ = expand(rendered["overlays/gpu-cloud"])
    pvc = _one(objs, "PersistentVolumeClaim").doc["spec"]
    assert pvc["storageClassName"] == "nfs-rwx" and pvc["accessModes"] == ["ReadWriteMany"]
    pred = _one(objs, "InferenceService").doc["spec"]["predictor"]
    assert pred["minReplicas"] >= 1
    assert pred["model"]["runtimeVersion"].endswith("-gpu")
    assert pred["model"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pred["tolerations"][0]["key"] == "nvidia.com/gpu"
    wft = _one(objs, "WorkflowTemplate")
    train = next(t for t in wft.doc["spec"]["templates"] if t["name"] == "train")
    assert train["resource"]["successCondition"].endswith("{{workflow.parameters.workers}}")
    for model in ("cnn", "dropout", "batch-norm"):
        spec = _one(objs, "TFJob", model).doc["spec"]
        worker = spec["tfReplicaSpecs"]["Worker"]
        pod = worker["template"]["spec"]
        assert worker["replicas"] == 4
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["containers"][0]["image"].startswith("registry.example.com/")
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert pod["nodeSelector"]
        assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
        assert spec["runPolicy"]["backoffLimit"] == 3


def test_argocd_apps_per_environment(full_run):
    _, rendered = full_run
    for env in ("local-k3d", "gpu-cloud"):
        apps = {o.name: o.doc for o in rendered[f"argocd/apps/{env}"] if o.kind == "Application"}
        assert apps["fashion-mnist"]["spec"]["source"]["path"] == f"overlays/{env}"
        assert apps["root"]["spec"]["source"]["path"] == f"argocd/apps/{env}"
        for app in apps.values():
            auto = app["spec"]["syncPolicy"]["automated"]
            assert auto == {"prune": True, "selfHeal": True}
        waves = {
            n: int(a["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", 0))
            for n, a in apps.items()
        }
        assert waves["training-operator"] < waves["kserve-runtimes"] < waves["fashion-mnist"]
        for name in ("training-operator", "argo-workflows", "kserve"):
            assert "ServerSideApply=true" in apps[name]["spec"]["syncPolicy"]["syncOptions"]


def test_argocd_install_has_tfjob_health_check(full_run):
    _, rendered = full_run
    cm = next(o for o in rendered["argocd"] if o.kind == "ConfigMap" and o.name == "argocd-cm")
    lua = cm.doc["data"]["resource.customizations.health.kubeflow.org_TFJob"]
    assert "Succeeded" in lua and "Degraded" in lua
    assert cm.namespace == "argocd"
