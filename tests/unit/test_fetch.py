"""The fetcher of a column's files: where a path is, what is tried again and what is not,
and the bounds on bytes and places."""

from __future__ import annotations

from pathlib import Path

import pytest

from thresher.media.decode import MediaError
from thresher.sources import fetch as fetch_module
from thresher.sources.fetch import Fetcher, _Transient

pytestmark = pytest.mark.unit


def test_a_relative_path_is_against_the_base_and_held_to_the_roots(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jpg").write_bytes(b"abc")
    (tmp_path / "secret").write_bytes(b"key")
    fetcher = Fetcher(str(tmp_path / "in"), roots=(str(tmp_path / "in"),), threads=2)
    assert fetcher.fetch_all(["a.jpg", str(tmp_path / "in" / "a.jpg")]) == [b"abc", b"abc"]
    outside = fetcher.fetch("../secret")
    assert isinstance(outside, MediaError) and outside.error == "OutsideRoots"
    url = fetcher.fetch("http://169.254.169.254/latest/meta-data")  # not under a root
    assert isinstance(url, MediaError) and url.error == "OutsideRoots"


def test_missing_empty_and_too_large(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 11)
    fetcher = Fetcher(str(tmp_path), max_bytes=10)
    missing, empty, big = (fetcher.fetch(x) for x in ("nope.png", " ", "big"))
    assert isinstance(missing, MediaError) and missing.error == "NotFound"
    assert isinstance(empty, MediaError) and empty.error == "NoLocation"
    assert isinstance(big, MediaError) and big.error == "TooLarge"
    assert "source.images.max_bytes" in str(big)


def test_a_transient_failure_is_tried_again_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    answers = [_Transient("HTTP 503"), _Transient("timed out"), b"ok"]

    def read(self: Fetcher, url: str) -> bytes:
        calls.append(url)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(Fetcher, "_read", read)
    monkeypatch.setattr(fetch_module, "FIRST_WAIT", 0.0)
    assert Fetcher("", retries=2).fetch("http://x/a") == b"ok"
    assert len(calls) == 3
    answers[:] = [_Transient("HTTP 503")] * 2
    given_up = Fetcher("", retries=1).fetch("http://x/a")
    assert isinstance(given_up, MediaError) and given_up.error == "Unreachable"
    assert "2 tries" in str(given_up) and given_up.stage == "fetch"


def test_a_fetcher_travels_without_its_threads(tmp_path: Path) -> None:
    import pickle

    (tmp_path / "a").write_bytes(b"1")
    fetcher = Fetcher(str(tmp_path), threads=4)
    fetcher.fetch_all(["a", "a"])
    copy = pickle.loads(pickle.dumps(fetcher))
    assert copy.fetch_all(["a", "a"]) == [b"1", b"1"]
