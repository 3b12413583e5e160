"""The dynamic batcher on its own: jobs of one key are merged within the token budget, other
keys wait their turn, a lone job never waits, concurrent jobs wait for each other up to
max_wait, one bad job fails alone, a full queue refuses at once, a job whose client left is
skipped."""

import asyncio
import time

import pytest

from kbert.server.batcher import Batcher, QueueFull


def run(coro):
    return asyncio.run(coro)


def test_merging_by_key_and_budget():
    calls = []

    def call(items):
        calls.append(list(items))
        time.sleep(0.05)
        return [x * 10 for x in items]

    async def go():
        b = Batcher(max_tokens=3, max_wait=0)
        jobs = [b.submit(("m", "a"), [1], call, 1), b.submit(("m", "a"), [2], call, 1),
                b.submit(("m", "b"), [3], call, 1), b.submit(("m", "a"), [4, 5], call, 2),
                b.submit(("m", "a"), [6], call, 1)]
        return await asyncio.gather(*jobs)
    assert run(go()) == [[10], [20], [30], [40, 50], [60]]
    # all queued before the worker starts: the oldest job's key first, its jobs within the
    # budget of 3 tokens ([4, 5] would pass it), then b's, then what is left of a
    assert calls == [[1, 2, 6], [3], [4, 5]]


def test_a_lone_request_never_waits_and_concurrent_ones_wait_for_each_other():
    async def go():
        b = Batcher(max_wait=0.3)
        sizes = []

        def call(items):
            sizes.append(len(items))
            return items

        async def timed(items):
            started = time.perf_counter()
            await b.submit(("m", "a"), items, call, 1)
            return time.perf_counter() - started
        lone = await timed([0])
        await asyncio.gather(*(b.submit(("m", "a"), [i], call, 1) for i in range(3)))
        late = []                   # the last batch merged 3: the next waits for more to join
        for i in range(3):
            late.append(asyncio.ensure_future(timed([i])))
            await asyncio.sleep(0.02)
        late = await asyncio.gather(*late)
        alone = [await timed([9])]  # after a batch of 3 it waits once, then no more
        alone.append(await timed([9]))
        return lone, late, alone, sizes
    lone, late, alone, sizes = run(go())
    assert lone < 0.1
    assert sizes == [1, 3, 3, 1, 1]
    assert late[0] > 0.25
    assert alone[0] > 0.25 and alone[1] < 0.1


def test_one_bad_job_fails_alone():
    def call(items):
        if "bad" in items:
            raise ValueError("embed: text 0 is bad")
        return [x.upper() for x in items]

    async def go():
        b = Batcher(max_wait=0)
        blocker = asyncio.ensure_future(b.submit(("m", "a"), ["x"], lambda xs: (
            time.sleep(0.05), xs)[1], 1))
        await asyncio.sleep(0.01)
        jobs = [b.submit(("m", "a"), ["ok"], call, 1), b.submit(("m", "a"), ["bad"], call, 1),
                b.submit(("m", "a"), ["fine"], call, 1)]
        await blocker
        return await asyncio.gather(*jobs, return_exceptions=True)
    good, bad, fine = run(go())
    assert good == ["OK"] and fine == ["FINE"]
    assert isinstance(bad, ValueError) and "is bad" in str(bad)


def test_a_full_queue_refuses_and_a_left_job_is_skipped():
    ran = []

    async def go():
        b = Batcher(max_queued=2, max_wait=0)
        blocker = asyncio.ensure_future(b.submit(("m", "a"), ["x"], lambda xs: (
            time.sleep(0.1), xs)[1], 1))
        await asyncio.sleep(0.02)
        gone = asyncio.ensure_future(b.submit(("m", "a"), ["gone"], lambda xs: (
            ran.append(xs), xs)[1], 1))
        kept = asyncio.ensure_future(b.submit(("m", "b"), ["kept"], lambda xs: (
            ran.append(xs), xs)[1], 1))
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFull, match="queue is full"):
            await b.submit(("m", "a"), ["one too many"], lambda xs: xs, 1)
        gone.cancel()                         # its client disconnected
        await blocker
        return await kept
    assert run(go()) == ["kept"]
    assert ran == [["kept"]]
