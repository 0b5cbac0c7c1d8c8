"""Train the ``batch_norm`` network with PyTorch DDP: what one PyTorchJob replica runs.

What every replica of a Kubeflow ``PyTorchJob`` (training operator v1.9.4) runs. The operator
sets four variables on each pod of a job that has a ``Master`` replica:

* ``MASTER_ADDR``, ``MASTER_PORT``: the Master pod's service, where rank 0 hosts the
  rendezvous store (``init_method="env://"``);
* ``WORLD_SIZE``: every replica, the Master included (1 Master + N Workers: N + 1);
* ``RANK``: 0 on the Master, 1..N on the Workers.

A Worker-only job gets none of them, so all four are required: a missing or invalid one fails
at once with one line (exit 1), before anything is imported or connected.

Each replica joins the process group (``gloo`` on CPU, ``nccl`` when CUDA is available), trains
its ``DistributedSampler`` shard of the examples (a new permutation every epoch, the same
number of full batches on every rank), averages gradients with DDP, and augments each batch
as :func:`training.train.augment` does (:func:`augment`). Rank 0 alone writes:

* a checkpoint after every epoch, ``<checkpoint-dir>/pytorch/<run-id>/epoch-NNN.pt`` (model,
  optimizer, scheduler, epoch, history; written to a temporary file and renamed). On start
  every rank loads the newest one and continues with the next epoch, so the job of the step's
  next attempt (docs/training.md "Losing a pod") resumes the run;
* TensorBoard scalars under ``<tensorboard-dir>/pytorch/<run-id>/``;
* the candidate at ``--saved-model-dir`` (:func:`training.torch_export.export_pytorch_candidate`:
  the SavedModel selection scores and KServe serves, plus TorchScript) and its
  ``training_history.json``, with the TF trainer's keys.

Exit codes as :mod:`training.train`: 0, 1 (configuration, dataset), and
:data:`training.train.PEER_LOST_EXIT_CODE` when a peer was lost (a collective failed; >= 128:
a job under the operator's ExitCode policy re-creates the pod, the pipeline's jobs under
``restartPolicy: Never`` fail and the step's next attempt resumes). Each rank logs a SHA-256
of its parameters after its first step and at the end (identical on every rank: what DDP
guarantees; the tests compare them).

Example (what the PyTorchJob containers run)::

    python -m training.torch_train --data-dir /mnt/shared/tfds --epochs 15 \\
        --batch-size-per-replica 128 --learning-rate 0.003 --lr-schedule cosine \\
        --checkpoint-dir /mnt/shared/checkpoints --tensorboard-dir /mnt/shared/tensorboard \\
        --saved-model-dir /mnt/shared/candidates/pytorch --run-id pipeline-abc12
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import IMAGE_SIZE
from fmnist_common.cli import ConfigError, number
from training.data import DatasetError
from training.precision import resolve_precision
from training.pytorchjob import DistEnv, DistEnvError, parse_dist_env
from training.train import (
    ERASE_PIXELS,
    PEER_LOST_EXIT_CODE,
    SHIFT_PIXELS,
    RendezvousTimeout,
    add_shared_arguments,
    checkpoint_dir,
    rendezvous_message,
    unusable_checkpoint,
)

log = logging.getLogger("training.torch_train")
MODEL_TYPE = "pytorch"
LR_SCHEDULES = ("constant", "cosine")
CHECKPOINT_NAME = re.compile(r"epoch-(\d{3,})\.pt")
VALIDATION_BATCH = 1000
# RuntimeError messages of a failed collective or rendezvous (gloo, NCCL, c10d)
PEER_LOST_MARKERS = (
    "gloo",
    "nccl",
    "c10d",
    "connection closed",
    "connection reset",
    "broken pipe",
    "timed out",
    "processgroup",
)


def build_parser() -> argparse.ArgumentParser:
    """The PyTorch trainer's CLI: :mod:`training.train`'s flag names where they apply."""
    p = argparse.ArgumentParser(
        prog="python -m training.torch_train",
        description="Train the Fashion-MNIST batch_norm network with PyTorch DDP "
        "(one PyTorchJob replica).",
    )
    p.add_argument("--model-type", choices=(MODEL_TYPE,), default=MODEL_TYPE)
    add_shared_arguments(p)  # the TF trainer's flags, same meaning
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="cosine")
    p.add_argument(
        "--saved-model-dir",
        required=True,
        help="where rank 0 publishes the candidate (SavedModel + torchscript/model.pt)",
    )
    p.add_argument(
        "--checkpoint-dir",
        required=True,
        help="checkpoint root (shared by all replicas); this run writes <dir>/pytorch/<run-id>",
    )
    p.add_argument(
        "--tensorboard-dir",
        default=None,
        help="TensorBoard root; rank 0 writes <dir>/pytorch/<run-id>",
    )
    p.add_argument(
        "--intra-op-threads",
        type=number(int, 0),
        default=0,
        help="torch intra-op threads; 0 = torch's default ($OMP_NUM_THREADS, else the cores)",
    )
    return p


def augment(images, kind: str, generator):
    """Training-time augmentation of a batch ``uint8 [B, 1, 28, 28]`` (NCHW), with the
    semantics of :func:`training.train.augment` (``kind``: one of
    :data:`training.train.AUGMENTATIONS` but ``none``) and an independent draw for every image
    from ``generator`` (a CPU ``torch.Generator``, seeded per rank and epoch by the trainer):

    * ``shift``: a random shift of up to :data:`SHIFT_PIXELS` in each direction (zero padding,
      then a random 28x28 crop);
    * ``flip``: a random left-right mirror;
    * ``erase``: half of the time, a random :data:`ERASE_PIXELS` square set to 0, clipped at
      the border.

    Vectorised over the batch (gathers and masks).

    Returns:
        ``uint8 [B, 1, 28, 28]``.
    """
    import torch
    import torch.nn.functional as F

    n, pad = images.shape[0], SHIFT_PIXELS
    side = torch.arange(IMAGE_SIZE)
    padded = F.pad(images, (pad, pad, pad, pad))
    corner = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator)
    rows, cols = corner[:, :1] + side, corner[:, 1:] + side  # [B, 28] each
    batch = torch.arange(n)[:, None, None]
    images = padded[batch, 0, rows[:, :, None], cols[:, None, :]].unsqueeze(1)
    if "flip" in kind:
        mirror = torch.rand(n, generator=generator) < 0.5
        images = torch.where(mirror[:, None, None, None], images.flip(3), images)
    if "erase" in kind:
        centre = torch.randint(0, IMAGE_SIZE, (n, 2), generator=generator)
        r = side - centre[:, :1] + ERASE_PIXELS // 2  # 0..ERASE_PIXELS-1: inside the square
        c = side - centre[:, 1:] + ERASE_PIXELS // 2
        r, c = (r >= 0) & (r < ERASE_PIXELS), (c >= 0) & (c < ERASE_PIXELS)
        on = torch.rand(n, generator=generator) < 0.5
        erase = r[:, :, None] & c[:, None, :] & on[:, None, None]
        images = images.masked_fill(erase[:, None], 0)
    return images


def load_model_state(model, state: dict, path: Path) -> None:
    """Put checkpoint ``path``'s weights (``state["model"]``, a ``state_dict``) into ``model``.

    Raises:
        ConfigError: the checkpoint holds another network's weights (other layers or shapes,
            e.g. written before the stem was added under a reused ``--run-id``); torch's own
            ``RuntimeError`` lists every key, this names the file and the way out.
    """
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise unusable_checkpoint(
            f"checkpoint {path} holds another network's weights (an older version's?)", e
        ) from e


def learning_rate(step: int, args: argparse.Namespace, steps_per_epoch: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based), as
    :func:`training.train.make_schedule` (``constant``, or ``cosine``: linear warm-up from a
    tenth of the peak over ``--warmup-epochs``, then cosine decay to 1 % of it)."""
    peak = args.learning_rate
    if args.lr_schedule == "constant":
        return peak
    total = max(1, args.epochs * steps_per_epoch)
    warmup = min(total - 1, int(args.warmup_epochs * steps_per_epoch))
    if warmup and step < warmup:
        start = peak * 0.1
        return start + (peak - start) * step / warmup
    decay = total - warmup
    fraction = min(step - warmup, decay) / decay
    return peak * (0.99 * 0.5 * (1.0 + math.cos(math.pi * fraction)) + 0.01)


def newest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    """``(epoch, path)`` of the newest ``epoch-NNN.pt`` in ``directory``, or ``None``."""
    if not directory.is_dir():
        return None
    found = [
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := CHECKPOINT_NAME.fullmatch(p.name)) and p.is_file()
    ]
    return max(found) if found else None


def save_checkpoint(directory: Path, epoch: int, state: dict) -> Path:
    """Write ``state`` as ``directory/epoch-NNN.pt`` via a temporary file and a rename (a
    killed writer leaves only the temporary file, overwritten by the next try)."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"epoch-{epoch:03d}.pt"
    tmp = directory / f".{path.name}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def param_checksum(module) -> str:
    """SHA-256 of every parameter's float32 bytes, in order (equal on every rank after each
    DDP step)."""
    digest = hashlib.sha256()
    for p in module.parameters():
        digest.update(p.detach().to("cpu", copy=True).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _epoch_seed(seed: int, rank: int, epoch: int) -> int:
    """The augmentation stream of ``rank`` in ``epoch`` (reproducible after a resume)."""
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1, np.uint64)[0])


def _nchw(images: np.ndarray):
    """``uint8 [N, 28, 28, 1]`` (NHWC numpy) -> ``uint8 [N, 1, 28, 28]`` (NCHW torch)."""
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def is_peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) means another replica is gone: a ``torch.distributed``
    error (``DistBackendError``, ``DistNetworkError``, ``DistStoreError``), or a
    ``RuntimeError`` of gloo / NCCL / c10d (a failed collective or rendezvous)."""
    import torch.distributed as dist

    while exc is not None:
        if isinstance(exc, dist.DistError):
            return True
        if isinstance(exc, RuntimeError) and any(
            marker in str(exc).lower() for marker in PEER_LOST_MARKERS
        ):
            return True
        exc = exc.__cause__
    return False


def main(args: argparse.Namespace) -> int:
    """Run this replica's part of the job; returns the exit code.

    Returns:
        0 when done, :data:`training.train.PEER_LOST_EXIT_CODE` when a peer was lost.

    Raises:
        DistEnvError: ``MASTER_ADDR`` / ``MASTER_PORT`` / ``WORLD_SIZE`` / ``RANK`` missing or
            invalid.
        ConfigError: fewer training examples than one global batch.
        training.data.DatasetError: the dataset is not prepared in ``--data-dir`` or broken.
    """
    env = parse_dist_env()
    # before TensorFlow (tfds, the export) loads: see training.torch_model._avoid_llvm_clash
    import torch.distributed as dist

    import training.torch_model  # noqa: F401

    try:
        train(args, env)
    except RendezvousTimeout as exc:
        log.error("rank %d: %s; exiting %d (retryable)", env.rank, exc, PEER_LOST_EXIT_CODE)
        return PEER_LOST_EXIT_CODE
    except Exception as exc:
        if not is_peer_lost(exc):
            raise
        log.error(
            "rank %d lost a peer (%s: %s); exiting %d (retryable)",
            env.rank,
            type(exc).__name__,
            " ".join(str(exc).split())[:300],
            PEER_LOST_EXIT_CODE,
        )
        return PEER_LOST_EXIT_CODE
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as exc:  # a broken group: the exit code already says so
                log.warning("destroy_process_group failed: %s", exc)
    return 0


def train(args: argparse.Namespace, env: DistEnv) -> dict:
    """Train, checkpoint, export (rank 0), and return the history dict (rank 0 also writes it
    as ``training_history.json``): :mod:`training.train`'s keys, with ``model_type``
    ``pytorch``; after a resume its curves cover every epoch of the run (the checkpoint carries
    them) and ``train_seconds`` is the sum of their ``epoch_seconds`` (training and validation,
    not checkpoint writes).

    Raises:
        ConfigError: fewer training examples than one global batch.
        training.data.DatasetError: the dataset is not prepared in ``--data-dir`` or broken.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import BatchSampler, DistributedSampler

    from training.data import load_numpy
    from training.torch_model import build_torch_model

    if args.intra_op_threads:
        torch.set_num_threads(args.intra_op_threads)
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        caps = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    else:
        device, caps = torch.device("cpu"), []
    precision, why = resolve_precision(args.precision, gpu_capabilities=caps)
    bf16 = precision == "mixed_bfloat16"
    rank, world = env.rank, env.world_size
    lead = rank == 0
    log.info(
        "rank %d of %d, master %s:%d, device %s, precision %s (%s)",
        rank,
        world,
        env.master_addr,
        env.master_port,
        device,
        precision,
        why,
    )

    # the data first: a broken dataset fails before the rendezvous waits for peers
    x_np, y_np = load_numpy("train", args.data_dir, args.train_examples or None)
    global_batch = args.batch_size_per_replica * world
    if len(x_np) < global_batch:  # else a rank could get no full batch
        raise ConfigError(
            f"{len(x_np)} training examples are fewer than one global batch "
            f"({args.batch_size_per_replica} per replica x {world} replicas)"
        )
    x_train, y_train = _nchw(x_np), torch.from_numpy(y_np)
    x_val = y_val = None
    if args.validation_examples:
        xv, yv = load_numpy("test", args.data_dir, args.validation_examples)
        x_val, y_val = _nchw(xv[rank::world]), torch.from_numpy(yv[rank::world])

    ckpt_dir = checkpoint_dir(args)  # <checkpoint-dir>/pytorch/<run-id>
    done = newest_checkpoint(ckpt_dir)
    if done is not None and done[0] >= args.epochs:
        # Every epoch is checkpointed already (the Master was lost while exporting, after the
        # Workers had finished; or the step's next attempt starts after that): no rendezvous:
        # rank 0 exports from the checkpoint alone, any other rank has nothing left to do.
        if not lead:
            log.info("rank %d: all %d epochs are checkpointed; rank 0 exports", rank, args.epochs)
            return {}
        return _export_finished(args, done[1], precision, world, len(x_np))

    try:
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method="env://",
            world_size=world,
            rank=rank,
            timeout=timedelta(seconds=args.collective_timeout),
        )
    except Exception as exc:  # the store's or the backend's rendezvous timed out
        if not is_peer_lost(exc):
            raise
        raise RendezvousTimeout(
            rendezvous_message(
                f"the process group (WORLD_SIZE {world}, MASTER {env.master_addr}:"
                f"{env.master_port})",
                args.collective_timeout,
                " ".join(str(exc).split())[:200],
            )
        ) from exc
    log.info("rank %d joined the process group (%s)", rank, dist.get_backend())

    sampler = DistributedSampler(
        range(len(x_train)),
        num_replicas=world,
        rank=rank,
        shuffle=True,
        seed=args.seed,
        drop_last=True,
    )
    batches = BatchSampler(sampler, args.batch_size_per_replica, drop_last=True)
    steps = len(batches)  # the same on every rank

    # channels_last (NHWC) weights and activations: oneDNN's convolutions work in that layout,
    # so the NCHW default pays a reorder of every activation and gradient on each step
    # (aten::copy_, 19 % of a profiled CPU step); measured at 512 per replica: +8 % images/s
    # with 2 replicas, +18 % per process (docs/results.md). Only the layout changes: shapes,
    # state_dict keys, checkpoints and the export's graph are the same (values differ from an
    # NCHW run in the last bits: other kernels sum in another order).
    model = build_torch_model(args.seed).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, eps=1e-7)  # Keras'
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate(step, args, steps) / args.learning_rate
    )
    history: dict[str, list[float]] = {}
    start_epoch, train_seconds = 0, 0.0
    found = [newest_checkpoint(ckpt_dir) if lead else None]
    dist.broadcast_object_list(found, src=0)  # every rank resumes from rank 0's choice
    if found[0] is not None:
        start_epoch, path = found[0]
        state = torch.load(path, map_location=device, weights_only=True)
        load_model_state(model, state, path)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        history, train_seconds = state["history"], state["train_seconds"]
        if (state["global_batch_size"], state["steps_per_epoch"]) != (global_batch, steps):
            log.warning(
                "the checkpoint was written with global batch %d, %d steps per epoch; this "
                "run has %d, %d: the learning-rate schedule shifts",
                state["global_batch_size"],
                state["steps_per_epoch"],
                global_batch,
                steps,
            )
        log.info(
            "rank %d resumes from %s (%d of %d epochs done)", rank, path, start_epoch, args.epochs
        )
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing, reduction="sum")
    writer = None
    if lead and args.tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(Path(args.tensorboard_dir) / args.model_type / args.run_id))
    log.info(
        "rank %d: %d training examples, global batch %d, %d steps per epoch",
        rank,
        len(x_train),
        global_batch,
        steps,
    )

    t_start, first_step = time.perf_counter(), True
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        generator = torch.Generator().manual_seed(_epoch_seed(args.seed, rank, epoch))
        ddp.train()
        t0 = time.perf_counter()
        sums = torch.zeros(6, dtype=torch.float64, device=device)  # loss, correct, n; val: same
        for idx in batches:
            images, labels = x_train[idx], y_train[idx]
            if args.augment != "none":
                images = augment(images, args.augment, generator)
            images = images.to(
                device, torch.float32, non_blocking=True, memory_format=torch.channels_last
            )
            labels = labels.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = ddp(images)
            loss = criterion(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            (loss / len(labels)).backward()
            optimizer.step()
            scheduler.step()
            sums[0] += loss.detach()
            sums[1] += (logits.argmax(1) == labels).sum()
            sums[2] += len(labels)
            if first_step:
                first_step = False
                log.info(
                    "rank %d params sha256 after step %d: %s",
                    rank,
                    scheduler.last_epoch,
                    param_checksum(model),
                )
        if cuda:
            torch.cuda.synchronize(device)
        train_dt = time.perf_counter() - t0
        if x_val is not None:
            sums[3:] = _evaluate(model, x_val, y_val, criterion, device, bf16)
        dist.all_reduce(sums)  # global sums: every rank logs the same metrics
        logs = {"loss": sums[0] / sums[2], "accuracy": sums[1] / sums[2]}
        if x_val is not None:
            logs |= {"val_loss": sums[3] / sums[5], "val_accuracy": sums[4] / sums[5]}
        logs = {k: float(v) for k, v in logs.items()}
        logs["images_per_second"] = global_batch * steps / train_dt
        logs["epoch_seconds"] = time.perf_counter() - t0
        logs["lr"] = float(scheduler.get_last_lr()[0])
        for key, value in logs.items():
            history.setdefault(key, []).append(value)
        train_seconds += logs["epoch_seconds"]
        log.info(
            "epoch %d/%d - %d steps - %.2fs - %s",
            epoch + 1,
            args.epochs,
            steps,
            logs["epoch_seconds"],
            " - ".join(f"{k}: {v:.4g}" for k, v in logs.items() if k != "epoch_seconds"),
        )
        if lead:
            if writer is not None:
                for key in ("loss", "accuracy", "val_loss", "val_accuracy", "lr"):
                    if key in logs:
                        writer.add_scalar(key, logs[key], epoch)
                writer.add_scalar("images_per_second", logs["images_per_second"], epoch)
                writer.flush()
            state = {
                "epoch": epoch + 1,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "history": history,
                "train_seconds": train_seconds,
                "global_batch_size": global_batch,
                "steps_per_epoch": steps,
            }
            save_checkpoint(ckpt_dir, epoch + 1, state)
    # No rank leaves before rank 0 has saved the last checkpoint: a Master lost after this
    # point (while exporting) finds every epoch checkpointed and exports alone (above).
    dist.barrier()
    if start_epoch >= args.epochs:
        log.info("rank %d: all %d epochs were done already; nothing to train", rank, args.epochs)
    log.info(
        "rank %d trained for %.1f s; params sha256 at the end: %s",
        rank,
        time.perf_counter() - t_start,
        param_checksum(model),
    )
    if writer is not None:
        writer.close()

    mirror_average = "flip" in args.augment  # mirrored at random while training: serve both
    result = _record(
        args, precision, world, len(x_train), global_batch, steps, train_seconds, history
    )
    if lead:
        from training.torch_export import export_pytorch_candidate

        saved = export_pytorch_candidate(
            model.eval(), Path(args.saved_model_dir), mirror_average, result
        )
        log.info("rank 0 exported %s", saved)
    return result


def _record(args, precision, world, examples, global_batch, steps, train_seconds, history) -> dict:
    """The run's ``training_history.json``: :mod:`training.train`'s keys."""
    return {
        "model_type": args.model_type,
        "run_id": args.run_id,
        "replicas": world,
        "global_batch_size": global_batch,
        "steps_per_epoch": steps,
        "epochs": args.epochs,
        "precision": precision,
        "mirror_average": "flip" in args.augment,
        "train_examples": int(examples),
        "train_seconds": train_seconds,
        "history": history,
    }


def _export_finished(
    args: argparse.Namespace, path: Path, precision: str, world: int, examples: int
) -> dict:
    """Rank 0 of a run whose every epoch is checkpointed: export the model of checkpoint
    ``path`` (no process group) and write the history it carries."""
    import torch

    from training.torch_export import export_pytorch_candidate
    from training.torch_model import build_torch_model

    state = torch.load(path, map_location="cpu", weights_only=True)
    model = build_torch_model(args.seed)
    load_model_state(model, state, path)
    log.info("rank 0: all %d epochs are checkpointed (%s); exporting it", args.epochs, path)
    mirror_average = "flip" in args.augment
    result = _record(
        args,
        precision,
        world,
        examples,
        state["global_batch_size"],
        state["steps_per_epoch"],
        state["train_seconds"],
        state["history"],
    )
    saved = export_pytorch_candidate(
        model.eval(), Path(args.saved_model_dir), mirror_average, result
    )
    log.info("rank 0 exported %s", saved)
    return result


def _evaluate(module, images, labels, criterion, device, bf16: bool):
    """This rank's slice of the validation split in eval mode (the running batch-norm
    statistics, no gradients): ``float64 [3]`` sums of loss, correct predictions, examples."""
    import torch

    module.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, len(images), VALIDATION_BATCH):
            x = images[start : start + VALIDATION_BATCH].to(
                device, torch.float32, memory_format=torch.channels_last
            )
            y = labels[start : start + VALIDATION_BATCH].to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = module(x).float()
            sums[0] += criterion(logits, y)
            sums[1] += (logits.argmax(1) == y).sum()
            sums[2] += len(y)
    return sums


def cli(argv: list[str] | None = None) -> int:
    """Console entry point: 0 on success, 1 with one line on a configuration error (the
    operator's variables, the dataset), :data:`training.train.PEER_LOST_EXIT_CODE` when a peer
    was lost (retryable); anything else is a bug and keeps its traceback."""
    return training.run_cli(main, build_parser(), (DistEnvError, DatasetError), argv)


if __name__ == "__main__":
    sys.exit(cli())
