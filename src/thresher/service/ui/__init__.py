"""The dashboard `thresher serve` serves at `/ui` (`pages.py`): sign-in (`session.py`),
jobs live, a job's shards and bad records, schedules; templates and static files in the
package."""

from pathlib import Path

from thresher.service.ui.pages import router

__all__ = ["STATIC", "router"]

STATIC = Path(__file__).parent / "static"
