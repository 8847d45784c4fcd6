"""A scheduled job's fire time, filled into its `POST /v1/jobs` body.

`{date}` is the fire time's date in the schedule's zone (`2026-12-01`: the partition a
nightly run reads); `{nominal_time}` is the fire time in UTC, ISO 8601 basic format
(`20261201T020000Z`: safe in a path on every file system). They are replaced in the
job's `name` and `source.uri` only; any other brace is left as it is.

    >>> from datetime import datetime, UTC
    >>> from zoneinfo import ZoneInfo
    >>> job = {"name": "scores-{date}", "source": {"uri": "/data/{date}/*.parquet"}}
    >>> at = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    >>> filled = fill_in(job, at, ZoneInfo("Europe/Berlin"))
    >>> filled["name"], filled["source"]["uri"]
    ('scores-2026-12-02', '/data/2026-12-02/*.parquet')
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

__all__ = ["FIELDS", "fill_in"]

FIELDS = ("{date}", "{nominal_time}")


def fill_in(job: dict[str, Any], nominal: datetime, zone: tzinfo) -> dict[str, Any]:
    """A copy of `job` with the fire time `nominal` filled in."""
    values = {
        "{date}": nominal.astimezone(zone).date().isoformat(),
        "{nominal_time}": nominal.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ"),
    }

    def fill(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for field, value in values.items():
            text = text.replace(field, value)
        return text

    filled = {**job}
    if "name" in job:
        filled["name"] = fill(job["name"])
    if isinstance(job.get("source"), dict):
        filled["source"] = {**job["source"], "uri": fill(job["source"].get("uri"))}
    return filled
