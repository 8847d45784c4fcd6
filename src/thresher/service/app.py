"""The HTTP service: `create_app(state)` puts the routers together, and `serve()` runs it
under uvicorn (`thresher serve`).

While the app runs, background threads do the work: the scheduler (queued jobs, and jobs
a dead server left running), the request buffer's flusher, and the webhook sender. They
start with the app and stop with it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from thresher.service import submission, ui
from thresher.service.background.backfiller import start_backfiller
from thresher.service.background.batches import start_batches
from thresher.service.background.buffer import router as buffer_router
from thresher.service.background.buffer import start_flusher
from thresher.service.background.scheduler import Scheduler
from thresher.service.background.ticker import start_ticker
from thresher.service.background.watcher import start_watcher
from thresher.service.background.webhooks import start_webhooks
from thresher.service.config import check_models, load_config
from thresher.service.errors import ServiceError, as_response
from thresher.service.limits import BodyLimits, Pace, invalid_request
from thresher.service.logs import RequestLog, configure
from thresher.service.openai.envelope import envelope, is_openai_path, openai_status
from thresher.service.policies.disclosure import public_detail
from thresher.service.ray_cluster import keep_ray_cluster
from thresher.service.routers import (
    backfills,
    batches,
    deliveries,
    drift,
    embeddings,
    files,
    jobs,
    metrics,
    models,
    profiles,
    quality,
    schedules,
    triggers,
    webhook_endpoints,
)
from thresher.service.schedules import check_schedules
from thresher.service.state import ServiceState
from thresher.service.triggers import check_triggers
from thresher.store import beat_seconds, keep_beating, open_store, this_owner

log = logging.getLogger("thresher.service")

DESCRIPTION = """Batch inference over HTTP: upload a file (or name a server-side path under
the server's allowed roots), submit a job that runs a model registered on the server, poll
its status, and download its results and its bad records. Producers can also post single
records to the request buffer, which runs them in batches. Every `/v1` route needs
`Authorization: Bearer <token>` (`thresher token create --tenant NAME`), and a tenant sees
only its own files, jobs and requests."""


# The route modules, one per resource (`routers/`).
RESOURCES = (
    models,
    files,
    jobs,
    profiles,
    drift,
    quality,
    batches,
    webhook_endpoints,
    embeddings,
    schedules,
    backfills,
    triggers,
    deliveries,
)


def create_app(state: ServiceState, background: bool = True) -> FastAPI:
    """The service's FastAPI app over `state`. With `background`, the scheduler, request
    buffer and webhook sender run while the app does."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stops = start_background(state) if background else []
        try:
            yield
        finally:
            for stop in reversed(stops):
                stop()
            encoders = getattr(app.state, "encoders", None)
            if encoders is not None:
                encoders.close()

    app = FastAPI(
        title="thresher",
        summary="Batch inference, exactly once per record.",
        description=DESCRIPTION,
        version=_version(),
        lifespan=lifespan,
        # Swagger UI and ReDoc load their pages from a CDN; /openapi.json is served here.
        docs_url="/docs" if state.config.docs else None,
        redoc_url=None,
    )
    app.state.service = state
    app.add_exception_handler(ServiceError, _service_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)
    config = state.config
    app.add_middleware(
        BodyLimits,
        max_bytes=config.max_request_bytes,
        pace=Pace(config.body_timeout, config.body_min_rate),
        streamed={("POST", "/v1/files")},  # the upload route streams to disk, paced itself
    )
    app.add_middleware(RequestLog)  # outermost: every answer, refusals too, is logged
    app.include_router(ui.router)
    app.mount("/ui/static", StaticFiles(directory=ui.STATIC), name="ui-static")
    for router in (*(r.router for r in RESOURCES), buffer_router, metrics.router):
        app.include_router(router)
    return app


def start_background(state: ServiceState) -> list[Callable[[], None]]:
    """Start the webhook sender, the request buffer, the batch worker, the scheduler, the
    ticker, the backfiller and the trigger watcher (in that order, so every
    `on_job_finished` hook is in place before a job can end), after the server's first
    heartbeat (before it owns anything) and the Ray its jobs run on, if they do; returns
    their stops."""
    stops = [start_heartbeat(state)]
    # Before the scheduler starts the fork server, whose job processes must know it.
    stops.append(keep_ray_cluster(state.config.run, state.config.capacity.cpu))
    stops += [start_webhooks(state), start_flusher(state), start_batches(state)]
    scheduler = Scheduler(state)
    scheduler.start()
    stops.append(scheduler.stop)

    def submit(tenant: str, body: dict[str, object], key: str, tick: tuple[str, datetime]) -> str:
        return submission.submit_job(state, tenant, body, key, tick)

    def submit_set(tenant: str, body: dict[str, object], key: str) -> str:
        return submission.submit_job(state, tenant, body, key)

    stops.append(start_ticker(state, submit))
    stops.append(start_backfiller(state, submit))
    stops.append(start_watcher(state, submit_set))
    return stops


def start_heartbeat(state: ServiceState) -> Callable[[], None]:
    """Judge other servers by the config's `owner_timeout`, and beat this one's heartbeat
    four times per timeout (at least every `BEAT_SECONDS`); returns its stop. Stopping
    does not remove the row: the server's job processes may still be ending, so peers
    take its jobs over only once the row is `owner_timeout` old."""
    timeout = state.config.owner_timeout
    state.store.owners.timeout = timeout
    return keep_beating(state.store.url, this_owner(), beat_seconds(timeout), state.loops)


async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    # Whatever raised it, a refusal names no server path (`policies/disclosure.py`).
    detail = public_detail(request.app.state.service, exc.detail)
    return _for_openai(request, as_response(exc, detail), detail)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    response = await invalid_request(request, exc)
    return _for_openai(request, response, json.loads(bytes(response.body))["detail"])


def _for_openai(request: Request, response: JSONResponse, detail: Any) -> JSONResponse:
    """On the paths OpenAI's clients call, the answer in OpenAI's envelope too."""
    path = request.url.path
    if not is_openai_path(path):
        return response
    status = openai_status(path, response.status_code)
    error, headers = envelope(detail, status)
    return JSONResponse(
        {"error": error, "detail": detail},
        status_code=status,
        headers={**_kept(response), **headers},
    )


def _kept(response: JSONResponse) -> dict[str, str]:
    """The headers of a refusal worth keeping (Retry-After, Connection), not its length."""
    return {k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "connection")}


def build_state(store_url: str | None, config_file: Path | None) -> ServiceState:
    """The state `thresher serve` runs on: the config file read, every registered model
    checked (ConfigError naming `models.<name>.<field>` for one that cannot load), the
    store opened. A trigger that would not run is refused too (`triggers.<name>.<field>`);
    one whose pattern matches nothing yet is only warned about."""
    config = load_config(config_file)
    check_models(config)
    check_schedules(config)  # after the models: a schedule names one
    for warning in check_triggers(config):
        log.warning("%s", warning)
    if not config.models:  # it would start, and refuse every job and batch: say why now
        log.warning(
            "no models are registered: every job, batch and embedding request will be"
            " refused until the config names one ([models.NAME] in --config%s)",
            f" {config_file}" if config_file else ": none was given",
        )
    return ServiceState(store=open_store(store_url), config=config, data_dir=config.data_dir)


def log_to_stderr(log_format: str = "text", log_level: str = "info") -> None:
    """The server's log lines on stderr as `log_format` (`service/logs.py`); `thresher
    serve` calls it before `build_state`, so what the start warns about reads as a
    WARNING line too."""
    configure(log_format, log_level)  # type: ignore[arg-type]


def serve(state: ServiceState, host: str, port: int, log_level: str = "info") -> None:
    """Run the service on `host:port` until interrupted. Every file the server and its
    workers create from here on — uploads, buffered batches, outputs — is readable by the
    server's user alone: tenants' data is nobody else's on this machine. Log lines go
    where `log_to_stderr` sent them, uvicorn's own among them."""
    import uvicorn

    os.umask(0o077)
    app = create_app(state)
    # log_config=None: uvicorn keeps the handlers log_to_stderr set; its access log is ours
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, log_config=None)


def _version() -> str:
    from thresher import __version__

    return __version__
