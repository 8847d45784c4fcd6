"""Encoders for the synchronous `POST /v1/embeddings`: one child process per registered
model, loaded once, that embeds the texts of concurrent requests together.

A request's texts wait in the model's queue; a thread takes whatever has gathered (up to
`MAX_BATCH` texts, after at most `GATHER_SECONDS`), sends it to the child in one batch,
and hands each request its vectors. The child loads the model as a job's worker does
(`load_model`), so nothing a tenant sends is tokenized in the server process: a crash
fails the requests in flight (503) and the next request starts a new child.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from thresher.arrays import vector_rows
from thresher.children import describe_exit, die_with_parent
from thresher.service.background.job_process import children_context
from thresher.spec import ModelSection

__all__ = ["EncoderCrashed", "EncoderRefused", "Encoders", "Vectors", "counting_tokens"]

log = logging.getLogger("thresher.service.background.encoders")

MAX_BATCH = 256
GATHER_SECONDS = 0.005


def counting_tokens(section: ModelSection) -> dict[str, bool]:
    """The model options that make an encoder give each text's token count (OpenAI's
    `usage`), where its kind can: sentence-transformers' `tokens`."""
    return {"tokens": True} if section.kind == "sentence-transformers" else {}


class EncoderCrashed(RuntimeError):
    """The model's process died while a request waited."""


class EncoderRefused(ValueError):
    """The model could not embed these texts (or is not a model that embeds)."""


@dataclass(frozen=True)
class Vectors:
    embeddings: np.ndarray  # (texts, dimension) float32
    tokens: np.ndarray  # token count per text


@dataclass
class _Waiting:
    texts: list[str]
    answer: Future[Vectors] = field(default_factory=Future)


class _Encoder:
    """One model's child process and the thread that feeds it."""

    def __init__(self, name: str, section: ModelSection) -> None:
        self.name, self.section = name, section
        self.waiting: queue.Queue[_Waiting] = queue.Queue()
        self.conn, child = children_context.Pipe()
        self.process = children_context.Process(target=_serve, args=(section, child), daemon=True)
        self.process.start()
        child.close()
        self.thread = threading.Thread(target=self._feed, name=f"encoder-{name}", daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def _feed(self) -> None:
        while True:
            batch = [self.waiting.get()]
            count = len(batch[0].texts)
            try:
                while count < MAX_BATCH:
                    more = self.waiting.get(timeout=GATHER_SECONDS)
                    batch.append(more)
                    count += len(more.texts)
            except queue.Empty:
                pass
            if not self._run(batch):
                return

    def _run(self, batch: list[_Waiting]) -> bool:
        """Embed `batch` in one call; False (and each request failed) if the child died."""
        texts = [t for w in batch for t in w.texts]
        try:
            self.conn.send(texts)
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(1)
            message = f"the model's process {describe_exit(self.process.exitcode)}"
            for waiting in batch:
                waiting.answer.set_exception(EncoderCrashed(message))
            self._fail_queued(message)
            return False
        if kind == "error":
            for waiting in batch:
                waiting.answer.set_exception(EncoderRefused(str(value)))
            return True
        embeddings, tokens = value
        start = 0
        for waiting in batch:
            end = start + len(waiting.texts)
            waiting.answer.set_result(Vectors(embeddings[start:end], tokens[start:end]))
            start = end
        return True

    def _fail_queued(self, message: str) -> None:
        while True:
            try:
                self.waiting.get_nowait().answer.set_exception(EncoderCrashed(message))
            except queue.Empty:
                return


class Encoders:
    """The server's encoders, started on first use, one per model."""

    def __init__(self, models: dict[str, ModelSection]) -> None:
        self.models = models
        self._running: dict[str, _Encoder] = {}
        self._lock = threading.Lock()

    def embed(self, model: str, texts: list[str], timeout: float = 120.0) -> Vectors:
        """The vectors of `texts` by registered model `model`, batched with whatever
        other requests wait for it. EncoderCrashed if its process died."""
        waiting = _Waiting(texts)
        self._encoder(model).waiting.put(waiting)
        return waiting.answer.result(timeout)

    def close(self) -> None:
        with self._lock:
            for encoder in self._running.values():
                encoder.process.kill()
            self._running.clear()

    def _encoder(self, model: str) -> _Encoder:
        with self._lock:
            encoder = self._running.get(model)
            if encoder is None or not encoder.alive or not encoder.thread.is_alive():
                encoder = _Encoder(model, self.models[model])
                self._running[model] = encoder
            return encoder


def _serve(section: ModelSection, conn: Connection) -> None:
    """The child: load the model once, then embed each batch of texts it is sent."""
    from thresher.models import LoadContext, load_model

    die_with_parent()
    options = {**section.options, **counting_tokens(section)}
    try:
        model = load_model(section.model_copy(update={"options": options}), LoadContext(("input",)))
        refusal = None
    except Exception as exc:  # answered to every request: it is not a model that embeds
        model, refusal = None, f"the model cannot be loaded: {type(exc).__name__}: {exc}"
    while True:
        try:
            texts = conn.recv()
        except EOFError:
            return
        conn.send(_embed(model, texts) if model is not None else ("error", refusal))


def _embed(model: Any, texts: list[str]) -> tuple[str, Any]:
    import pyarrow as pa

    try:
        outputs = model.predict(pa.table({"input": pa.array(texts, pa.string())}))
        vectors = _matrix(outputs["embedding"], len(texts))
        tokens = np.asarray(outputs.get("tokens", np.zeros(len(texts))), dtype=np.int64)
    except Exception as exc:  # the model refused these texts: those requests fail
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("vectors", (vectors, tokens))


def _matrix(column: Any, rows: int) -> np.ndarray:
    """An `embedding` column (vectors as Arrow fixed-size lists, or an array) as rows."""
    import pyarrow as pa

    if isinstance(column, pa.Array | pa.ChunkedArray) and pa.types.is_fixed_size_list(column.type):
        column = vector_rows(column)
    return np.asarray(column, dtype=np.float32).reshape(rows, -1)
