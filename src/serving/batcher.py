"""Micro-batching: the images of concurrent requests go to the model in one call.

:class:`MicroBatcher` runs the model on one dedicated thread off the event loop (TensorFlow
releases the GIL, so the loop keeps accepting requests meanwhile). When a call holding several
requests fails with ``InvalidInput`` (a bad image), every request is retried alone, so one bad
image cannot fail its neighbours.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from kserve.errors import InvalidInput


@dataclass
class _Pending:
    images: list[bytes]
    future: asyncio.Future


class MicroBatcher:
    """Group the images of concurrent requests into one model call.

    One worker task per event loop takes every request queued while the previous call ran (up to
    ``max_batch_size`` images), optionally waits ``max_latency_ms`` for more, and runs
    ``infer_fn`` on a single dedicated thread (TensorFlow releases the GIL, so the event loop
    keeps accepting requests meanwhile). At low load a request runs alone without waiting; under
    load batches grow by themselves.

    Args:
        infer_fn: ``list[bytes] (N) -> float32 ndarray [N, 10]``; raises ``InvalidInput`` for
            bad images.
        max_batch_size: most images per call (a single larger request still runs, alone).
        max_latency_ms: extra time to wait for more requests before a call (0: none).
    """

    def __init__(
        self,
        infer_fn: Callable[[list[bytes]], np.ndarray],
        max_batch_size: int = 32,
        max_latency_ms: float = 0.0,
    ):
        self.infer_fn = infer_fn
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_latency_s = max(0.0, float(max_latency_ms)) / 1000.0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="infer")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    async def submit(self, images: list[bytes]) -> np.ndarray:
        """Queue one request's images; returns their ``float32 [len(images), 10]`` output.

        Raises:
            InvalidInput: one of the images could not be decoded.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._worker is None or self._worker.done():
            # First call, or a new event loop (e.g. a test client per request).
            self._loop = loop
            self._pending = collections.deque()
            self._wakeup = asyncio.Event()
            self._worker = loop.create_task(self._run_forever(), name="micro-batcher")
        fut = loop.create_future()
        self._pending.append(_Pending(images, fut))
        self._wakeup.set()
        return await fut

    async def _run_forever(self) -> None:
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            if self.max_latency_s and self._queued() < self.max_batch_size:
                await asyncio.sleep(self.max_latency_s)
            batch: list[_Pending] = []
            size = 0
            while self._pending and (
                not batch or size + len(self._pending[0].images) <= self.max_batch_size
            ):
                item = self._pending.popleft()
                if item.future.done():  # client went away
                    continue
                batch.append(item)
                size += len(item.images)
            if batch:
                await self._run_batch(batch)

    def _queued(self) -> int:
        return sum(len(p.images) for p in self._pending)

    async def _call(self, images: list[bytes]) -> np.ndarray:
        return await self._loop.run_in_executor(self._executor, self.infer_fn, images)

    async def _run_batch(self, batch: list[_Pending]) -> None:
        images = [img for p in batch for img in p.images]
        try:
            probs = await self._call(images)
        except InvalidInput as exc:
            if len(batch) == 1:
                _set(batch[0].future, exc=exc)
                return
            for p in batch:  # isolate the request(s) holding the bad image
                try:
                    _set(p.future, result=await self._call(p.images))
                except Exception as one_exc:  # noqa: BLE001  (handed to the request)
                    _set(p.future, exc=one_exc)
            return
        except Exception as exc:  # noqa: BLE001  (handed to every request of the batch)
            for p in batch:
                _set(p.future, exc=exc)
            return
        start = 0
        for p in batch:
            _set(p.future, result=probs[start : start + len(p.images)])
            start += len(p.images)

    def close(self) -> None:
        """Stop the worker task (if its loop still runs) and the inference thread."""
        if self._worker is not None and not self._worker.done() and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._worker.cancel)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _set(fut: asyncio.Future, result: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
