"""Profiles: what a job's data looks like, the figures drift, quality and the report are
judged from. A shard's profile is made once from its row sample (`sampling.py`,
`profiler.py`, `sketching.py`) plus the counts Arrow gives exactly, merged into the
job's (`profile.py`), each figure with its error (`accuracy.py`); `[monitor]`, the job
spec's section that says what is profiled and how it is judged, is `settings.py`.

This package sits low, beside the spec and the store that keep its figures; the judging
that reads them is `thresher.monitor`. Importing it loads none of the sketches: every job
spec imports `settings.py`.
"""

from __future__ import annotations

__all__: list[str] = []
