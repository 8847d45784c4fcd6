"""Dataset-arrival triggers: what a watched folder or prefix holds (`listing.py`, paged)
and which of its new files form a complete set (`sets.py`: settled, or completed by a
marker file). The manifest of files taken, which makes each file one job's, is the
store's (`store/_triggers.py`); the thread that looks is the service's
(`service/background/watcher.py`).
"""

from __future__ import annotations

from thresher.triggers.listing import FileSeen, file_digest, list_watch
from thresher.triggers.sets import FileSet, Settling, candidates, complete_sets
from thresher.triggers.settings import TriggerSettings

__all__ = [
    "FileSeen",
    "FileSet",
    "Settling",
    "TriggerSettings",
    "candidates",
    "complete_sets",
    "file_digest",
    "list_watch",
]
