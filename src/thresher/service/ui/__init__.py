"""The dashboard `thresher serve` serves at `/ui`: sign-in (`session.py`), jobs live and a
job's page (`pages.py`) with its charts (`charts.py`), batches (`batches.py`), schedules,
triggers and the queue (`automation.py`), webhook deliveries (`webhooks.py`); what every
page shares in `frame.py`; templates and static files in the package."""

from pathlib import Path

from fastapi import APIRouter

from thresher.service.ui import automation, batches, charts, pages, webhooks

__all__ = ["STATIC", "router"]

STATIC = Path(__file__).parent / "static"
router = APIRouter()
for part in (pages, charts, batches, automation, webhooks):
    router.include_router(part.router)
