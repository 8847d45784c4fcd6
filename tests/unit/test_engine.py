"""The worker's moving parts without processes: batch tuning, overlap, bad-row isolation."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from thresher.errors import ModelOutputError
from thresher.worker.autobatch import BatchTuner
from thresher.worker.pipeline import Prefetch, WriteBehind
from thresher.worker.predict import predict_isolating


def feed(tuner: BatchTuner, rate_at: dict[int, float], calls: int = 200) -> None:
    """Drive the tuner with a model whose throughput at each size is `rate_at[size]`."""
    for _ in range(calls):
        if tuner.settled:
            return
        size = tuner.batch_size(row_bytes=8.0)
        tuner.observe(size, size / rate_at[size])


def test_a_fixed_size_never_moves() -> None:
    tuner = BatchTuner(fixed=300)
    feed(tuner, {300: 1000.0})
    assert tuner.size == 300 and tuner.settled


def test_auto_settles_at_the_knee_of_throughput() -> None:
    rates = {64: 1e4, 128: 2e4, 256: 4e4, 512: 7e4, 1024: 7.1e4, 2048: 7.2e4, 4096: 6e4}
    tuner = BatchTuner(start=64, max_size=4096)
    feed(tuner, rates)
    assert tuner.settled
    assert tuner.size == 512  # past it, gains stay under 5%


def test_far_below_the_knee_a_decisive_win_needs_no_long_measurement() -> None:
    """A fast model (a row costs a microsecond): 0.05 s of model time at 64 rows would be
    ~800 calls, each paying the pipeline's own cost per batch. Each doubling that wins by
    25% or more over 3 calls each moves on at once; only near the knee is it measured long."""
    rates = {64: 1e6, 128: 1.9e6, 256: 3.5e6, 512: 6e6, 1024: 6.1e6, 2048: 6.1e6, 4096: 6e6}
    tuner, calls = BatchTuner(start=64, max_size=4096), Counter[int]()
    for _ in range(5_000):
        if tuner.settled:
            break
        size = tuner.batch_size(row_bytes=8.0)
        calls[size] += 1
        tuner.observe(size, size / rates[size])
    assert tuner.settled and tuner.size == 512
    assert calls[64] <= 5 and calls[128] <= 7  # warm-up + 3, and two duels


def test_auto_stops_at_the_ceiling() -> None:
    tuner = BatchTuner(start=64, max_size=256)
    feed(tuner, {64: 1e3, 128: 2e3, 256: 4e3})
    assert tuner.settled and tuner.size == 256


def test_auto_compares_sizes_by_work_when_rows_grow_longer() -> None:
    """A text model sees rows shortest first, so every call runs on longer rows. Its cost
    per token falls with the batch up to 256 and is flat after; measured in tokens (work),
    the tuner finds that knee though the rows grow under it."""
    tokens_per_second = {64: 1e4, 128: 1.5e4, 256: 2e4, 512: 2.02e4, 1024: 2.03e4, 2048: 2e4}
    tuner, length = BatchTuner(start=64, max_size=2048), 10.0
    for _ in range(500):
        if tuner.settled:
            break
        size = tuner.batch_size(row_bytes=8.0)
        tokens = size * length
        tuner.observe(size, tokens / tokens_per_second[size], tokens)
        length *= 1.05  # the next batch's rows are longer
    assert tuner.settled and tuner.size == 256


def sorted_text_chunks(chunks: int, rows: int) -> list[np.ndarray]:
    """Token lengths of mixed texts (a long tail, 5 to 256), sorted as a chunk's are."""
    rng = np.random.default_rng(7)
    return [
        np.sort(np.clip(rng.lognormal(3.5, 0.8, rows).astype(int), 5, 256)) for _ in range(chunks)
    ]


def run_text(
    tuner: BatchTuner, chunks: list[np.ndarray], seconds: Callable[[int, int], float]
) -> float:
    """Batch each chunk as the worker does (see ShardWork._pieces); the model time."""
    total = 0.0
    for lengths in chunks:
        tuner.begin_chunk(lengths)
        start = 0
        while start < len(lengths):
            rows = min(tuner.batch_size(8.0, len(lengths) - start), len(lengths) - start)
            longest = int(lengths[start + rows - 1])
            took = seconds(rows, longest)
            tuner.observe(rows, took, float(rows * longest))
            total, start = total + took, start + rows
    return total


def cpu_encoder(rows: int, longest: int) -> float:
    """A small encoder on one CPU thread: a little fixed cost, then padded tokens."""
    return 0.002 + 2e-6 * rows * longest + 4e-9 * rows * longest**2


def test_a_text_model_settles_where_its_sorted_chunks_run_fastest() -> None:
    """1,000-row chunks of mixed lengths: a batch of half the chunk pads most of its rows
    to the longest. Judged on the tokens per second of the batches each size ran, the
    tuner once settled at 512, 2.5 times slower than 64 (MiniLM); fitted to fixed + per
    padded token and judged over the whole chunk, it finds the fastest size, and its
    duels cost little."""
    chunks = sorted_text_chunks(12, 1000)
    timed = {
        size: run_text(BatchTuner(fixed=size), chunks, cpu_encoder)
        for size in (32, 64, 128, 256, 512)
    }
    fastest = min(timed, key=timed.__getitem__)
    tuner = BatchTuner(start=32, max_size=8192)
    took = run_text(tuner, chunks, cpu_encoder)
    assert tuner.size == fastest == 64
    assert took < 1.1 * timed[64]


def test_a_text_model_whose_calls_are_mostly_fixed_cost_grows_its_batches() -> None:
    """On an accelerator a call costs mostly its launch: bigger batches win despite the
    padding, and the tuner grows as far as the chunk lets it measure."""

    def accelerator(rows: int, longest: int) -> float:
        return 0.01 + 2e-8 * rows * longest

    tuner = BatchTuner(start=64, max_size=8192)
    run_text(tuner, sorted_text_chunks(6, 8192), accelerator)
    assert tuner.size >= 1024


def test_rows_of_no_length_are_judged_per_call() -> None:
    """An LLM row with no usable prompt measures 0 tokens; batches of such rows are
    judged by their calls' seconds, not divided by zero."""
    chunks = [np.concatenate([np.zeros(900, dtype=np.int64), np.full(100, 50)])] * 6
    tuner = BatchTuner(start=64, max_size=1024)
    run_text(tuner, chunks, lambda rows, longest: 0.001 + 1e-5 * rows)
    assert tuner.size >= 64


def test_a_challenger_waits_for_a_chunk_with_its_rows_left() -> None:
    """A partial batch measures nothing; at the best size it pads less."""
    tuner = BatchTuner(start=64, max_size=8192)
    tuner.observe(64, 0.01)  # warm-up
    tuner.observe(64, 0.01)  # the challenger's turn now
    assert tuner.batch_size(8.0, rows_left=100) == 64
    assert tuner.batch_size(8.0, rows_left=128) == 128


def test_a_text_challenger_waits_for_a_chunk_of_four_of_its_batches() -> None:
    """Bigger, it pads much of the sorted chunk to one length and is measured once or
    twice per chunk: its duel would cost more than it could win."""
    tuner = BatchTuner(start=64, max_size=8192)
    tuner.observe(64, 0.01)  # warm-up
    tuner.observe(64, 0.01)  # the challenger's turn now
    tuner.begin_chunk(np.arange(511))
    assert tuner.batch_size(8.0, rows_left=511) == 64
    tuner.begin_chunk(np.arange(512))
    assert tuner.batch_size(8.0, rows_left=512) == 128


def cache_bound_encoder(rows: int, longest: int) -> float:
    """MiniLM on one CPU thread, as measured: a little fixed cost, ~170 us a padded token,
    and ~10% more a token each time a batch's tokens double past 2,048 (its activations
    spill the caches), so 256 rows are best at 8 tokens and 16-32 at 64-96."""
    tokens = rows * longest
    return 0.004 + tokens * 1.7e-4 * (1 + 0.1 * max(0.0, float(np.log2(tokens / 2048))))


def test_a_text_models_batch_is_the_rows_that_fit_a_budget_of_padded_tokens() -> None:
    tuner = BatchTuner(max_size=8192, tokens=True)
    lengths = np.array([4] * 300 + [100] * 300)
    tuner.begin_chunk(lengths)
    assert tuner.size == 1024
    assert tuner.batch_size(8.0, rows_left=600) == 256  # 256 rows of 4 tokens
    assert tuner.batch_size(8.0, rows_left=344) == 44  # one more pads all 45 to 100 tokens
    assert tuner.batch_size(8.0, rows_left=300) == 10  # 10 rows of 100
    assert tuner.batch_size(8.0, rows_left=4) == 4  # the chunk's end: the rows left
    assert tuner.batch_size(8.0, rows_left=1) == 1  # a row past the budget goes alone


def test_a_token_budget_beats_every_fixed_row_count_where_long_rows_spill_the_cache() -> None:
    """Tuned as a row count on each chunk's short head, the tuner kept a size too big for
    the long tail (MiniLM in a service batch: 128 rows, 14% slower than 64). A budget of
    tokens holds at every length: tuned, it beats the best fixed row count."""
    chunks = sorted_text_chunks(12, 3000)
    timed = {
        size: run_text(BatchTuner(fixed=size), chunks, cache_bound_encoder)
        for size in (16, 32, 64, 128, 256)
    }
    as_rows = run_text(BatchTuner(start=32, max_size=8192), chunks, cache_bound_encoder)
    as_tokens = run_text(BatchTuner(max_size=8192, tokens=True), chunks, cache_bound_encoder)
    assert as_tokens < min(timed.values()) < as_rows


def test_a_launch_bound_text_model_grows_its_token_budget() -> None:
    def accelerator(rows: int, longest: int) -> float:
        return 0.01 + 2e-8 * rows * longest

    tuner = BatchTuner(max_size=8192, tokens=True)
    run_text(tuner, sorted_text_chunks(6, 8192), accelerator)
    assert tuner.size >= 16 * 1024


def test_out_of_memory_halves_the_token_budget() -> None:
    tuner = BatchTuner(max_size=8192, tokens=True)
    tuner.begin_chunk(np.full(1000, 8))
    assert tuner.batch_size(8.0, rows_left=1000) == 128
    tuner.back_off(failed_rows=128)
    assert tuner.settled and tuner.size == 512
    assert tuner.batch_size(8.0, rows_left=1000) == 64


def test_a_model_that_batches_itself_is_handed_rows() -> None:
    """An LLM engine packs rows by its own token budget; an encoder pads what it gets."""
    from thresher.spec import BatchSection
    from thresher.worker.shard import tuner_for

    class Encoder:
        def predict(self, batch: pa.Table) -> dict[str, np.ndarray]:
            return {}

        def sort_key(self, batch: pa.Table) -> np.ndarray:
            return np.zeros(batch.num_rows)

    class Generator(Encoder):
        batches_itself = True

    assert tuner_for(BatchSection(), Encoder()).tokens
    assert not tuner_for(BatchSection(), Generator()).tokens
    assert not tuner_for(BatchSection(size=64), Encoder()).tokens  # a fixed size is rows


def test_sizes_take_turns_so_a_drift_in_speed_picks_no_wrong_size() -> None:
    """64 is the fastest size, but every call runs 10% faster than the one before (a
    neighbour's job ending; for a text model, longer rows that cost less per token).
    Measured one after the other, each bigger size would look faster; taking turns with
    the best, each is judged at the same moment, and 64 stays."""
    rates = {64: 1000.0, 128: 900.0, 256: 850.0, 512: 800.0}
    tuner, speed = BatchTuner(start=64, max_size=512), 1.0
    for _ in range(500):
        if tuner.settled:
            break
        size = tuner.batch_size(row_bytes=8.0)
        tuner.observe(size, size / (rates[size] * speed))
        speed *= 1.1
    assert tuner.settled and tuner.size == 64


def test_out_of_memory_halves_and_caps_for_good() -> None:
    tuner = BatchTuner(start=64, max_size=4096)
    tuner.back_off(failed_rows=64)
    assert tuner.size == 32 and tuner.settled
    feed(tuner, {32: 1.0})
    assert tuner.size == 32


def test_a_challenger_out_of_memory_settles_at_the_best() -> None:
    tuner = BatchTuner(start=64, max_size=4096)
    tuner.back_off(failed_rows=128)
    assert tuner.size == 64 and tuner.settled and tuner.max_size == 64


def test_max_memory_caps_the_rows_of_a_batch() -> None:
    tuner = BatchTuner(fixed=10_000, max_memory=80_000)
    assert tuner.batch_size(row_bytes=100.0) == 800
    assert tuner.batch_size(row_bytes=1.0) == 10_000


def test_prefetch_keeps_order_and_raises_the_source_error() -> None:
    def source() -> Iterator[int]:
        yield from range(5)
        raise ValueError("disk gone")

    got = []
    with pytest.raises(ValueError, match="disk gone"), Prefetch(source()) as items:
        got.extend(items)
    assert got == [0, 1, 2, 3, 4]


def test_prefetch_stops_its_thread_when_the_consumer_leaves_early() -> None:
    with Prefetch(iter(range(1000))) as items:
        assert next(items) == 0
    assert not any(t.name == "thresher-read" for t in threading.enumerate())


def test_write_behind_writes_everything_in_order_and_surfaces_errors() -> None:
    written: list[int] = []
    with WriteBehind(written.append) as writer:
        for i in range(10):
            writer.put(i)
    assert written == list(range(10))

    def failing(item: int) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"), WriteBehind(failing) as writer:
        writer.put(1)


class Doubler:
    """Raises on x == 13, runs out of memory on batches over `limit` rows, NaN on x == 7."""

    def __init__(self, limit: int = 10**9) -> None:
        self.limit = limit
        self.calls = 0

    def predict(self, batch: pa.Table) -> Mapping[str, Any]:
        self.calls += 1
        x = batch.column("x").to_numpy()
        if len(x) > self.limit:
            raise MemoryError("batch too large")
        if (x == 13).any():
            raise ValueError("13 is unlucky")
        return {"prediction": np.where(x == 7, np.nan, x * 2.0)}


def table(n: int) -> pa.Table:
    return pa.table({"x": np.arange(n, dtype=np.float64)})


def test_rows_the_model_rejects_are_isolated_and_the_rest_predicted() -> None:
    predicted = predict_isolating(Doubler(), table(64), "doubler")
    assert set(predicted.failed) == {7, 13}
    assert predicted.failed[13][0] == "ValueError"
    assert predicted.failed[7] == ("NonFinitePrediction", "column 'prediction' is NaN or infinite")
    assert predicted.rows.tolist() == [i for i in range(64) if i not in (7, 13)]
    assert predicted.columns["prediction"].to_pylist() == [2.0 * i for i in predicted.rows]


def test_a_batch_leaves_nothing_for_the_garbage_collector() -> None:
    """A reference cycle keeps a batch's input and outputs alive until Python's rare full
    collection: a recursive closure here once held hundreds of MiB per worker. With the
    collector off, only a cycle could keep the model alive once the call returns."""
    gc.collect()
    gc.disable()
    try:
        model = Doubler()
        alive = weakref.ref(model)
        predicted = predict_isolating(model, table(64), "doubler")  # bisects: rejected rows
        del model
        assert predicted.failed
        assert alive() is None
    finally:
        gc.enable()


def test_out_of_memory_splits_the_batch_without_failing_rows() -> None:
    tuner = BatchTuner(start=64, max_size=64)
    predicted = predict_isolating(Doubler(limit=20), table(64).slice(14, 40), "doubler", tuner)
    assert predicted.failed == {}
    assert len(predicted.rows) == 40
    assert tuner.settled and tuner.size <= 20


def test_a_model_that_returns_the_wrong_number_of_rows_is_an_error() -> None:
    class Short:
        def predict(self, batch: pa.Table) -> Mapping[str, Any]:
            return {"prediction": np.zeros(batch.num_rows - 1)}

    with pytest.raises(ModelOutputError, match=r"returned 9 values .* the batch has 10 rows"):
        predict_isolating(Short(), table(10), "short")


def test_the_tuner_hears_the_whole_batchs_time_not_only_the_model_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch costs more than its model call (the missing-value check, slicing, the
    output table); the tuner must weigh sizes by all of it, or every size past the one
    where the call alone flattens looks no better."""
    from types import SimpleNamespace

    from thresher.sources.base import Chunk
    from thresher.worker import shard

    heard: list[tuple[int, float]] = []

    class Listening(BatchTuner):
        def observe(self, rows: int, seconds: float, work: float | None = None) -> None:
            heard.append((rows, seconds))

    def slow_check(rows: Any, errors: Any) -> Any:
        time.sleep(0.02)  # a batch's own cost, outside the model call
        return rows

    class Instant:
        def predict(self, batch: pa.Table) -> dict[str, Any]:
            return {"y": np.zeros(batch.num_rows)}

    monkeypatch.setattr(shard, "_drop_missing", slow_check)
    setup = SimpleNamespace(
        context=SimpleNamespace(features=("x",)),
        id_column=None,
        keep_columns=[],
        model=SimpleNamespace(uri="instant"),
    )
    work = shard.ShardWork(setup, Instant(), None, None, Listening(fixed=4))  # type: ignore[arg-type]
    table = pa.table({"x": np.arange(8.0)})
    output, _ = work.predict_rows(Chunk(table, np.arange(8)))
    assert output.column("y").to_pylist() == [0.0] * 8
    assert [rows for rows, _ in heard] == [4, 4]
    assert all(seconds >= 0.02 for _, seconds in heard)


def test_a_workers_progress_is_sent_at_most_every_quarter_second_and_all_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each chunk's rows add up; a send per chunk woke the coordinator every few ms."""
    from thresher.executors import serve
    from thresher.worker.tasks import Progress

    clock = [100.0]
    monkeypatch.setattr(serve.time, "monotonic", lambda: clock[0])
    sent: list[Any] = []
    report = serve.ThrottledProgress(sent.append, shard=3)
    for _ in range(10):  # ten chunks in 0.1 s: nothing sent yet
        clock[0] += 0.01
        report(100)
    assert sent == []
    clock[0] += 0.2
    report(100)  # a quarter second since the shard began: all 1,100 rows go
    report(50)
    report.flush()  # the shard's end: the rest
    report.flush()  # nothing more to say
    assert sent == [Progress(3, 1100), Progress(3, 50)]


def test_batch_size_auto_reads_chunks_of_max_size() -> None:
    """How many rows a worker reads at once is the engine's policy, not the spec's."""
    from thresher.spec import BatchSection
    from thresher.worker.shard import read_rows

    auto = BatchSection(size="auto", max_size=100_000)
    assert read_rows(auto) == 100_000
    assert read_rows(auto, by_length=True) == 8192  # a text model's sorting window
    small = BatchSection(size="auto", max_size=1000)
    assert read_rows(small, by_length=True) == 1000
    for sorts in (False, True):
        assert read_rows(BatchSection(size=300), sorts) == 300 * 28
        assert read_rows(BatchSection(size=10_000), sorts) == 10_000
