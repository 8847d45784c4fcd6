"""The OpenAI-compatible Batch API: the error envelope its clients read
(`envelope.py`), the request lines of a batch input file checked and turned into a job's
input (`lines.py`), and the job's results turned back into OpenAI's output and error
files (`results.py`). The routes are `routers/batches.py`; the background work that
takes a batch from `validating` to `completed` is `background/batches.py`."""

from __future__ import annotations

__all__: list[str] = []
