"""Helpers for the BackupAndRestore tests (``tests/training/test_finished_run.py``,
``tests/training/test_multiworker.py``): a network compiled as the trainer compiles it, and
the backup tf_keras' ``WorkerTrainingState`` writes for it."""

from __future__ import annotations

from pathlib import Path


def compiled(model_type: str = "cnn"):
    """``model_type``'s network compiled as :mod:`training.train` compiles it, its optimizer
    built (what BackupAndRestore does before restoring)."""
    import tf_keras as keras

    from training.models import build_model

    model = build_model(model_type)
    model.compile(
        optimizer=keras.optimizers.Adam(0.001),
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.optimizer.build(model.trainable_variables)
    return model


def write_backup(backup: Path, model_type: str = "batch_norm", optimizer: bool = True) -> None:
    """Write into ``backup`` what tf_keras' ``WorkerTrainingState`` backs up after epoch 1, for
    ``model_type``'s network (with its optimizer's state unless ``optimizer`` is false)."""
    import tensorflow as tf

    from training.models import build_model

    model = compiled(model_type) if optimizer else build_model(model_type)
    state = tf.train.Checkpoint(
        model=model,
        ckpt_saved_epoch=tf.Variable(0, dtype=tf.int64),
        ckpt_saved_batch=tf.Variable(-1, dtype=tf.int64),
        train_counter=model._train_counter,
    )
    tf.train.CheckpointManager(state, str(backup / "chief"), max_to_keep=1).save()
