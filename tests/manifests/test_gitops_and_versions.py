"""GitOps topic (Argo CD sync waves, drift) and versions (remote bases, one release each)."""

from __future__ import annotations

import shutil

import pytest

from validation.main import run

from .manifest_refs import PVC, only

WAVE = "argocd.argoproj.io/sync-wave"
APPS = "argocd/apps/local-k3d"
CACHE = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "fashion-mnist-ingest-cache",
        "labels": {"workflows.argoproj.io/configmap-type": "Cache"},
    },
}


def in_wave(wave: str):
    """An edit putting an object into an Argo CD sync wave."""
    return lambda d: d["metadata"].setdefault("annotations", {}).update({WAVE: wave})


def test_first_consumer_pvc_not_before_its_consumers(broken):
    broken.edit(PVC, in_wave("-1"))
    hits = only(broken.check("overlays/local-k3d"), "sync-waves")
    assert {(f.file, f.obj) for f in hits} == {
        (PVC, "PersistentVolumeClaim/fashion-mnist/fashion-mnist-pvc")
    }
    consumers = {
        "InferenceService/fashion-mnist/fashion-mnist",
        "WorkflowTemplate/fashion-mnist/fashion-mnist-pipeline",
    }
    assert {c for f in hits for c in consumers if c in f.message} == consumers
    assert all(f.field == f"metadata.annotations[{WAVE}]" for f in hits)


def test_sync_waves_only_for_classes_binding_on_first_consumer(broken):
    broken.edit(PVC, in_wave("-1"))
    assert not [f for f in broken.check("base/ml", "overlays/gpu-cloud") if f.check == "sync-waves"]


def test_storage_class_rendered_with_first_consumer_binding(broken):
    broken.edit(PVC, in_wave("-1"))
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "nfs-rwx"},
        "provisioner": "example.com/nfs",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    broken.append(PVC, sc)
    assert only(broken.check("overlays/gpu-cloud"), "sync-waves")


ISVC = "base/ml/serving/inferenceservice.yaml"
ML_APP = "argocd/apps/common/ml-app.yaml"


def test_a_resource_healthy_only_after_a_run_is_in_the_last_wave(broken):
    assert not [f for f in broken.check(APPS, "overlays/local-k3d") if f.check == "wave-health"]
    broken.edit(ISVC, in_wave("-1"))
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    (f,) = [f for f in hits if f.obj == "InferenceService/fashion-mnist/fashion-mnist"]
    assert f.field == f"metadata.annotations[{WAVE}]"
    assert "Application/argocd/fashion-mnist" in f.message
    # without retries, the rule is the last wave's
    broken.edit(ML_APP, lambda d: d["spec"]["syncPolicy"].pop("retry"))
    (f,) = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    assert f.obj == "InferenceService/fashion-mnist/fashion-mnist"
    assert "before its last wave 0" in f.message


def test_an_application_syncing_such_a_resource_is_in_its_parents_last_wave(broken):
    broken.edit(ML_APP, in_wave("-1"))
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    (f,) = [f for f in hits if f.obj == "Application/argocd/fashion-mnist"]
    assert "Application/argocd/root" in f.message and "InferenceService" in f.message


def _hook_job(phase: str, wave: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"hook-{phase.lower()}",
            "annotations": {"argocd.argoproj.io/hook": phase, WAVE: wave},
        },
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}},
    }


def test_a_retrying_application_with_waves_holds_no_such_resource(broken):
    """The ML app retries failed syncs: with its Namespace back in an earlier wave (its old
    layout), a retry waits for the InferenceService of the last wave (seen in the e2e)."""
    broken.edit("base/ml/namespace.yaml", in_wave("-2"))
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    assert {f.obj for f in hits} == {
        "InferenceService/fashion-mnist/fashion-mnist",
        "PersistentVolumeClaim/fashion-mnist/fashion-mnist-pvc",
    }
    assert all("retries failed syncs" in f.message for f in hits)


def test_a_hook_after_the_last_wave_holds_the_sync_too(broken):
    """A PostSync hook runs once every resource is Healthy: the InferenceService holds it."""
    broken.append(ISVC, _hook_job("PostSync", "0"))
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    assert any(f.obj == "InferenceService/fashion-mnist/fashion-mnist" for f in hits)
    assert all("hook Job/fashion-mnist/hook-postsync" in f.message for f in hits)


def test_a_presync_hook_does_not_count_as_the_last_wave(broken):
    broken.append(ISVC, _hook_job("PreSync", "5"))
    hits = [f for f in broken.check(APPS, "overlays/local-k3d") if f.check == "wave-health"]
    assert not hits, [f.format() for f in hits]


def test_a_wave_is_read_as_argo_cd_reads_it(broken):
    """gitops-engine's syncwaves.Wave: an integer (Go's Atoi) or else Helm's hook weight, else
    wave 0; a value that is no integer is no error (wave 0): ``x`` and ``1_0`` (10 to Python's
    int, which would put the PVC before the InferenceService's wave) leave everything in 0."""

    def hits() -> list:
        return [f for f in broken.check(APPS, "overlays/local-k3d") if f.check == "wave-health"]

    for bad in ("x", "1_0"):
        broken.edit(ISVC, in_wave(bad))
        assert not hits(), bad
    broken.edit(ISVC, lambda d: d["metadata"]["annotations"].update({"helm.sh/hook-weight": "-1"}))
    assert any(f.obj == "InferenceService/fashion-mnist/fashion-mnist" for f in hits())


def test_prune_last_holds_the_last_wave(broken):
    """PruneLast=true prunes in a wave after the last: every sync that prunes waits for the
    InferenceService."""
    broken.edit(
        ML_APP,
        lambda d: d["spec"]["syncPolicy"].setdefault("syncOptions", []).append("PruneLast=true"),
    )
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    (f,) = [f for f in hits if f.obj == "InferenceService/fashion-mnist/fashion-mnist"]
    assert "PruneLast" in f.message and f.field == "spec.syncPolicy.syncOptions"


def test_a_helm_post_install_hook_is_a_post_sync_hook(broken):
    job = _hook_job("PostSync", "0")
    job["metadata"]["annotations"] = {"helm.sh/hook": "post-install"}
    broken.append(ISVC, job)
    hits = only(broken.check(APPS, "overlays/local-k3d"), "wave-health")
    assert any(f.obj == "InferenceService/fashion-mnist/fashion-mnist" for f in hits)


def test_memoize_cache_in_git_is_ignored_by_argocd(broken):
    broken.append("base/ml/pipeline/rbac.yaml", CACHE)
    (f,) = only(broken.check(APPS, "overlays/local-k3d"), "argocd-drift")
    assert (f.obj, f.field) == ("Application/argocd/fashion-mnist", "spec.ignoreDifferences")
    ignore = {
        "kind": "ConfigMap",
        "name": CACHE["metadata"]["name"],
        "jsonPointers": ["/metadata/labels"],
    }
    broken.edit(
        "argocd/apps/common/ml-app.yaml", lambda d: d["spec"].update(ignoreDifferences=[ignore])
    )
    assert not [f for f in broken.check(APPS, "overlays/local-k3d") if f.check == "argocd-drift"]


KSERVE = "base/platform/kserve/kustomization.yaml"
RUNTIMES = "base/platform/kserve-runtimes/kustomization.yaml"


def test_remote_base_must_be_a_pinned_upstream(broken):
    broken.replace(KSERVE, "https://github.com/kserve/", "https://example.com/kserve/")
    (f,) = only(broken.check("base/platform/kserve"), "remote-refs")
    assert (f.file, f.field) == (KSERVE, "resources")
    assert "https://example.com/kserve/kserve/releases/download/v0.20.0/kserve.yaml" in f.message


def test_one_release_per_component(broken, tmp_path):
    """KServe's release is named by two kustomizations (controller, runtimes): they agree."""
    mirror = tmp_path / "mirror"
    shutil.copytree(broken.mirror_dir, mirror)
    old = mirror / "kserve-cluster-resources-v0.20.0.yaml"
    (mirror / "kserve-cluster-resources-v0.19.0.yaml").write_text(old.read_text())
    broken.replace(RUNTIMES, "download/v0.20.0/", "download/v0.19.0/")
    findings = run(broken.root, ["base/platform/kserve-runtimes"], mirror)[0]
    hits = only(findings, "remote-refs")
    assert {(f.file, f.field) for f in hits} == {(KSERVE, "resources"), (RUNTIMES, "resources")}
    assert all("v0.19.0" in f.message and "v0.20.0" in f.message for f in hits)


def test_a_version_without_a_mirror_file_is_a_config_error(broken):
    broken.replace(
        "base/platform/training-operator/kustomization.yaml", "?ref=v1.9.4", "?ref=v1.9.3"
    )
    with pytest.raises(FileNotFoundError, match="training-operator-v1.9.3-standalone.yaml"):
        broken.check("base/platform/training-operator")


SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
COMPARE_OPTIONS = "argocd.argoproj.io/compare-options"


@pytest.mark.parametrize(
    ("rel", "annotation", "value", "lacking"),
    [
        (PVC, SYNC_OPTIONS, "Delete=false", ["Prune=false"]),
        (PVC, SYNC_OPTIONS, " Prune=false , Delete=true", ["Delete=false"]),
        # Argo CD reads the first value of an option (GetAnnotationOptionValue)
        (PVC, SYNC_OPTIONS, "Prune=true,Prune=false,Delete=false", ["Prune=false"]),
        (PVC, SYNC_OPTIONS, "prune=false,Delete=false", ["Prune=false"]),  # case-sensitive
        (PVC, COMPARE_OPTIONS, "IgnoreDifferences", ["IgnoreExtraneous"]),
        ("base/ml/namespace.yaml", SYNC_OPTIONS, "Prune=false", ["Delete=false"]),
        ("base/ml/namespace.yaml", SYNC_OPTIONS, None, ["Prune=false", "Delete=false"]),
        ("base/ml/namespace.yaml", COMPARE_OPTIONS, None, ["IgnoreExtraneous"]),
    ],
    ids=["pvc-pruned", "pvc-deleted", "pvc-first-value", "pvc-case", "pvc-extraneous",
         "namespace-deleted", "namespace-none", "namespace-extraneous"],
)  # fmt: skip
def test_the_volume_and_its_namespace_are_kept_by_every_sync_and_deletion(
    broken, rel, annotation, value, lacking
):
    """The PVC and the Namespace holding it carry Prune=false,Delete=false (as Argo CD reads
    them: the first value, exact case) and IgnoreExtraneous; each one missing is a finding on
    that object and annotation, in both overlays and base/ml; the spacing Argo CD trims is not."""
    assert not [f for f in broken.check("overlays/local-k3d") if f.check == "kept-data"]

    def edit(d: dict) -> None:
        notes = d["metadata"]["annotations"]
        notes.pop(annotation) if value is None else notes.update({annotation: value})

    broken.edit(rel, edit)
    kusts = ("base/ml", "overlays/local-k3d", "overlays/gpu-cloud")
    hits = only(broken.check(*kusts), "kept-data")
    assert {f.kustomization for f in hits} == set(kusts)
    assert all(f.file == rel and f.field == f"metadata.annotations[{annotation}]" for f in hits)
    assert sorted({f.message.split()[1] for f in hits}) == sorted(lacking), hits[0].message
