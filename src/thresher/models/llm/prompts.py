"""Prompts from rows: a text column as it is, or a messages column through the model's
chat template (`add_generation_prompt=True`), as token ids."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from thresher.errors import ModelLoadError

ROLES = ("system", "user", "assistant", "developer", "tool")


class PromptReader:
    """Turns a batch's prompt or messages column into each row's prompt token ids."""

    def __init__(self, tokenizer: Any, column: str, chat: bool) -> None:
        if chat and not getattr(tokenizer, "chat_template", None):
            raise ModelLoadError(
                "model.options.messages_column: the model folder has no chat template"
                " (tokenizer_config.json or chat_template.jinja); use prompt_column with"
                " ready-made prompt text, or save a tokenizer with a chat_template"
            )
        self._tokenizer = tokenizer
        self.column = column
        self._chat = chat

    def token_ids(self, batch: pa.Table) -> list[list[int]]:
        """Every row's prompt as token ids; ValueError for a row without a usable prompt."""
        values = batch.column(self.column).to_pylist()
        texts = [self._text(value, row) for row, value in enumerate(values)]
        if not texts:
            return []
        # A chat template writes the special tokens itself (a BOS, the role markers).
        encoded = self._tokenizer(
            texts, add_special_tokens=not self._chat, return_attention_mask=False
        )
        ids = [list(row) for row in encoded["input_ids"]]
        if not all(ids):
            raise ValueError(f"column {self.column!r}: row {ids.index([])} has an empty prompt")
        return ids

    def _text(self, value: Any, row: int) -> str:
        if value is None:
            raise ValueError(f"column {self.column!r} is null at row {row} of the batch")
        if not self._chat:
            if not isinstance(value, str):
                raise ValueError(f"column {self.column!r} holds {type(value).__name__}, not text")
            return value
        messages = chat_messages(value, self.column)
        rendered = self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return str(rendered)


def chat_messages(value: Any, column: str) -> list[dict[str, str]]:
    """A row's messages as `[{"role": ..., "content": ...}]`: a list of structs or its
    JSON text. ValueError names what is wrong.

    >>> chat_messages('[{"role": "user", "content": "hi"}]', "messages")
    [{'role': 'user', 'content': 'hi'}]
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"column {column!r}: not JSON messages: {exc}") from exc
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ValueError(f"column {column!r}: expected a non-empty list of messages")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"column {column!r}: message {index} is not an object")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"column {column!r}: message {index} has role {role!r}")
        messages.append({"role": str(role), "content": _content(content, column, index)})
    return messages


def _content(content: Any, column: str, index: int) -> str:
    """Text content: a string, or OpenAI's list of `{"type": "text", "text": ...}` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    raise ValueError(f"column {column!r}: message {index} has no text content")
