"""OpenAI's Batch API formats, shared by `thresher serve` and `thresher run`: a batch
file's request lines checked as OpenAI checks them and made into a job's input rows
(`lines.py`), the answer lines' bodies (`bodies.py`; the one writer of the output and
error files is `sinks.openai_answers`), and what an offline job over a batch file needs
in its spec (`settings.py`). Nothing here needs the `service` extra."""

from __future__ import annotations

__all__: list[str] = []  # import the module you need: lines, bodies, settings
