"""The Ray cluster a server keeps for its jobs.

A server whose `[run]` says `executor = "ray"` with no `address` used to have each job
start a Ray of its own and stop it at the end: ~4 s to start and ~1.4 s to stop on this
kind of machine, for every job, and two jobs at once ran two clusters on one machine.
Now the server starts one local Ray when it starts, and its job processes join it (the
address reaches them in `THRESHER_RAY_ADDRESS`, which the fork server they come from
inherits): joining takes a third of a second. The cluster's processes share the server's
fate (Ray ties a local cluster to the process that started it), so a server that is
killed leaves no Ray behind.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from thresher.executors.ray_pool import CLUSTER_VARIABLE, import_ray
from thresher.spec import RunSection

log = logging.getLogger("thresher.service.ray_cluster")


def keep_ray_cluster(run: RunSection, cpus: int) -> Callable[[], None]:
    """Start the server's Ray of `cpus` CPUs if its jobs run on a local Ray; returns its
    stop (nothing to stop for jobs on the local executor or on a cluster of their own)."""
    if run.executor != "ray" or run.address:
        return lambda: None
    ray = import_ray()
    context = ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    address = context.address_info["gcs_address"]
    os.environ[CLUSTER_VARIABLE] = address
    log.info("Ray for this server's jobs: %s, %d CPUs", address, cpus)

    def stop() -> None:
        os.environ.pop(CLUSTER_VARIABLE, None)
        ray.shutdown()

    return stop
