"""training.train.finished_run: when a re-created replica may export instead of training again;
train.backup_and_restore: which backups an interrupted run resumes from (the two-process cases
are in tests/training/test_multiworker.py)."""

from __future__ import annotations

import json

import pytest
from keras_backup import compiled, write_backup  # tests/training/keras_backup.py

from training import train
from training.tf_config import TaskInfo

TWO_WORKERS = TaskInfo({"worker": ["localhost:1", "localhost:2"]}, "worker", 0)


def _args(tmp_path, *extra):
    argv = ["--model-type", "cnn", "--epochs", "2", "--saved-model-dir", str(tmp_path / "c")]
    return train.build_parser().parse_args(
        [*argv, "--checkpoint-dir", str(tmp_path / "ckpt"), "--run-id", "r1", *extra]
    )


def _finish(args, task=TWO_WORKERS, history=None, epochs=None) -> None:
    """What a finished run leaves: the marker and the last epoch's weights."""
    ckpt = train.checkpoint_dir(args)
    last = ckpt / f"epoch-{epochs or args.epochs:03d}"
    last.mkdir(parents=True)
    (last / "weights.index").write_bytes(b"")
    record = {"flags": train.training_flags(args, task), "history": history or {"epochs": 2}}
    (ckpt / train.TRAINED_FILE).write_text(json.dumps(record))


def test_a_finished_run_with_the_same_flags_is_found(tmp_path):
    args = _args(tmp_path)
    assert train.finished_run(args, TWO_WORKERS) is None  # nothing yet
    _finish(args, history={"epochs": 2, "run_id": "r1"})
    history, weights = train.finished_run(args, TWO_WORKERS)
    assert history == {"epochs": 2, "run_id": "r1"}
    assert weights == train.checkpoint_dir(args) / "epoch-002" / "weights"


@pytest.mark.parametrize(
    "other",
    [
        ["--seed", "7"],
        ["--learning-rate", "0.01"],
        ["--epochs", "3"],
        ["--train-examples", "2048"],
        ["--precision", "float32"],
        ["--augment", "none"],
    ],
)
def test_other_flags_train_again(tmp_path, other):
    _finish(_args(tmp_path))
    assert train.finished_run(_args(tmp_path, *other), TWO_WORKERS) is None


def test_another_number_of_replicas_trains_again(tmp_path):
    args = _args(tmp_path)
    _finish(args)
    three = TaskInfo({"worker": ["a:1", "b:2", "c:3"]}, "worker", 0)
    assert train.finished_run(args, three) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda ckpt: (ckpt / "epoch-002" / "weights.index").unlink(),  # weights not written
        lambda ckpt: (ckpt / train.TRAINED_FILE).write_text("[1, 2]"),
        lambda ckpt: (ckpt / train.TRAINED_FILE).write_text("{not json"),
        lambda ckpt: (ckpt / train.TRAINED_FILE).write_text(
            json.dumps({**json.loads((ckpt / train.TRAINED_FILE).read_text()), "history": 3})
        ),
    ],
)
def test_an_incomplete_or_damaged_marker_trains_again(tmp_path, damage):
    args = _args(tmp_path)
    _finish(args)
    damage(train.checkpoint_dir(args))
    assert train.finished_run(args, TWO_WORKERS) is None


def test_weights_of_another_network_are_a_one_line_error(tmp_path):
    """A finished run's checkpoint written by another network (an older version's, under a
    reused --run-id) stops the export with a ConfigError naming the file, not a traceback."""
    from fmnist_common.cli import ConfigError
    from training.models import build_model

    args = _args(tmp_path)  # cnn
    weights = train.checkpoint_dir(args) / "epoch-002" / "weights"
    build_model("batch_norm").save_weights(str(weights))  # other layers and shapes
    with pytest.raises(ConfigError, match=r"checkpoint .*weights holds another network"):
        train.export_finished(args, TWO_WORKERS, ({"epochs": 2}, weights))
    assert not (tmp_path / "c").exists()  # nothing exported


def test_a_backup_of_another_network_is_a_one_line_error(tmp_path, data_dir):
    """An interrupted run's BackupAndRestore backup written by another network (an older
    version's, under a reused --run-id) stops training at the restore with one line naming
    the backup, not a traceback, and exports nothing."""
    import os
    import subprocess
    import sys

    args = _args(tmp_path)  # cnn, run id r1
    backup = train.checkpoint_dir(args) / "backup"
    write_backup(backup, "batch_norm")  # other layers and shapes
    argv = ["--model-type", "cnn", "--epochs", "2", "--train-examples", "2048"]
    argv += ["--validation-examples", "512", "--precision", "float32", "--run-id", "r1"]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt"), "--saved-model-dir", str(tmp_path / "c")]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}  # one local replica
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.train",
            *argv,
            *(["--data-dir", data_dir] * bool(data_dir)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [
        ln for ln in proc.stderr.splitlines() if ln.startswith("python -m training.train: error: ")
    ]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert f"backup {backup} cannot be restored (another network's" in errors[0], errors[0]
    assert not (tmp_path / "c").exists()  # nothing exported


def _callback_on(backup):
    """train.backup_and_restore(backup) on a compiled cnn, as fit() would hold it."""
    callback = train.backup_and_restore(backup)
    callback.set_model(compiled("cnn"))
    return callback


def _truncate_data(backup):
    (shard,) = (backup / "chief").glob("ckpt-1.data-*")
    shard.write_bytes(shard.read_bytes()[:100])


def _truncate_index(backup):
    (index,) = (backup / "chief").glob("ckpt-1.index")
    index.write_bytes(index.read_bytes()[:10])


def _empty_state(backup):
    (backup / "chief" / "checkpoint").write_text("")


@pytest.mark.parametrize(
    ("model_type", "optimizer", "damage"),
    [
        ("batch_norm", True, None),  # another network: variables of other shapes
        ("cnn", False, None),  # the optimizer's variables missing
        ("cnn", True, _truncate_data),
        ("cnn", True, _truncate_index),
        ("cnn", True, _empty_state),
    ],
    ids=["another-network", "no-optimizer-state", "truncated-data", "truncated-index", "state"],
)
def test_a_backup_that_cannot_be_restored_is_a_config_error(
    tmp_path, model_type, optimizer, damage
):
    """A backup of another network, one without this run's optimizer state, or a damaged one:
    a ConfigError naming the backup (retrying cannot help)."""
    from fmnist_common.cli import ConfigError

    backup = tmp_path / "backup"
    write_backup(backup, model_type, optimizer)
    if damage:
        damage(backup)
    with pytest.raises(ConfigError, match=rf"backup {backup} cannot be restored"):
        _callback_on(backup).on_train_begin()


def test_an_interrupted_run_resumes_from_its_backup(tmp_path, test_slice):
    """The backup tf_keras itself writes (model, optimizer, counters, after a real epoch) passes
    the check, and the next fit() starts at the epoch after it."""
    import numpy as np
    import tf_keras as keras

    images, labels = test_slice
    onehot = np.eye(10, dtype="float32")[labels]
    backup = tmp_path / "backup"

    class Killed(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("killed after the first epoch")

    model = compiled("cnn")
    with pytest.raises(RuntimeError, match="killed"):
        model.fit(images, onehot, epochs=2, batch_size=100, verbose=0,
                  callbacks=[train.backup_and_restore(backup), Killed()])  # fmt: skip
    assert list((backup / "chief").glob("ckpt-*.index"))  # the backup of epoch 1
    again = compiled("cnn").fit(
        images, onehot, epochs=2, batch_size=100, verbose=0,
        callbacks=[train.backup_and_restore(backup)],
    )  # fmt: skip
    assert again.epoch == [1]  # resumed: only the second epoch ran
    assert not backup.exists() or not any(backup.iterdir())  # deleted when training ended


def test_an_error_outside_the_restore_is_not_blamed_on_the_backup(tmp_path, monkeypatch):
    """A bug before the restore (here: the optimizer's build) keeps its own exception, with a
    backup present or not; so does an error of another kind inside the restore (here: out of
    memory)."""
    import traceback

    import tensorflow as tf
    import tf_keras as keras
    from tf_keras.src.distribute import worker_training_state

    def broken(self, var_list):
        raise ValueError("a genuine bug")

    for backup in (tmp_path / "none", tmp_path / "backup"):
        if backup.name == "backup":
            write_backup(backup, "cnn")
        callback = train.backup_and_restore(backup)
        callback.set_model(keras.models.clone_model(compiled("cnn")))  # optimizer not built
        callback.model.compile(optimizer=keras.optimizers.Adam(0.001), loss="mse")
        monkeypatch.setattr(keras.optimizers.Adam, "build", broken)
        with pytest.raises(ValueError, match="a genuine bug"):
            callback.on_train_begin()
        monkeypatch.undo()

    def oom(self, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "out of memory")

    monkeypatch.setattr(tf.train.Checkpoint, "restore", oom)  # inside WorkerTrainingState.restore
    with pytest.raises(tf.errors.ResourceExhaustedError, match="out of memory") as raised:
        _callback_on(tmp_path / "backup").on_train_begin()
    restore = worker_training_state.WorkerTrainingState.restore.__code__
    assert any(f.f_code is restore for f, _ in traceback.walk_tb(raised.value.__traceback__))
