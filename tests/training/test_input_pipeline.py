"""The training input pipeline: per-worker shards, per-replica batches, one-hot labels and the
augmentation (shift, flip, erase), on synthetic images whose pixels identify them."""

import argparse

import numpy as np
import pytest
import tensorflow as tf

from fmnist_common.cli import number
from training.train import (
    AUGMENTATIONS,
    ERASE_PIXELS,
    SHIFT_PIXELS,
    augment,
    no_autotune_on_device_iterators,
    train_input,
    validation_input,
)


def test_number_ranges_reject_nan_inf_and_out_of_range():
    fraction = number(float, 0, 1, high_open=True)
    assert fraction("0") == 0.0 and fraction("0.1") == 0.1
    for bad in ("1", "-0.1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            fraction(bad)
    count = number(int, 0)
    assert count("0") == 0
    for bad in ("-1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            count(bad)


def _args(augment_kind: str = "none") -> argparse.Namespace:
    return argparse.Namespace(seed=7, augment=augment_kind)


def _numbered(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 images whose pixels [0,0] and [0,1] spell the index (base 256)."""
    images = np.zeros((n, 28, 28, 1), np.uint8)
    images[:, 0, 0, 0], images[:, 0, 1, 0] = np.arange(n) // 256, np.arange(n) % 256
    return images, np.arange(n, dtype=np.int64) % 10


def _ids(batch_images: np.ndarray) -> list[int]:
    return [int(a) * 256 + int(b) for a, b in batch_images[:, 0, :2, 0]]


def test_each_worker_reads_its_own_shard_in_per_replica_batches():
    images, labels = _numbered(650)  # 6 steps of 100 per epoch; 50 left out of each epoch
    creator = train_input(images, labels, _args(), global_batch=100, steps=6)
    seen = []
    for worker in range(2):
        ctx = tf.distribute.InputContext(2, worker, 2)
        batches = list(creator(ctx).take(18).as_numpy_iterator())  # 3 epochs
        assert all(x.shape == (50, 28, 28, 1) and x.dtype == np.float32 for x, _ in batches)
        assert all(y.shape == (50, 10) and np.all(y.sum(1) == 1) for _, y in batches)
        for x, y in batches:  # labels stay with their images
            assert list(y.argmax(1)) == [i % 10 for i in _ids(x)]
        epochs = [[i for x, _ in batches[e : e + 6] for i in _ids(x)] for e in (0, 6, 12)]
        assert all(len(set(ids)) == 300 for ids in epochs), "no example twice in an epoch"
        assert epochs[0] != epochs[1], "each epoch is a fresh permutation"
        seen.append(set().union(*epochs))
    assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] <= set(range(650))


def test_workers_draw_different_augmentations_reproducibly():
    images, labels = np.full((100, 28, 28, 1), 255, np.uint8), np.zeros(100, np.int64)
    creator = train_input(images, labels, _args("shift-flip-erase"), 20, steps=5)

    def first_batch(worker: int) -> np.ndarray:
        dataset = creator(tf.distribute.InputContext(2, worker, 2))
        assert dataset.element_spec[0].shape == (10, 28, 28, 1), "static per-replica batch"
        return next(dataset.as_numpy_iterator())[0]

    assert not np.array_equal(np.sort(first_batch(0), 0), np.sort(first_batch(1), 0))
    np.testing.assert_array_equal(np.sort(first_batch(0), 0), np.sort(first_batch(0), 0))


def test_validation_batches_are_global_and_unaugmented():
    images, labels = _numbered(250)
    ds = validation_input(images, labels, global_batch=100)
    batches = list(ds.as_numpy_iterator())
    assert [len(x) for x, _ in batches] == [100, 100, 50]
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), images)


def _seed(i: int):
    return tf.constant([i, 7], tf.int64)


def _augmented(kind: str, n: int = 300) -> np.ndarray:
    """``n`` white images augmented as one batch: every image gets its own draw."""
    images = tf.fill((n, 28, 28, 1), tf.constant(255, tf.uint8))
    return augment(images, tf.zeros(n, tf.int64), kind, _seed(1))[0].numpy()[..., 0]


def test_shift_moves_each_image_by_up_to_two_pixels_in_every_combination():
    out = _augmented("shift", 500)
    inner = slice(SHIFT_PIXELS, 28 - SHIFT_PIXELS)
    assert np.all(out[:, inner, inner] == 255), "the centre always comes from the image"
    assert set(np.unique(out)) == {0, 255}, "padding is background"
    blank_rows, blank_cols = (out == 0).all(axis=2), (out == 0).all(axis=1)
    # the crop's corner in the padded image: SHIFT_PIXELS - blanks before + blanks after
    row = SHIFT_PIXELS - blank_rows[:, :SHIFT_PIXELS].sum(1) + blank_rows[:, -SHIFT_PIXELS:].sum(1)
    col = SHIFT_PIXELS - blank_cols[:, :SHIFT_PIXELS].sum(1) + blank_cols[:, -SHIFT_PIXELS:].sum(1)
    corners = set(zip(row.tolist(), col.tolist(), strict=True))
    assert corners == {(r, c) for r in range(5) for c in range(5)}, "every shift, each axis its own"


def test_flip_mirrors_left_right_about_half_of_the_time():
    images = np.zeros((200, 28, 28, 1), np.uint8)
    images[:, :, :14] = 255  # left half white
    outs = augment(tf.constant(images), tf.zeros(200, tf.int64), "shift-flip", _seed(1))[0]
    mirrored = int((outs.numpy()[:, 14, 24, 0] == 255).sum())
    assert 60 < mirrored < 140


def test_erase_blanks_one_square_of_at_most_erase_pixels_about_half_of_the_time():
    out = _augmented("shift-flip-erase")
    inner = out[:, SHIFT_PIXELS : 28 - SHIFT_PIXELS, SHIFT_PIXELS : 28 - SHIFT_PIXELS]
    erased = [img for img in inner if (img == 0).any()]
    assert 90 < len(erased) < 210
    boxes = set()
    for img in erased:
        rows, cols = np.nonzero(img == 0)
        box = (rows.min(), rows.max(), cols.min(), cols.max())
        assert (img == 0).sum() == (box[1] - box[0] + 1) * (box[3] - box[2] + 1), "a rectangle"
        for low, high in (box[:2], box[2:]):  # the full side unless clipped at a border
            side = high - low + 1
            assert side == ERASE_PIXELS if low > 0 and high < len(img) - 1 else side <= ERASE_PIXELS
        boxes.add(box)
    assert len(boxes) > len(erased) // 2, "each image draws its own square"


@pytest.mark.parametrize("kind", [k for k in AUGMENTATIONS if k != "none"])
def test_augmentation_keeps_shape_dtype_and_label(kind):
    images, labels = augment(tf.zeros((5, 28, 28, 1), tf.uint8), tf.range(5), kind, _seed(1))
    assert images.shape == (5, 28, 28, 1) and images.dtype == tf.uint8
    assert labels.numpy().tolist() == [0, 1, 2, 3, 4]


def test_augmented_images_stay_with_their_labels():
    # every image is filled with its own id; the brightest pixel survives shift, flip and erase
    ids = np.arange(1, 201)
    images = np.broadcast_to(ids[:, None, None, None], (200, 28, 28, 1)).astype(np.uint8)
    creator = train_input(images, ids % 10, _args("shift-flip-erase"), 40, steps=5)
    batches = list(creator(tf.distribute.InputContext(2, 0, 2)).take(5).as_numpy_iterator())
    for x, y in batches:
        np.testing.assert_array_equal(y.argmax(1), x.reshape(len(x), -1).max(1).astype(int) % 10)


def test_augmentation_draws_per_image_and_repeats_for_the_same_seed():
    first, again = _augmented("shift-flip-erase", 50), _augmented("shift-flip-erase", 50)
    np.testing.assert_array_equal(first, again)
    assert len({img.tobytes() for img in first}) > 25, "images of one batch draw independently"
    images = tf.fill((50, 28, 28, 1), tf.constant(255, tf.uint8))
    reseeded = augment(images, tf.zeros(50, tf.int64), "shift-flip-erase", _seed(2))[0]
    assert not np.array_equal(reseeded.numpy()[..., 0], first)


def test_device_iterators_of_the_strategy_run_no_autotuning_loop():
    """MultiWorkerMirroredStrategy's MultiDeviceIterator wraps each device's share in a new
    dataset with default options (autotuning on): its deletion at the end of fit() waited up
    to 60 s for that loop. After the trainer's fix the per-device datasets have it off, and
    they still yield the input's elements. Fails if TensorFlow renames the wrapped function."""
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    source = tf.data.Dataset.range(6)
    before = mdi.OwnedMultiDeviceIterator(source, ["/cpu:0"])
    assert before._device_iterators[0]._dataset.options().autotune.enabled is not False
    no_autotune_on_device_iterators()
    no_autotune_on_device_iterators()  # idempotent: wrapped once
    assert mdi._create_device_dataset.__wrapped_once__ is True
    it = mdi.OwnedMultiDeviceIterator(source, ["/cpu:0"])
    assert it._device_iterators[0]._dataset.options().autotune.enabled is False
    assert [int(it.get_next()[0]) for _ in range(6)] == list(range(6))
