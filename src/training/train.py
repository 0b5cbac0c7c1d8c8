"""Train one model variant with ``MultiWorkerMirroredStrategy`` (what every TFJob replica runs).

Each replica reads ``TF_CONFIG`` (injected by the Kubeflow training operator, or by
:mod:`training.launcher` locally), joins the collective ring, trains on its own shard of the
examples (one input pipeline per worker), and then *every* replica saves (saving runs
collectives); only the chief's files survive, following TensorFlow's multi-worker Keras tutorial:

  * chief: checkpoints under ``<checkpoint-dir>/<model-type>/<run-id>/`` (and, once training
    ended, ``trained.json``: a replica re-created after that exports without the strategy,
    :func:`finished_run`), TensorBoard logs under ``<tensorboard-dir>/<model-type>/<run-id>/``,
    the SavedModel and its ``training_history.json`` at ``--saved-model-dir`` (staged beside
    it, then renamed into place);
  * other workers: the same writes go to a private temporary directory on local disk that is
    deleted afterwards, so no ``workertemp`` directory ever appears on the shared volume.

Example (what the TFJob containers run)::

    python -m training.train --model-type cnn --data-dir /mnt/shared/tfds \
        --epochs 16 --batch-size-per-replica 512 --learning-rate 0.01 --lr-schedule cosine \
        --checkpoint-dir /mnt/shared/checkpoints --tensorboard-dir /mnt/shared/tensorboard \
        --saved-model-dir /mnt/shared/candidates/cnn --run-id pipeline-abc12
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common.cli import ConfigError, number, positive_int
from training.data import DatasetError
from training.leftovers import make_owned_dir, release_dir, remove_stale_dirs
from training.models import MODEL_TYPES
from training.precision import PRECISION_CHOICES, resolve_precision
from training.tf_config import TaskInfo, TFConfigError, is_chief, parse_tf_config

log = logging.getLogger("training.train")
HISTORY_FILE = "training_history.json"
# In the run's checkpoint directory: a finished training's flags and history, written by the
# chief when training ends, before the export (:func:`finished_run`)
TRAINED_FILE = "trained.json"
SCRATCH_PREFIX = "workertemp_"
LR_SCHEDULES = ("constant", "cosine", "exponential")
AUGMENTATIONS = ("none", "shift", "shift-flip", "shift-flip-erase")
SHIFT_PIXELS = 2  # random shifts of up to 2 px (7 % of the side) in each direction
ERASE_PIXELS = 10  # side of the square that random erasing blanks, half of the time


class _ProfileBatches(argparse.Action):
    """``FIRST LAST`` with ``1 <= FIRST <= LAST``, or ``0 0``; else a usage error (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None):
        first, last = values
        if (first == 0) != (last == 0) or first > last:
            parser.error(f"{option_string} {first} {last}: need 1 <= FIRST <= LAST, or 0 0")
        setattr(namespace, self.dest, (first, last))


def add_shared_arguments(p: argparse.ArgumentParser) -> None:
    """The flags both trainers take, with the same meaning (this one and
    :mod:`training.torch_train`): the manifests and :func:`fmnist_pipeline.run.train_args`
    pass them to either."""
    p.add_argument(
        "--data-dir",
        default=None,
        help="tfds data dir with fashion_mnist prepared (default: $TFDS_DATA_DIR)",
    )
    p.add_argument("--epochs", type=positive_int, default=12)
    p.add_argument("--batch-size-per-replica", type=positive_int, default=128)
    p.add_argument(
        "--learning-rate",
        type=number(float, 0, low_open=True),
        default=0.003,
        help="peak learning rate",
    )
    p.add_argument(
        "--warmup-epochs",
        type=number(float, 0),
        default=1.0,
        help="linear warm-up (cosine schedule)",
    )
    p.add_argument(
        "--train-examples",
        type=number(int, 0),
        default=0,
        help="use the first N train examples; 0 = all",
    )
    p.add_argument(
        "--validation-examples",
        type=number(int, 0),
        default=10_000,
        help="test-split examples evaluated after each epoch for the curves; 0 = none",
    )
    p.add_argument(
        "--run-id",
        default=os.environ.get("RUN_ID", "local"),
        help="names this run's checkpoint/log directories; reusing it resumes an interrupted run "
        "and exports a finished one again (same flags; default: $RUN_ID)",
    )
    p.add_argument("--seed", type=number(int, 0, 2**32 - 1), default=42)
    p.add_argument(
        "--augment",
        choices=AUGMENTATIONS,
        default="shift-flip",
        help="training-time augmentation of each batch: random shifts, left-right flips, "
        "erasing (the default leaves erasing out: it bought nothing in schedules of 20-22 "
        "epochs of the network without the stem, docs/results.md)",
    )
    p.add_argument(
        "--label-smoothing",
        type=number(float, 0, 1, high_open=True),
        default=0.1,
        help="cross-entropy label smoothing",
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="auto",
        help="compute precision while training (mixed_bfloat16: bfloat16 compute, float32 "
        "weights, fast only on CPUs with AVX512_BF16/AMX and on Ampere+ GPUs; auto: "
        "mixed_bfloat16 where the device computes bfloat16 natively, else float32, see "
        "training.precision); the export is float32",
    )
    p.add_argument(
        "--collective-timeout",
        type=number(float, 1, 86400),
        default=600.0,
        help="seconds (1 to 86400; default 600) the rendezvous waits for every replica of "
        "the job; one that does not join in time makes this replica exit "
        f"{PEER_LOST_EXIT_CODE} (retryable) naming this flag",
    )


def build_parser() -> argparse.ArgumentParser:
    """The training CLI; the TFJob manifests pass exactly these flags."""
    p = argparse.ArgumentParser(
        prog="python -m training.train",
        description="Train one Fashion-MNIST model variant with MultiWorkerMirroredStrategy.",
    )
    p.add_argument("--model-type", required=True, choices=MODEL_TYPES)
    add_shared_arguments(p)
    p.add_argument(
        "--steps-per-epoch",
        type=number(int, 0),
        default=0,
        help="steps per epoch; 0 = one pass over the (limited) train split",
    )
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="cosine")
    p.add_argument(
        "--saved-model-dir",
        required=True,
        help="where the chief exports the candidate SavedModel",
    )
    p.add_argument(
        "--checkpoint-dir",
        required=True,
        help="checkpoint root; this run writes <dir>/<model-type>/<run-id>",
    )
    p.add_argument(
        "--tensorboard-dir",
        default=None,
        help="TensorBoard root; this run writes <dir>/<model-type>/<run-id>",
    )
    p.add_argument(
        "--collective",
        choices=("auto", "ring"),
        default="ring",
        help="all-reduce implementation on CPU (GPUs always use NCCL)",
    )
    p.add_argument(
        "--bytes-per-pack",
        type=number(int, 0),
        default=0,
        help="split the gradient all-reduce into packs of about this many bytes, launched "
        "last layer first, so that the first packs overlap the rest of the backward pass; "
        "0 = one pack (TensorFlow's default)",
    )
    p.add_argument(
        "--profile-batches",
        type=number(int, 0),
        nargs=2,
        default=(0, 0),
        action=_ProfileBatches,
        metavar=("FIRST", "LAST"),
        help="write a TensorBoard profile of these training batches on the chief (1-based, "
        "counted from this process's first batch; 0 0 = none; needs --tensorboard-dir)",
    )
    p.add_argument(
        "--intra-op-threads",
        type=number(int, 0),
        # a string default goes through ``type`` too: a bad variable is a usage error
        default=os.environ.get("TF_NUM_INTRAOP_THREADS", "0"),
        help="TensorFlow intra-op threads; 0 = TensorFlow's default",
    )
    return p


def checkpoint_dir(args: argparse.Namespace) -> Path:
    """``<checkpoint-dir>/<model-type>/<run-id>``: distinct per model type and per run.

    Every replica passes this same (shared) path to the Keras checkpoint callbacks, as in
    TensorFlow's multi-worker tutorial; tf-keras itself redirects non-chief writes to
    ``workertemp_<id>`` subdirectories and deletes them after each save.
    """
    return Path(args.checkpoint_dir) / args.model_type / args.run_id


def run_dirs(args: argparse.Namespace, task: TaskInfo) -> dict[str, Path | None]:
    """Where this replica writes TensorBoard logs and its SavedModel export.

    The chief writes to the real (shared) paths; any other replica to a fresh local temporary
    ``scratch`` directory (``workertemp_*`` in the system temp folder) that :func:`train`
    deletes at the end; the scratch directories of workers that were killed are removed first
    (see :mod:`training.leftovers`), and so are the ``workertemp_<task index>`` directories that
    tf-keras' callbacks had this replica write under the run's checkpoint directory
    (``epoch-NNN/``, ``backup/``) when an earlier incarnation of it was killed between a save
    and its removal: only a replica of that task index writes them, and this one has not
    started yet.
    """
    if is_chief(task):
        tb = (
            Path(args.tensorboard_dir) / args.model_type / args.run_id
            if args.tensorboard_dir
            else None
        )
        return {
            "scratch": None,
            "tensorboard": tb,
            "export_parent": Path(args.saved_model_dir).parent,
        }
    remove_stale_dirs(None, f"{SCRATCH_PREFIX}*")  # left by workers killed with kill -9
    # tf_keras.src.distribute.distributed_file_utils names them workertemp_<task_id>
    for stale in checkpoint_dir(args).glob(f"*/{SCRATCH_PREFIX}{task.task_index}"):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = make_owned_dir(None, f"{SCRATCH_PREFIX}{task.task_type}_{task.task_index}_")
    return {"scratch": scratch, "tensorboard": scratch / "tensorboard", "export_parent": scratch}


class RendezvousTimeout(Exception):
    """Not every replica of ``TF_CONFIG``'s cluster joined within ``--collective-timeout``
    seconds (a peer never started: its pod unschedulable, its node lost). Retryable:
    :func:`main` exits :data:`PEER_LOST_EXIT_CODE`, like a peer lost later."""


def bound_rendezvous(task: TaskInfo, timeout: float) -> None:
    """Make the start of ``MultiWorkerMirroredStrategy`` wait at most ``timeout`` seconds
    for the other replicas, instead of TensorFlow's default of an hour.

    The strategy configures TensorFlow's coordination service (chief and worker jobs, the
    leader ``multi_worker_util.coordination_leader``) only when none is configured yet; this
    configures the same service first, with ``cluster_register_timeout_in_ms`` and
    ``cluster_register_with_barrier`` (every task waits at the register barrier, not only the
    leader), as ``collective_all_reduce_strategy._initialize_multi_worker`` would. A no-op for
    a local run (empty ``task.cluster``) or a task outside the chief/worker jobs.
    """
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    from tensorflow.python.training.server_lib import ClusterSpec

    if not task.cluster or task.task_type not in ("chief", "worker"):
        return
    if timeout < 1:  # 0 ms would be TensorFlow's default, an hour
        raise ValueError(f"a rendezvous timeout of at least 1 s, got {timeout!r}")
    spec = ClusterSpec(task.cluster)
    jobs = [
        coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
        for job in ("chief", "worker")
        if job in spec.jobs
    ]
    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs,
        cluster_register_timeout_in_ms=int(timeout * 1000),
    )
    ctx.coordination_service.cluster_register_with_barrier = True


def make_strategy(task: TaskInfo, args: argparse.Namespace):
    """``MultiWorkerMirroredStrategy`` with the ``--collective`` all-reduce (NCCL when GPUs are
    visible) and ``--bytes-per-pack``, whose rendezvous waits at most ``--collective-timeout``
    seconds (:func:`bound_rendezvous`). tf-keras all-reduces every gradient in one call; with
    ``bytes_per_pack=0`` that is one collective, which starts once the last gradient is
    computed. With packs, TensorFlow launches one collective per pack in reverse variable
    order (``CollectiveAllReduce``: the last layers' gradients, computed first, go first), and
    in a graph each pack's collective runs as soon as its gradients exist, beside the rest of
    the backward pass. No per-collective timeout (``CommunicationOptions.timeout_seconds``
    starts a thread for each collective, "only for debugging" in TensorFlow's words): a replica
    lost after the rendezvous is found by the coordination service's heartbeat.

    Raises:
        RendezvousTimeout: a replica did not join within ``--collective-timeout`` seconds.
    """
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    gpus = tf.config.list_physical_devices("GPU")
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=args.bytes_per_pack,
        implementation=impl.NCCL if gpus else getattr(impl, args.collective.upper()),
    )
    bound_rendezvous(task, args.collective_timeout)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except tf.errors.DeadlineExceededError as exc:
        peers = ", ".join(f"{job}: {len(a)}" for job, a in task.cluster.items())
        raise RendezvousTimeout(
            rendezvous_message(
                f"TF_CONFIG's cluster ({peers})",
                args.collective_timeout,
                stragglers(str(exc)),
            )
        ) from exc


def stragglers(message: str) -> str:
    """What a coordination service's register-barrier error says of the tasks that did not
    join, e.g. ``"1 of 4 tasks joined; missing: /job:worker/replica:0/task:1,
    /job:worker/replica:0/task:2, and 1 more"``; '' when it says nothing (a task other than
    the leader: "Deadline Exceeded"). TensorFlow lists "Some timed out task names", not all."""
    named = sorted({ln.strip() for ln in message.splitlines() if ln.strip().startswith("/job:")})
    counted = re.search(r"# of tasks that reached the barrier: (\d+)/(\d+)", message)
    parts = [f"{counted[1]} of {counted[2]} tasks joined"] if counted else []
    if named:
        missing = int(counted[2]) - int(counted[1]) if counted else len(named)
        more = f", and {missing - len(named)} more" if missing > len(named) else ""
        parts.append(f"missing: {', '.join(named)}{more}")
    return "; ".join(parts)


def rendezvous_message(group: str, timeout: float, detail: str = "") -> str:
    """The one line both trainers log when ``group`` (e.g. ``"TF_CONFIG's cluster (worker:
    2)"``) did not all join within ``timeout`` seconds (``--collective-timeout``)."""
    return (
        f"rendezvous: not every replica of {group} joined within {timeout:g} s "
        f"(--collective-timeout){'; ' + detail if detail else ''}; is every replica's pod "
        "scheduled and running?"
    )


def augment(images, labels, kind: str, seed):
    """Training-time augmentation of a batch ``uint8 [B, 28, 28, 1]`` (``kind``: one of
    :data:`AUGMENTATIONS` but ``none``), with an independent draw for every image, from
    stateless random ops seeded by ``seed`` (``int64 [2]``, one per batch), so each worker's
    draws depend on its own seed stream only:

    * ``shift``: a random shift of up to :data:`SHIFT_PIXELS` in each direction (zero padding,
      then a random 28x28 crop);
    * ``flip``: a random left-right mirror;
    * ``erase``: half of the time, a random :data:`ERASE_PIXELS` square set to the background
      (0), clipped at the border ("Cutout", DeVries & Taylor 2017; "Random Erasing", Zhong et
      al. 2020, which reports gains on Fashion-MNIST).

    Vectorised over the batch (gathers and masks, no per-image ops; its cost is measured in
    docs/results.md). Runs in ``tf.data`` only: the exported model has no random layer, so
    serving computes exactly what evaluation measured.

    Args:
        images: ``uint8 [B, 28, 28, 1]``; labels: any tensor with leading dimension ``B``
            (``int64 [B]`` in :func:`train_input`), returned unchanged.

    Returns:
        ``(uint8 [B, 28, 28, 1], labels)``.
    """
    import tensorflow as tf

    n = tf.shape(images)[0]
    crop, flip, where, coin = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    pad, side = SHIFT_PIXELS, tf.range(28)
    padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    corner = tf.random.stateless_uniform([n, 2], crop, 0, 2 * pad + 1, dtype=tf.int32)
    images = tf.gather(padded, corner[:, :1] + side, axis=1, batch_dims=1)  # rows
    images = tf.gather(images, corner[:, 1:] + side, axis=2, batch_dims=1)  # columns
    if "flip" in kind:
        mirror = tf.random.stateless_uniform([n], flip) < 0.5
        images = tf.where(mirror[:, None, None, None], tf.reverse(images, [2]), images)
    if "erase" in kind:
        centre = tf.random.stateless_uniform([n, 2], where, 0, 28, dtype=tf.int32)
        rows = side - centre[:, :1] + ERASE_PIXELS // 2  # [B, 28]; 0..ERASE_PIXELS-1: inside
        cols = side - centre[:, 1:] + ERASE_PIXELS // 2
        rows, cols = (rows >= 0) & (rows < ERASE_PIXELS), (cols >= 0) & (cols < ERASE_PIXELS)
        on = tf.random.stateless_uniform([n], coin) < 0.5
        erase = rows[:, :, None] & cols[:, None, :] & on[:, None, None]
        images = tf.where(erase[..., None], tf.zeros_like(images), images)
    return images, labels


def _one_hot(x, y):
    """``(uint8 images, int64 labels)`` -> ``(float32 0..255, float32 one-hot [.., 10])``: the
    loss applies ``--label-smoothing`` to one-hot labels."""
    import tensorflow as tf

    return tf.cast(x, tf.float32), tf.one_hot(y, 10)


def train_input(images, labels, args: argparse.Namespace, global_batch: int, steps: int):
    """The training input: a :class:`tf_keras.utils.experimental.DatasetCreator` of
    ``(float32 [B,28,28,1] 0..255, float32 one-hot [B,10])`` per-replica batches.

    Every worker builds its own pipeline (``distribute_datasets_from_function``), as in
    TensorFlow's "Distributed input" guide: it keeps its shard of the examples, and each epoch
    (``steps`` batches) takes a fresh permutation of it (no example twice), batches its
    per-replica share only and augments each batch (``--augment``, with a random stream seeded
    by ``--seed`` and the worker).
    """
    import tensorflow as tf
    import tf_keras as keras

    def dataset_fn(ctx: tf.distribute.InputContext):
        batch = ctx.get_per_replica_batch_size(global_batch)
        seed = args.seed * 2**16 + ctx.input_pipeline_id  # one stream per worker
        ds = tf.data.Dataset.from_tensor_slices((images, labels))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
        ds = ds.take(steps * batch).repeat()  # one permutation per epoch
        ds = ds.batch(batch, drop_remainder=True)
        if args.augment != "none":  # one seed per batch, one draw per image
            kind, seeds = args.augment, tf.data.Dataset.random(seed=seed).batch(2)
            ds = tf.data.Dataset.zip((ds, seeds)).map(lambda xy, s: augment(*xy, kind, s))
        return ds.map(_one_hot).with_options(_input_options()).prefetch(tf.data.AUTOTUNE)

    return keras.utils.experimental.DatasetCreator(dataset_fn)


def no_autotune_on_device_iterators() -> None:
    """Turn off tf.data's autotuning loop in the per-device iterators of
    ``MultiDeviceIterator``, the iterator ``MultiWorkerMirroredStrategy`` always puts over each
    worker's input (its ``PER_REPLICA`` mode, which would not, is refused).

    Those iterators wrap each device's share in a new dataset with default options, so the
    input's own ``autotune.enabled = False`` does not reach them; each starts the autotuning
    thread, and deleting the iterator at the end of ``fit()`` waited for that thread's next
    wake-up (a period doubling up to 60 s): up to a minute per training, on one worker or both
    (docs/training.md, ``bench/fit_teardown.py``). The per-device dataset is a generator plus a
    one-element prefetch, nothing to tune. TensorFlow 2.21's
    ``multi_device_iterator_ops._create_device_dataset`` is wrapped (pinned in pyproject.toml;
    a test fails if the function is gone). Idempotent.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    create = mdi._create_device_dataset
    if getattr(create, "__wrapped_once__", False):
        return

    @functools.wraps(create)
    def create_without_autotune(*args, **kwargs):
        return create(*args, **kwargs).with_options(_input_options())

    create_without_autotune.__wrapped_once__ = True
    mdi._create_device_dataset = create_without_autotune


def _input_options():
    """``tf.data`` options of both inputs: no autotuning loop (the pipelines have no parallel
    map to tune; ``prefetch(AUTOTUNE)`` still sizes its buffer by itself), so no background
    thread outlives an epoch; element order may vary (the input is shuffled anyway)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = False
    options.autotune.enabled = False
    return options


def validation_input(images, labels, global_batch: int):
    """The validation input: ``(float32 [B,28,28,1] 0..255, float32 one-hot [B,10])`` global
    batches, ``AutoShardPolicy.DATA`` (each replica evaluates its slice of each batch), with
    the training input's :func:`_input_options`."""
    import tensorflow as tf

    options = _input_options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch)
    return ds.map(_one_hot).with_options(options).prefetch(tf.data.AUTOTUNE)


def make_schedule(args: argparse.Namespace, steps_per_epoch: int):
    """The learning-rate schedule (per optimizer step)."""
    import tf_keras as keras

    total = max(1, args.epochs * steps_per_epoch)
    if args.lr_schedule == "constant":
        return args.learning_rate
    if args.lr_schedule == "exponential":
        return keras.optimizers.schedules.ExponentialDecay(
            args.learning_rate, decay_steps=steps_per_epoch, decay_rate=0.8
        )
    warmup = min(total - 1, int(args.warmup_epochs * steps_per_epoch))
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=args.learning_rate * 0.1 if warmup else args.learning_rate,
        decay_steps=total - warmup,
        alpha=0.01,
        warmup_target=args.learning_rate if warmup else None,
        warmup_steps=warmup,
    )


class ThroughputLogger:
    """Keras callback factory: per-epoch wall time, training images/s and learning rate."""

    @staticmethod
    def make(global_batch: int, steps_per_epoch: int):
        """A callback adding ``epoch_seconds`` (incl. validation), ``images_per_second``
        (training steps only, all replicas together) and ``lr`` to each epoch's logs."""
        import tf_keras as keras

        class _Cb(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):  # fit() minus the epochs: set-up, tear-down
                log.info("training starts")

            def on_train_end(self, logs=None):
                self.ended_at = time.perf_counter()  # fit() returns after its input's teardown
                log.info("training ends")

            def on_epoch_begin(self, epoch, logs=None):
                self._t0 = time.perf_counter()
                self._t_train_end = None

            def on_test_begin(self, logs=None):  # validation starts: training steps are done
                if self._t_train_end is None:
                    self._t_train_end = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                now = time.perf_counter()
                train_dt = (self._t_train_end or now) - self._t0
                if logs is not None:
                    logs["epoch_seconds"] = now - self._t0
                    logs["images_per_second"] = global_batch * steps_per_epoch / train_dt
                    lr = self.model.optimizer.learning_rate
                    if callable(lr):  # a LearningRateSchedule
                        lr = lr(self.model.optimizer.iterations)
                    logs["lr"] = float(keras.backend.get_value(lr))

        return _Cb()


def float32_copy(model, build, args: argparse.Namespace, strategy):
    """``model`` itself when it computes in float32, else the same architecture rebuilt under
    the float32 policy with this replica's copy of the (float32) weights, read without a
    collective (batch-norm statistics are each replica's own): the export serves float32
    arithmetic whatever the training precision, so any TensorFlow Serving build runs it."""
    import tf_keras as keras

    if model.compute_dtype == "float32":
        return model
    keras.mixed_precision.set_global_policy("float32")
    copy = build(args.model_type)
    copy.set_weights([strategy.experimental_local_results(w)[0].numpy() for w in model.weights])
    return computes_in_float32(copy)


def computes_in_float32(model):
    """``model``, once every layer is checked to compute in float32 (what the export must).

    Raises:
        ConfigError: a layer computes in another dtype (a model builder that sets a layer's
            dtype itself).
    """
    pinned = [layer.name for layer in model.layers if layer.compute_dtype != "float32"]
    if pinned:
        raise ConfigError(f"layers {pinned} do not compute in float32: the export must")
    return model


def export_candidate(
    model,
    saved_model_dir: Path,
    task: TaskInfo,
    export_parent: Path,
    mirror_average: bool,
    history: dict | None = None,
) -> Path:
    """Every replica exports; the chief stages next to ``saved_model_dir`` and renames into place.
    ``mirror_average``: see :func:`training.export.probabilities`. ``history``: the chief
    writes it as :data:`HISTORY_FILE` into the staging directory, so the candidate appears with
    its history or not at all.

    A crash before the rename leaves only a ``.staging-*`` directory, never a partial
    ``saved_model_dir``; the next chief removes such leftovers of killed runs first (see
    :mod:`training.leftovers`).
    """
    from training.export import export_saved_model

    export_parent.mkdir(parents=True, exist_ok=True)
    prefix = f".staging-{saved_model_dir.name}-"
    if not is_chief(task):  # into this replica's private scratch directory
        staging = export_parent / f"{prefix}{uuid.uuid4().hex[:8]}"
        export_saved_model(model, staging, mirror_average=mirror_average)
        return staging

    def write(staging: Path) -> None:
        export_saved_model(model, staging, mirror_average=mirror_average)
        if history is not None:
            write_history(staging / HISTORY_FILE, history)

    return publish_dir(saved_model_dir, write)


def publish_dir(target: Path, write) -> Path:
    """Publish a candidate directory atomically: ``write(staging)`` fills a fresh
    ``.staging-<name>-*`` directory beside ``target``, which is then renamed to ``target`` (a
    previous ``target`` is moved aside first and deleted after). A crash before the rename
    leaves only the staging directory, never a partial ``target``; the next publish removes
    staging directories of killed runs (:mod:`training.leftovers`). Both trainers export
    through it.

    Returns:
        ``target``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".staging-{target.name}-"
    remove_stale_dirs(target.parent, f"{prefix}*")
    staging = make_owned_dir(target.parent, prefix, private=False)
    old = None
    try:
        write(staging)
        release_dir(staging)  # its lock file must not end up in the candidate
        if target.exists():
            old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
            target.rename(old)
        staging.rename(target)
    except BaseException:  # a failed write: no lock file left to prove it stale later
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        release_dir(staging)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


# The flags that decide what a run trains: a finished run is exported again only when a replica
# is started with the same ones (and as many replicas), else trained again
TRAINING_FLAGS = (
    "model_type",
    "epochs",
    "batch_size_per_replica",
    "learning_rate",
    "warmup_epochs",
    "lr_schedule",
    "train_examples",
    "steps_per_epoch",
    "seed",
    "augment",
    "label_smoothing",
    "precision",
)


def training_flags(args: argparse.Namespace, task: TaskInfo) -> dict:
    """What this run trains: :data:`TRAINING_FLAGS`' values and the number of replicas
    (recorded in :data:`TRAINED_FILE`, compared by :func:`finished_run`)."""
    return {**{k: getattr(args, k) for k in TRAINING_FLAGS}, "replicas": task.num_workers}


def finished_run(args: argparse.Namespace, task: TaskInfo) -> tuple[dict, Path] | None:
    """``(history, weights)`` of this run id when its training finished with these flags.

    The chief writes :data:`TRAINED_FILE` into :func:`checkpoint_dir` when training ends (a
    ``LambdaCallback`` that runs before ``BackupAndRestore`` deletes its backup, then with the
    final timings once ``fit()`` returns): ``{"flags": training_flags(...), "history": the
    training_history.json dict}``; ``ModelCheckpoint`` has written the last epoch's weights
    (``epoch-<--epochs>/weights``, a TF checkpoint) before. A chief that trains removes the
    file first (:func:`train`).

    Returns:
        ``None`` for a new or interrupted run, or one finished with other flags (it is trained
        again).
    """
    ckpt = checkpoint_dir(args)
    weights = ckpt / f"epoch-{args.epochs:03d}" / "weights"
    try:
        record = json.loads((ckpt / TRAINED_FILE).read_text())
    except (OSError, ValueError):  # none (written by rename: never half-written)
        return None
    if not isinstance(record, dict) or record.get("flags") != training_flags(args, task):
        return None
    if not isinstance(record.get("history"), dict):
        return None
    if not weights.with_suffix(".index").is_file():
        return None
    return record["history"], weights


def export_finished(
    args: argparse.Namespace, task: TaskInfo, done: tuple[dict, Path], model_builder=None
) -> dict:
    """Finish a run whose training is done (:func:`finished_run`) without the strategy.

    The chief lost while exporting (killed, OOM, its pod deleted) comes back in the step's
    next attempt (a new job: docs/training.md "Losing a pod"), or alone under a job's
    ``restartPolicy: ExitCode``; the other workers take no part in its float32 export (after a
    bfloat16 run they have exited 0): a strategy would wait for peers that never come. So
    the chief builds the model in float32, loads the last epoch's weights (every variable of
    the model must match: the optimizer's slots are left out) and exports them with the
    recorded history; any other worker has nothing left to do. As :mod:`training.torch_train`
    does with its last checkpoint. The checkpoint holds the replicas' mean of each batch-norm
    moving statistic, where the float32 copy of a bfloat16 run exports the chief's own (the
    replicas' statistics differ by their data shards only).

    Returns:
        The finished run's history dict.

    Raises:
        ConfigError: a layer of the rebuilt model does not compute in float32.
    """
    history, weights = done
    if not is_chief(task):
        log.info(
            "%s:%d: this run's training is finished; the chief exports",
            task.task_type,
            task.task_index,
        )
        return history
    import tf_keras as keras

    from training.models import build_model

    keras.mixed_precision.set_global_policy("float32")
    model = computes_in_float32((model_builder or build_model)(args.model_type))
    try:
        model.load_weights(str(weights)).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:  # tf.train.Checkpoint's errors for other shapes
        raise unusable_checkpoint(
            f"checkpoint {weights} holds another network's weights (an older version's?)", e
        ) from e
    log.info("training finished already; the chief exports %s alone", weights)
    dirs = run_dirs(args, task)
    saved = export_candidate(
        model,
        Path(args.saved_model_dir),
        task,
        dirs["export_parent"],
        history["mirror_average"],
        history,
    )
    log.info("chief exported %s", saved)
    return history


def unusable_checkpoint(problem: str, exc: BaseException) -> ConfigError:
    """The one-line error for a checkpoint or backup that this run cannot use (TensorFlow's and
    torch's own errors run to many lines): ``problem``, which names the file, the way out, and
    the first line of ``exc``. Used by the TF export of a finished run, the backup restore
    (:func:`backup_and_restore`) and :func:`training.torch_train.load_model_state`."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return ConfigError(
        f"{problem}; train under a new --run-id, or delete it: {type(exc).__name__}: {first}"
    )


def backup_and_restore(backup_dir: Path):
    """Keras' ``BackupAndRestore`` callback for ``backup_dir``, which refuses in one line a
    backup it cannot restore, or restores only in part.

    A backup is left by a run that was interrupted (it is deleted when training ends). The
    restore at the start of ``fit()`` (tf_keras' ``WorkerTrainingState``, on every replica: all
    read the chief's backup) raises when the backup is damaged (a truncated or altered file,
    an unreadable checkpoint state) or holds a variable of another shape (another network or
    optimizer: an older version's, under a reused ``--run-id``), and says nothing when a
    variable of this run is missing from it (a network with a layer more); after a restore
    this callback checks that every variable of the run was restored
    (``assert_existing_objects_matched``; variables the backup has beyond them, such as another
    Adam variant's, are ignored). Retrying cannot help, so these are configuration errors (exit
    1, no re-creation), and a non-chief replica removes its temporary write directory
    (``backup/workertemp_<task>``) first. Other errors, and any raised outside the restore,
    propagate unchanged (a lost peer stays retryable, :data:`PEER_LOST_ERRORS`).

    Raises (from ``fit()``):
        ConfigError: the backup cannot be restored, naming ``backup_dir``.
    """
    import traceback

    import tensorflow as tf
    import tf_keras as keras
    from tensorflow.python.checkpoint import checkpoint_management

    # tf_keras' own modules behind BackupAndRestore (tf-keras is pinned in pyproject.toml)
    from tf_keras.src.distribute import distributed_file_utils, worker_training_state

    reading = (  # the code that reads a backup
        worker_training_state.WorkerTrainingState.restore.__code__,
        checkpoint_management.get_checkpoint_state.__code__,
    )
    # what reading a backup that does not fit raises: another shape, a truncated shard or index,
    # a checksum, a missing file, an unreadable checkpoint state (not: a full disk, a lost peer)
    unusable = (
        ValueError,
        IndexError,
        tf.errors.DataLossError,
        tf.errors.NotFoundError,
        tf.errors.InvalidArgumentError,
    )

    def unreadable(e: BaseException) -> bool:
        """``e`` says the backup cannot be read into this run (OpError itself: "not an
        sstable"), and was raised while reading it."""
        if not (isinstance(e, unusable) or type(e) is tf.errors.OpError):
            return False
        return any(f.f_code in reading for f, _ in traceback.walk_tb(e.__traceback__))

    class RefusingBackupAndRestore(keras.callbacks.BackupAndRestore):
        def refuse(self, e: BaseException) -> None:
            distributed_file_utils.remove_temp_dirpath(
                str(backup_dir), self.model.distribute_strategy
            )
            raise unusable_checkpoint(
                f"backup {backup_dir} cannot be restored (another network's or optimizer's "
                "training state, an older version's?, or a damaged file)",
                e,
            ) from e

        def on_train_begin(self, logs=None):
            try:
                super().on_train_begin(logs)
            except Exception as e:
                if not unreadable(e):
                    raise
                self.refuse(e)
            manager = self._training_state.read_checkpoint_manager
            if manager.latest_checkpoint:  # restored: was every variable of this run in it?
                status = manager.checkpoint.restore(manager.latest_checkpoint)
                try:
                    status.assert_existing_objects_matched()
                except AssertionError as e:
                    self.refuse(e)
                # the last epoch the backup finished (0-based; fit() resumes after it), in the
                # PyTorch trainer's words (training.torch_train: "resumes from")
                done = int(keras.backend.eval(self._training_state._ckpt_saved_epoch)) + 1
                log.info(
                    "resumes from %s (%d of %d epochs done)",
                    manager.latest_checkpoint, done, self.params.get("epochs", 0),
                )  # fmt: skip

    return RefusingBackupAndRestore(backup_dir=str(backup_dir))


def write_history(path: Path, history: dict) -> None:
    """Write the history JSON via a temporary file and rename (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(history, indent=2))
    os.replace(tmp, path)


def main(args: argparse.Namespace, model_builder=None) -> int:
    """Run this replica's part of the job; returns the exit code. ``model_builder``:
    ``(model_type, seed) -> model``, default :func:`training.models.build_model`.

    Returns:
        0 when done (an ``evaluator`` task has nothing to do: selection evaluates the
        candidates), :data:`PEER_LOST_EXIT_CODE` when a peer was lost or never joined within
        ``--collective-timeout`` seconds (retryable).

    Raises:
        training.tf_config.TFConfigError: malformed ``TF_CONFIG``.
        ConfigError: a ``ps`` task (this trainer uses MultiWorkerMirroredStrategy).
        training.data.DatasetError: the dataset is not prepared in ``--data-dir`` or broken.
    """
    task = parse_tf_config()
    if task.task_type == "evaluator":
        log.info("evaluator task: nothing to do (selection evaluates the candidates)")
        return 0
    if task.task_type == "ps":
        raise ConfigError(
            "TF_CONFIG task type 'ps': this trainer uses MultiWorkerMirroredStrategy, which has "
            "no parameter servers (use Chief/Worker replicas)"
        )
    import tensorflow as tf

    try:
        train(args, task, model_builder)
    except RendezvousTimeout as exc:
        log.error("%s; exiting %d (retryable)", exc, PEER_LOST_EXIT_CODE)
        return PEER_LOST_EXIT_CODE
    except Exception as exc:
        if not any(isinstance(exc, getattr(tf.errors, n)) for n in PEER_LOST_ERRORS):
            raise
        log.error(
            "lost a peer (%s: %s); exiting %d (retryable)",
            type(exc).__name__,
            exc,
            PEER_LOST_EXIT_CODE,
        )
        return PEER_LOST_EXIT_CODE
    return 0


def train(args: argparse.Namespace, task: TaskInfo, model_builder=None) -> dict:
    """Train, export, and return the history dict (also written as ``training_history.json``).

    Raises:
        training.data.DatasetError: the dataset is not prepared in ``--data-dir`` or broken.
    """
    import tensorflow as tf

    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, args.intra_op_threads))
    if args.profile_batches[0] and not args.tensorboard_dir:
        raise ConfigError(
            "--profile-batches needs --tensorboard-dir (the profile is written there)"
        )
    done = finished_run(args, task)
    if done is not None:  # a replica re-created after training ended: no peers to wait for
        return export_finished(args, task, done, model_builder)
    no_autotune_on_device_iterators()
    strategy = make_strategy(task, args)
    precision, why = resolve_precision(args.precision)
    log.info("precision %s (%s)", precision, why)
    replicas = strategy.num_replicas_in_sync
    chief = is_chief(task)
    log.info("task %s:%d chief=%s replicas=%d", task.task_type, task.task_index, chief, replicas)

    import tf_keras as keras

    from training.data import load_numpy
    from training.models import build_model

    x_train, y_train = load_numpy("train", args.data_dir, args.train_examples or None)
    global_batch = args.batch_size_per_replica * replicas
    if len(x_train) < global_batch:  # else a worker's shard could be empty: a hang
        raise ConfigError(
            f"{len(x_train)} training examples are fewer than one global batch "
            f"({args.batch_size_per_replica} per replica x {replicas} replicas)"
        )
    steps = args.steps_per_epoch or len(x_train) // global_batch
    train_ds = train_input(x_train, y_train, args, global_batch, steps)
    val_ds = None
    if args.validation_examples:
        x_val, y_val = load_numpy("test", args.data_dir, args.validation_examples)
        val_ds = validation_input(x_val, y_val, global_batch)

    dirs = run_dirs(args, task)
    ckpt = checkpoint_dir(args)
    build = model_builder or build_model
    mirror_average = "flip" in args.augment  # mirrored at random while training: serve both
    keras.mixed_precision.set_global_policy(precision)
    with strategy.scope():
        model = build(args.model_type, seed=args.seed)
        model.compile(
            optimizer=keras.optimizers.Adam(make_schedule(args, steps)),
            loss=keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=args.label_smoothing
            ),
            metrics=["accuracy"],
        )
    throughput = ThroughputLogger.make(global_batch, steps)

    def record(history: dict, train_seconds: float, teardown: float | None = None) -> dict:
        """The run's training_history.json dict (``history``: Keras' ``History.history``)."""
        return {
            "model_type": args.model_type,
            "run_id": args.run_id,
            "replicas": replicas,
            "global_batch_size": global_batch,
            "steps_per_epoch": steps,
            "epochs": args.epochs,
            "precision": precision,
            "mirror_average": mirror_average,
            "train_examples": int(len(x_train)),
            "train_seconds": train_seconds,
            "fit_teardown_seconds": teardown,
            "history": {k: [float(v) for v in vals] for k, vals in history.items()},
        }

    flags = training_flags(args, task)

    def mark_trained(history: dict) -> None:
        """The chief's TRAINED_FILE: from here a re-created chief exports (export_finished)."""
        write_history(ckpt / TRAINED_FILE, {"flags": flags, "history": history})

    marker = []
    if chief:  # training (again): a marker of an earlier run with these flags is void now
        (ckpt / TRAINED_FILE).unlink(missing_ok=True)
        # when training ends, before BackupAndRestore (next in the list: on_train_end runs in
        # list order) deletes its backup: no moment lacks both
        marker.append(
            keras.callbacks.LambdaCallback(
                on_train_end=lambda logs: mark_trained(
                    record(model.history.history, time.perf_counter() - t0)
                )
            )
        )
    callbacks = [
        *marker,
        # Fault tolerance: a restarted replica resumes from the last finished epoch (the
        # backup is deleted when training ends).
        backup_and_restore(ckpt / "backup"),
        keras.callbacks.ModelCheckpoint(
            filepath=str(ckpt / "epoch-{epoch:03d}" / "weights"),
            save_weights_only=True,
        ),
        throughput,
    ]
    if dirs["tensorboard"] is not None:
        profile = args.profile_batches if chief and args.profile_batches[0] else 0
        callbacks.append(
            keras.callbacks.TensorBoard(log_dir=str(dirs["tensorboard"]), profile_batch=profile)
        )

    try:
        t0 = time.perf_counter()
        hist = model.fit(
            train_ds,
            epochs=args.epochs,
            steps_per_epoch=steps,
            validation_data=val_ds,
            callbacks=callbacks,
            verbose=2,
        )
        returned = time.perf_counter()
        train_seconds = returned - t0
        # fit() deletes its input iterators after the last callback (on_train_end); a slow
        # teardown there once cost up to 60 s per run (docs/training.md, bench/fit_teardown.py)
        teardown = returned - throughput.ended_at
        log.info("fit() returned %.2f s after training ended", teardown)
        history = record(hist.history, train_seconds, teardown)
        if chief:  # the marker again, with the final timings
            mark_trained(history)
        exported, saved = float32_copy(model, build, args, strategy), None
        # saving a distributed model takes every replica (collectives); a local float32 copy
        # only the chief, so the others skip a throwaway export
        if chief or exported is model:
            saved = export_candidate(
                exported,
                Path(args.saved_model_dir),
                task,
                dirs["export_parent"],
                mirror_average,
                history if chief else None,
            )
    finally:
        if dirs["scratch"] is not None:  # non-chief: nothing of this replica may survive
            release_dir(dirs["scratch"])
            shutil.rmtree(dirs["scratch"], ignore_errors=True)
            log.info("worker %d removed its temporary directory", task.task_index)
    if chief:
        log.info("chief exported %s", saved)
    return history


# Exit code when a peer is lost (a collective op fails with one of these errors): >= 128, so a
# TFJob under the operator's restartPolicy ExitCode re-creates the pod instead of failing the
# job, which it does for codes 1-127 (a bug, a bad argument). The pipeline's own jobs use
# restartPolicy Never and recover by retrying the step (docs/training.md "Losing a pod").
PEER_LOST_EXIT_CODE = 138
PEER_LOST_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError")


def cli(argv: list[str] | None = None, model_builder=None) -> int:
    """Console entry point (``fmnist-train``): 0 on success, 1 with one line on a configuration
    error (``TF_CONFIG``, dataset), ``PEER_LOST_EXIT_CODE`` when a peer was lost (retryable);
    anything else is a bug and keeps its traceback (exit 1, permanent). ``model_builder``: see
    :func:`main` (the benchmark's reference run passes its own)."""
    run = functools.partial(main, model_builder=model_builder)
    return training.run_cli(run, build_parser(), (TFConfigError, DatasetError), argv)


if __name__ == "__main__":
    sys.exit(cli())
