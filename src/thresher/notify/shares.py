"""Each tenant's share of a few of the server's own threads.

Webhook deliveries and endpoint tests wait on receivers the tenant chose, so one
tenant's slow receiver must hold at most its own share of the threads doing that work,
never all of them: a tenant at its share waits (deliveries) or is told to try again
(tests), and every other tenant goes on.
"""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["TenantShares"]


class TenantShares:
    """At most `per_tenant` slots held at once by any one tenant (`""`: the operator's)."""

    def __init__(self, per_tenant: int) -> None:
        if per_tenant < 1:
            raise ValueError(f"a tenant's share is at least 1 slot, not {per_tenant}")
        self.per_tenant = per_tenant
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, tenant: str) -> bool:
        """Hold one of the tenant's slots; False, holding nothing, when all are held."""
        with self._lock:
            if self._held[tenant] >= self.per_tenant:
                return False
            self._held[tenant] += 1
            return True

    def give_back(self, tenant: str) -> None:
        """Free one slot the tenant holds."""
        with self._lock:
            self._held[tenant] -= 1
            if self._held[tenant] <= 0:
                del self._held[tenant]
