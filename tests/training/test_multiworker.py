"""Real 2-process MultiWorkerMirroredStrategy runs over loopback, on a slice of the real data."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from fmnist_pipeline.run import BUDGETS, train_args
from training.export import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY
from training.launcher import launch

pytestmark = pytest.mark.slow


def _train(
    tmp_path: Path, model_type, with_chief, data_dir, run_id="t1", epochs=2, precision="float32"
):
    work = tmp_path / "shared"
    scratch_tmp = tmp_path / "local-tmp"  # each replica's TMPDIR: non-chief scratch lives here
    scratch_tmp.mkdir(exist_ok=True)
    budget = {
        **BUDGETS["smoke"],
        "epochs": epochs,
        "precision": precision,
    }  # 2,048 images, 64/replica
    args = train_args(model_type, work, run_id, budget, data_dir)
    env = {"TMPDIR": str(scratch_tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    launch(args, num_workers=2, with_chief=with_chief, name=model_type, env=env, timeout=600)
    return work, scratch_tmp


def _leftovers(*roots: Path) -> list[str]:
    bad = []
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root):
            bad += [
                os.path.join(dirpath, d) for d in dirnames if "workertemp" in d or "staging" in d
            ]
    return bad


def _graph_dtypes(saved: Path) -> set[int]:
    """Every dtype named by a node attribute of the SavedModel's graph and its functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel.FromString((saved / "saved_model.pb").read_bytes())
    graph = sm.meta_graphs[0].graph_def
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    return {
        t
        for n in nodes
        for a in n.attr.values()
        for t in (a.type, *a.list.type)
        if t  # 0: no dtype
    }


@pytest.mark.parametrize(
    ("model_type", "with_chief", "precision"),
    [("batch_norm", False, "mixed_bfloat16"), ("dropout", True, "float32")],
)
def test_two_workers_train_and_only_the_chief_exports(
    tmp_path, data_dir, test_slice, model_type, with_chief, precision
):
    work, scratch_tmp = _train(tmp_path, model_type, with_chief, data_dir, precision=precision)
    saved = work / "candidates" / model_type
    assert (saved / "saved_model.pb").is_file()
    history = json.loads((saved / "training_history.json").read_text())
    assert history["replicas"] == 2
    assert history["global_batch_size"] == 128
    assert history["steps_per_epoch"] == 2048 // 128
    assert len(history["history"]["loss"]) == 2
    assert history["history"]["loss"][-1] < history["history"]["loss"][0]
    assert min(history["history"]["images_per_second"]) > 0
    assert history["precision"] == precision
    # whatever the training precision, the export computes in float32 (any TF Serving runs it)
    assert tf.float32.as_datatype_enum in _graph_dtypes(saved)
    assert tf.bfloat16.as_datatype_enum not in _graph_dtypes(saved)

    # no worker temp dir anywhere: not on the shared volume, not in the replicas' TMPDIR
    assert _leftovers(work, scratch_tmp) == []
    assert list(scratch_tmp.iterdir()) == []
    assert list((work / "candidates").iterdir()) == [saved]
    ckpt = work / "checkpoints" / model_type / "t1"
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith("epoch-")) == [
        "epoch-001",
        "epoch-002",
    ]
    assert any((work / "tensorboard" / model_type / "t1").rglob("events.out.tfevents.*"))

    images, labels = test_slice
    from training.data import encode_images

    sig = tf.saved_model.load(str(saved)).signatures[SIGNATURE_KEY]
    probs = sig(**{INPUT_NAME: tf.constant(encode_images(images[:200], "jpeg"))})[
        OUTPUT_NAME
    ].numpy()
    assert probs.shape == (200, 10)
    assert np.mean(probs.argmax(1) == labels[:200]) > 0.4, "2 short epochs should beat chance (0.1)"


def test_checkpoints_of_different_runs_and_types_never_collide(tmp_path, data_dir):
    work, _ = _train(tmp_path, "cnn", False, data_dir, run_id="run-a", epochs=1)
    _train(tmp_path, "cnn", False, data_dir, run_id="run-b", epochs=1)
    runs = sorted(p.name for p in (work / "checkpoints" / "cnn").iterdir())
    assert runs == ["run-a", "run-b"]
    assert all((work / "checkpoints" / "cnn" / r / "epoch-001").is_dir() for r in runs)
