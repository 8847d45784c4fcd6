"""The service's log lines: ids from the context on every line, in text and in JSON."""

from __future__ import annotations

import io
import json
import logging

import pytest

from thresher.service import logs


@pytest.mark.parametrize("form", ["text", "json"])
def test_a_line_carries_the_ids_of_its_context(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logs.FORMAT_VARIABLE, raising=False)
    root = logging.getLogger()
    kept = root.handlers[:], root.level
    try:
        logs.configure(form, "info")  # type: ignore[arg-type]
        out = io.StringIO()
        root.handlers[0].setStream(out)  # type: ignore[attr-defined]
        log = logging.getLogger("thresher.test")
        with logs.logging_context(request_id="r-1", job_id="j-2"):
            log.info("inside")
            assert logs.current_request_id() == "r-1"
        log.info("outside")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        root.handlers[:], _ = kept
        root.setLevel(kept[1])
    first, second = out.getvalue().splitlines()[:2]
    if form == "text":
        assert first.endswith("thresher.test [request_id=r-1 job_id=j-2]: inside")
        assert second.endswith("thresher.test: outside")
        return
    inside, outside = json.loads(first), json.loads(second)
    assert (inside["request_id"], inside["job_id"], inside["message"]) == ("r-1", "j-2", "inside")
    assert "request_id" not in outside and outside["level"] == "info"
    failed = json.loads(out.getvalue().split("\n", 2)[2])
    assert "ValueError: boom" in failed["exception"]
