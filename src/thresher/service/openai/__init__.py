"""The OpenAI-compatible Batch API's HTTP side: the error envelope its clients read
(`envelope.py`). A batch's webhook events, signed as OpenAI signs them, are
`thresher.notify.endpoints`. The request lines of a batch input file and the job's results as
OpenAI's output and error files are `thresher.openai` (shared with `thresher run`'s
`openai-batch` source and sink); the routes are `routers/batches.py`; the background
work that takes a batch from `validating` to `completed` is `background/batches.py`."""

from __future__ import annotations

__all__: list[str] = []
