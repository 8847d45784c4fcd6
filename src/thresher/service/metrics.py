"""What `/metrics` says, through `prometheus-client`: the store's figures collected at each
scrape, for the caller's view, and the server's own process, GC and HTTP figures.

Job metrics are labelled `job_id` and `tenant` (not `job`, which Prometheus sets to the
scrape job's name and would rename `exported_job`). A tenant's view holds its own jobs,
rows, shards, schedules and triggers alone; the host-wide view (an operator's token, or
`metrics_public`) every tenant's, the slots free on this host, the webhook backlog, the
HTTP request durations (by method, route template and status) and the process's CPU,
memory, file descriptors and garbage collections.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client import generate_latest as exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from thresher.service.logs import HTTP_SECONDS
from thresher.service.state import ServiceState
from thresher.store import JobState

__all__ = ["render"]

SHARD_BOUNDS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


def render(state: ServiceState, tenant: str | None = None) -> bytes:
    """The metrics of `tenant`'s view (every tenant's, and the server's own, with None)
    in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreMetrics(state, tenant))
    if tenant is None:  # the server's own figures: every tenant's traffic is in them
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        registry.register(HTTP_SECONDS)
    return exposition(registry)


class StoreMetrics(Collector):
    """The store's figures, read when Prometheus scrapes (the store is the truth shared
    by every server on it; nothing is counted in one server's memory)."""

    def __init__(self, state: ServiceState, tenant: str | None) -> None:
        self.state, self.tenant = state, tenant

    def collect(self) -> Iterator[Metric]:
        yield from self._jobs()
        yield self._shards()
        yield from self._schedules_and_triggers()
        yield from self._queue_and_slots()
        if self.tenant is None:
            backlog = GaugeMetricFamily(
                "thresher_webhook_deliveries", "Webhook deliveries by state.", labels=["state"]
            )
            for state, n in sorted(self.state.store.deliveries.counts().items()):
                backlog.add_metric([state], n)
            yield backlog

    def _jobs(self) -> Iterator[Metric]:
        views = self.state.store.views
        jobs = GaugeMetricFamily(
            "thresher_jobs", "Jobs in the store, by tenant and state.", labels=["tenant", "state"]
        )
        counts = views.job_counts_by_tenant(self.tenant)
        for tenant in sorted({t for t, _ in counts} | ({self.tenant} if self.tenant else set())):
            for s in JobState:
                jobs.add_metric([tenant, s.value], counts.get((tenant, s.value), 0))
        yield jobs
        totals = views.done_row_totals(self.tenant)
        for index, (name, what) in enumerate(
            (("rows_in", "read"), ("rows_out", "written"), ("rows_error", "sent to error files"))
        ):
            family = CounterMetricFamily(f"thresher_{name}", f"Rows {what}.", labels=["tenant"])
            for tenant, rows in sorted(totals.items()):
                family.add_metric([tenant], rows[index])
            yield family
        rates = GaugeMetricFamily(
            "thresher_job_rows_per_second",
            "Rows per second of each running job (committed shards since its first start).",
            labels=["job_id", "tenant"],
        )
        clock = datetime.now(UTC)
        for job_id, tenant, started, rows_in in views.running_job_progress(self.tenant):
            seconds = (clock - datetime.fromisoformat(started)).total_seconds()
            rates.add_metric([job_id, tenant], rows_in / seconds if seconds > 0 else 0.0)
        yield rates

    def _shards(self) -> Metric:
        family = HistogramMetricFamily(
            "thresher_shard_seconds", "How long committed shards ran.", labels=["tenant"]
        )
        for tenant, (counts, total, summed) in sorted(
            self.state.store.views.shard_seconds(SHARD_BOUNDS, self.tenant).items()
        ):
            buckets = [(f"{b:g}", c) for b, c in zip(SHARD_BOUNDS, counts, strict=True)]
            family.add_metric([tenant], [*buckets, ("+Inf", total)], summed)
        return family

    def _schedules_and_triggers(self) -> Iterator[Metric]:
        from thresher.service.schedules import every_schedule
        from thresher.service.triggers import every_trigger

        state, tenant = self.state, self.tenant
        counts = state.store.ticks.counts()
        if tenant is not None:
            mine = {s.key for s in every_schedule(state.config, state.store, tenant=tenant)}
            counts = {
                k: n for k, n in counts.items() if k[0] in mine or k[0].startswith(f"{tenant}/")
            }
        ticks = CounterMetricFamily(
            "thresher_ticks",
            "Schedule ticks, by schedule and outcome.",
            labels=["schedule", "outcome"],
        )
        for (schedule, outcome), count in sorted(counts.items()):
            ticks.add_metric([schedule, outcome], count)
        yield ticks
        seen = state.store.triggers.files_seen()
        files = CounterMetricFamily(
            "thresher_trigger_files_seen", "Files taken by each trigger.", labels=["trigger"]
        )
        for watched in every_trigger(state.config, state.store, tenant=tenant):
            files.add_metric([watched.key], seen.get(watched.key, 0))
        yield files

    def _queue_and_slots(self) -> Iterator[Metric]:
        """Waiting jobs and slots in use: a tenant's own, and the slots free here only for
        the whole host's view (free slots are the capacity less every tenant's use)."""
        state, tenant = self.state, self.tenant
        queue = GaugeMetricFamily(
            "thresher_queue_length", "Jobs waiting (queued or preempted).", labels=["priority"]
        )
        for priority, n in state.store.queue.waiting_by_priority(tenant).items():
            queue.add_metric([str(priority)], n)
        yield queue
        used, capacity = state.store.leases.used(tenant=tenant), state.config.capacity
        for kind, held, total in (("cpu", used.cpu, capacity.cpu), ("gpu", used.gpu, capacity.gpu)):
            yield GaugeMetricFamily(
                f"thresher_{kind}_slots_used", f"{kind} slots leased here.", value=held
            )
            if tenant is None:
                free = max(0, total - held)
                yield GaugeMetricFamily(
                    f"thresher_{kind}_slots_free", f"{kind} slots free here.", value=free
                )
