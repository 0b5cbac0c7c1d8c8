"""Standalone TFJobs (base/ml/training + overlays/<env>/training) train like the pipeline."""

from __future__ import annotations

import pytest
import yaml

from validation.cli import expand
from validation.consistency import standalone_tfjobs

from .conftest import ROOT
from .test_checks_broken import only

TRAINING = "base/ml/training"
ARGS = "spec.tfReplicaSpecs.Worker.template.spec.containers[0].args"
VARIANTS = {"cnn": "cnn", "dropout": "dropout", "batch_norm": "batch-norm"}


def test_one_tfjob_per_variant_not_synced_by_argocd(full_run):
    _, rendered = full_run
    for kust in (TRAINING, "overlays/local-k3d/training", "overlays/gpu-cloud/training"):
        jobs = standalone_tfjobs(rendered[kust])
        assert sorted(o.name for o in jobs) == sorted(
            f"fashion-mnist-train-{s}" for s in VARIANTS.values()
        )
        for o in jobs:
            worker = o.doc["spec"]["tfReplicaSpecs"]["Worker"]
            args = worker["template"]["spec"]["containers"][0]["args"]
            assert args[args.index("--run-id") + 1] == "manual"
    # the layer Argo CD syncs (and deploy.sh applies) has no standalone TFJob
    base = yaml.safe_load((ROOT / "base/ml/kustomization.yaml").read_text())
    assert not any("training" in r for r in base["resources"])
    for kust in ("base/ml", "overlays/local-k3d", "overlays/gpu-cloud"):
        assert standalone_tfjobs(rendered[kust]) == []


def test_overlay_values(full_run):
    _, rendered = full_run
    for o in standalone_tfjobs(rendered["overlays/gpu-cloud/training"]):
        worker = o.doc["spec"]["tfReplicaSpecs"]["Worker"]
        pod = worker["template"]["spec"]
        c = pod["containers"][0]
        assert worker["replicas"] == 4
        assert c["image"] == "registry.example.com/fashion-mnist/ml:0.1.0-gpu"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    for o in standalone_tfjobs(rendered["overlays/local-k3d/training"]):
        worker = o.doc["spec"]["tfReplicaSpecs"]["Worker"]
        c = worker["template"]["spec"]["containers"][0]
        assert worker["replicas"] == 2 and "nvidia.com/gpu" not in c["resources"]["limits"]
        assert c["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}


@pytest.mark.parametrize("env", ["local-k3d", "gpu-cloud"])
def test_same_container_as_the_pipeline_tfjob(full_run, env):
    _, rendered = full_run
    pipeline, _ = expand(rendered[f"overlays/{env}"])
    wf = {o.name.rsplit("-", 1)[-1]: o for o in pipeline if o.kind == "TFJob"}
    for o in standalone_tfjobs(rendered[f"overlays/{env}/training"]):
        ref = wf[o.name.rsplit("-", 1)[-1]]
        mine = o.doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        theirs = ref.doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        for key in ("command", "image", "resources", "securityContext", "volumeMounts"):
            assert mine[key] == theirs[key], (o.name, key)
        strip = slice(0, -2)  # --run-id is last
        assert mine["args"][strip] == theirs["args"][strip]


def test_args_differing_from_the_pipeline(broken):
    broken.replace(
        f"{TRAINING}/tfjob-dropout.yaml",
        '- --epochs\n                - "12"',
        '- --epochs\n                - "10"',
    )
    (f,) = only(broken.check(TRAINING), "standalone-tfjob")
    assert (f.file, f.obj, f.field) == (
        f"{TRAINING}/tfjob-dropout.yaml",
        "TFJob/fashion-mnist/fashion-mnist-train-dropout",
        ARGS,
    )
    assert "base/ml/pipeline/workflowtemplate.yaml" in f.message and "dropout" in f.message


def test_run_id_is_ignored(broken):
    broken.replace(f"{TRAINING}/tfjob-cnn.yaml", "- manual\n", "- my-experiment\n")
    assert broken.check(TRAINING) == []


def test_overlay_patch_differing_from_the_pipeline_parameters(broken):
    broken.replace(
        "overlays/gpu-cloud/training/patches/tfjob-gpu-workers.yaml", "value: 4", "value: 2"
    )
    hits = only(broken.check("overlays/gpu-cloud/training"), "standalone-tfjob")
    assert {f.field for f in hits} == {"spec.tfReplicaSpecs.Worker.replicas"}
    assert {f.obj for f in hits} == {
        f"TFJob/fashion-mnist/fashion-mnist-train-{s}" for s in VARIANTS.values()
    }


def test_pipeline_changed_but_not_the_standalone_tfjob(broken):
    broken.replace("base/ml/pipeline/workflowtemplate.yaml", "- cosine\n", "- constant\n")
    hits = only(broken.check(TRAINING), "standalone-tfjob")
    assert len(hits) == 3 and all(f.field == ARGS for f in hits)


def test_standalone_flags_parsed_by_the_training_cli(broken):
    broken.replace(f"{TRAINING}/tfjob-cnn.yaml", "- --lr-schedule\n", "- --lr-scheduler\n")
    hits = only(broken.check(TRAINING), "cli-flags")
    assert [(f.file, f.field) for f in hits] == [(f"{TRAINING}/tfjob-cnn.yaml", ARGS)]
    assert "training.train rejects" in hits[0].message
