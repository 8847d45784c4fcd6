"""What `thresher triggers` prints: each trigger's rule, how many files it has taken,
its last set and job, and its last reset."""

from __future__ import annotations

from collections.abc import Mapping

from thresher.store import TriggerLedger
from thresher.triggers.settings import TriggerSettings

__all__ = ["describe_triggers"]


def describe_triggers(triggers: Mapping[str, TriggerSettings], ledger: TriggerLedger) -> list[str]:
    """Lines of text: per trigger, its watch and rule, files seen, last set, last reset."""
    seen = ledger.files_seen()
    lines = []
    for name, t in triggers.items():
        state = "paused" if t.paused else "active"
        rule = f"marker {t.marker!r}" if t.marker else "no marker"
        what = f"pattern {t.pattern!r}, {rule}, settle {t.settle:g} s"
        if t.table is not None:
            what = f"{t.table} table, each new version once"
        lines.append(
            f"{name}: watch {t.watch}, {what}, poll {t.poll_seconds:g} s, {state},"
            f" tenant {t.tenant}"
        )
        counted = "versions" if t.table is not None else "files"
        lines.append(f"  {counted} seen: {seen.get(name, 0)}")
        recent = ledger.recent(name, limit=1)
        if recent:
            last = recent[0]
            about = last.job_id or last.message or ""
            lines.append(
                f"  last set: {last.key} at {last.claimed_at[:19]}, {last.files} files,"
                f" {last.outcome.value} {about}".rstrip()
            )
        resets = ledger.resets(name)
        if resets:
            r = resets[-1]
            lines.append(
                f"  last reset: at {r.reset_at[:19]} by {r.reset_by}, since {r.since},"
                f" {r.forgotten} files forgotten"
            )
    return lines
