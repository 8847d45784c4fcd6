"""Imported by the service's fork server: the registered models' libraries, once.

The fork server imports the modules named in its preload list before it forks any job
process, but takes only names, and a module that raises anything but ImportError there
ends it, and every job with it. So the server names this one module, and the modules its
models need in `THRESHER_PRELOAD_MODULES` (the fork server inherits the server's
environment); each is imported here, and one that fails is left to the job that needs
it, which says why.
"""

from __future__ import annotations

import importlib
import os
from contextlib import suppress

VARIABLE = "THRESHER_PRELOAD_MODULES"


def _import_all(names: str) -> None:
    for name in filter(None, names.split(",")):
        with suppress(Exception):
            importlib.import_module(name)


_import_all(os.environ.get(VARIABLE, ""))
