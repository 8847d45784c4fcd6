"""Who coordinates a job or holds a lease, and whether that process still lives.

An owner is `host:pid`. A process on this host that no longer exists (or is a zombie) is
dead for sure; one on another host cannot be checked from here and is assumed alive.
The same rule decides whether a job left `running` may be resumed and whether a slot
lease may be reclaimed, so a killed server leaves neither a stuck job nor a lost slot.
"""

from __future__ import annotations

import os
import socket

__all__ = ["owner_alive", "owner_host", "this_host", "this_owner"]


def this_host() -> str:
    return socket.gethostname()


def this_owner() -> str:
    """Who coordinates a job: host and process, so a dead owner can be told from a live one."""
    return f"{this_host()}:{os.getpid()}"


def owner_host(owner: str | None) -> str:
    """The host part of an owner (`''` for none).

    >>> owner_host("node-1:4242")
    'node-1'
    """
    return (owner or "").rpartition(":")[0]


def owner_alive(owner: str | None) -> bool:
    """True unless the owner is known dead: a process on this host that no longer exists.
    An owner on another host is assumed alive (resume there, or use --force)."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != this_host():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return _is_not_zombie(int(pid))


def _is_not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
