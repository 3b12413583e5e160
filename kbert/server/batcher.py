"""The dynamic batcher: concurrent requests to one method of one model become one call.

A request is a `Job`: its items (texts, pairs, questions), the call that runs a list of them
(e.g. `lambda texts: model.embed(texts, normalize=True)`) and a key saying which calls may be
merged (same model, method and options). One worker per replica takes the oldest job, adds every
queued job of the same key while their tokens fit the budget (`max_tokens`), runs the merged
list in ONE thread (one inference at a time per replica: the runtime already uses every core;
a second concurrent pass would only slow both), and hands each job its slice of the results.
`kbert.load`'s methods then sort the merged list by length and cut it into batches themselves.

Jobs that arrive while a batch runs form the next one ("continuous batching"). While requests
come concurrently (the last batch merged several), the next batch also waits up to `max_wait`
(2 ms) from its oldest job for more to join, as TF Serving's `batch_timeout_micros` does:
clients answered by one batch send their next requests a moment after it ends, and without the
wait they would miss the next batch and split the load into small ones (measured: +10-15%
requests/s at 8 and 32 concurrent clients). A lone request (the last batch held one job) never
waits; the first after a burst may wait once.

A full queue (`max_queued` items waiting) refuses at once (`QueueFull`); a job whose client
went away before its batch ran is dropped; a merged call that fails is run again job by job,
so one bad request fails alone.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class QueueFull(Exception):
    """The batcher holds `max_queued` items already: refuse now rather than wait."""


@dataclass
class Job:
    key: tuple
    items: list
    call: Callable[[list], Any]
    cost: int
    future: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """What `Batcher` reports of each batch it ran (for the metrics)."""
    key: tuple
    jobs: int
    items: int
    seconds: float
    waited: list[float]


class Batcher:
    """Merges concurrent jobs of the same key into one call, one call at a time.

    max_tokens: the token budget of one merged call (an estimate: `cost` of the jobs).
    max_wait: seconds a batch under budget waits for more jobs while requests come concurrently.
    max_queued: items that may wait; more is `QueueFull`.
    on_batch: called with a `BatchStats` after each batch (the metrics).
    """

    def __init__(self, max_tokens: int = 16384, max_wait: float = 0.002, max_queued: int = 4096,
                 on_batch: Callable[[BatchStats], None] | None = None) -> None:
        self.max_tokens, self.max_wait, self.max_queued = max_tokens, max_wait, max_queued
        self.on_batch = on_batch
        self._queue: collections.deque[Job] = collections.deque()
        self._queued_items = 0
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        # one thread: one inference at a time
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbert-infer")
        self._last_jobs = 0          # jobs in the last batch: >1 means requests come concurrently

    @property
    def alive(self) -> bool:
        """Whether the worker runs or has not started yet (not stopped by an error)."""
        return self._worker is None or not self._worker.done() or self._worker.cancelled()

    @property
    def depth(self) -> int:
        """Items waiting (not yet in a running batch)."""
        return self._queued_items

    async def submit(self, key: tuple, items: Sequence[Any],
                     call: Callable[[list], Any], cost: int) -> list:
        """The results of `call` for `items` (one per item), run in a batch with other jobs of
        `key`. Raises `QueueFull` at once when the queue is full; the call's own errors."""
        items = list(items)
        if self._queued_items + len(items) > self.max_queued and self._queue:
            raise QueueFull(f"the queue is full ({self._queued_items} inputs waiting, at most "
                            f"{self.max_queued}); retry later")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._work())
        job = Job(key, items, call, max(1, cost), loop.create_future())
        self._queue.append(job)
        self._queued_items += len(items)
        assert self._wake is not None
        self._wake.set()
        return await job.future        # a client that leaves cancels it: the batch skips it

    def _take(self) -> list[Job]:
        """The oldest live job and the queued jobs of its key that fit the budget."""
        while self._queue and self._queue[0].future.done():     # cancelled while queued
            self._queued_items -= len(self._queue.popleft().items)
        if not self._queue:
            return []
        first = self._queue.popleft()
        self._queued_items -= len(first.items)
        batch, cost = [first], first.cost
        rest: collections.deque[Job] = collections.deque()
        while self._queue:
            job = self._queue.popleft()
            if job.future.done():
                self._queued_items -= len(job.items)
            elif job.key == first.key and cost + job.cost <= self.max_tokens:
                batch.append(job)
                cost += job.cost
                self._queued_items -= len(job.items)
            else:
                rest.append(job)
        self._queue = rest
        return batch

    async def _work(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                if self.max_wait > 0 and self._last_jobs > 1:
                    oldest = self._queue[0].queued_at
                    delay = self.max_wait - (time.perf_counter() - oldest)
                    if delay > 0 and sum(j.cost for j in self._queue) < self.max_tokens:
                        await asyncio.sleep(delay)
                batch = self._take()
                if batch:
                    self._last_jobs = len(batch)
                    await self._run(loop, batch)

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[Job]) -> None:
        started = time.perf_counter()
        items = [item for job in batch for item in job.items]
        try:
            results = await loop.run_in_executor(self._executor, batch[0].call, items)
            _hand_out(batch, list(results))
        except Exception as error:           # noqa: BLE001 (handed to the requests)
            if len(batch) == 1:
                _fail(batch[0], error)
            else:                            # find the job that fails; the others succeed
                for job in batch:
                    if job.future.done():
                        continue
                    try:
                        _hand_out([job], list(await loop.run_in_executor(
                            self._executor, job.call, job.items)))
                    except Exception as e:   # noqa: BLE001
                        _fail(job, e)
        if self.on_batch is not None:
            self.on_batch(BatchStats(batch[0].key, len(batch), len(items),
                                     time.perf_counter() - started,
                                     [started - j.queued_at for j in batch]))

    def close(self) -> None:
        """Stops the worker; queued jobs are refused (the server drains before this)."""
        if self._worker is not None:
            self._worker.cancel()
        for job in self._queue:
            if not job.future.done():
                job.future.set_exception(QueueFull("the server is stopping"))
        self._queue.clear()
        self._executor.shutdown(wait=False)


def _hand_out(batch: list[Job], results: list) -> None:
    start = 0
    for job in batch:
        end = start + len(job.items)
        if not job.future.done():
            job.future.set_result(results[start:end])
        start = end


def _fail(job: Job, error: BaseException) -> None:
    if not job.future.done():
        job.future.set_exception(error)


__all__ = ["BatchStats", "Batcher", "Job", "QueueFull"]
