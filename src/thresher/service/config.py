"""The server's config file (`thresher serve --config server.toml`).

```toml
data_dir = "/var/lib/thresher"          # uploads/ and outputs/<job id>/ live here
allowed_roots = ["/srv/shared-data"]    # server-side inputs a job may name (default: none)
max_upload_bytes = 1073741824           # 1 GiB
max_request_bytes = 1048576             # a JSON body: 1 MiB
body_timeout = 30                       # seconds a body may take, plus 1 s per
body_min_rate = 16384                   # body_min_rate bytes it brings (slow clients: 408)
max_concurrent_jobs = 2                 # an upper bound beside the slots
min_run_seconds = 30                    # a job is not preempted again sooner
metrics_operators = ["ops"]             # tenants whose tokens see every tenant's /metrics

[models.churn]                          # tenants pick models by these names only
kind = "sklearn"
uri = "models/churn.skops"              # relative paths: against this file's folder

[run]                                   # the [run] section every job gets
workers = 2

[buffer.churn]                          # request buffer for model "churn"
max_records = 1000
max_wait = 300

[capacity]                              # this machine's slots (defaults: cores, GPUs)
cpu = 8
gpu = 0

[tenant_defaults]                       # every tenant's limits (these are the defaults)
schedules = 100                         # its own schedules
triggers = 20                           # its own triggers
trigger_min_poll_seconds = 1            # the shortest poll_seconds of its triggers
webhook_endpoints = 20
batches_in_flight = 100                 # batches not yet ended
stored_bytes = 107374182400             # its uploads and batch results: 100 GiB
requests_per_second = 200               # each of its tokens, in bursts of
requests_burst = 1000                   # at most this many (429, Retry-After)

[tenants.acme]                          # one tenant's limits, in place of the defaults
max_priority = 5                        # these have no default: no limit unless given
concurrent_jobs = 2
queued_jobs = 20
worker_slots = 4
rows_per_day = 10000000
schedules = 500
```

Tenants never name code or paths of their own: the model sections, the `[run]` section
and where outputs go all come from here.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from thresher.errors import ThresherError, describe_errors
from thresher.places import resolve_option_uris, resolve_uri
from thresher.plan.devices import visible_gpus
from thresher.schedules.settings import ScheduleSettings, valid_name
from thresher.spec import ModelSection, RunSection
from thresher.triggers.settings import TriggerSettings
from thresher.triggers.tables import WATCHES

SECRET_FILE = "webhook_secret"


class ConfigError(ThresherError):
    """A server config that cannot be used, with one message per problem."""

    stage = "config"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid server config:\n" + "\n".join(f"  {p}" for p in problems))


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/thresher/service` (`~/.local/share/thresher/service`)."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "thresher" / "service"


class BufferSettings(BaseModel):
    """When the request buffer of one model starts a batch job."""

    model_config = ConfigDict(extra="forbid")

    max_records: int = Field(default=1000, ge=1)
    max_wait: float = Field(default=300.0, gt=0)  # seconds the oldest record may wait


class CapacitySettings(BaseModel):
    """This machine's slots, shared by every job (and every server on this host)."""

    model_config = ConfigDict(extra="forbid")

    cpu: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)  # worker slots
    gpu: int = Field(default_factory=lambda: len(visible_gpus()), ge=0)
    # A job asking for more than is free starts with what is free, down to this many.
    min_workers: int = Field(default=1, ge=1)


class TenantLimits(BaseModel):
    """What one tenant may use. `[tenant_defaults]` sets every tenant's limits and
    `[tenants.NAME]` any of them for one tenant; a limit neither gives has the default
    here: none for the job limits, a bound for what a tenant makes and keeps (each
    refusal is a 429 naming the limit and its value: `service/policies/quotas.py`)."""

    model_config = ConfigDict(extra="forbid")

    max_priority: int | None = None  # the highest `priority` its jobs may ask for
    concurrent_jobs: int | None = Field(default=None, ge=1)  # running at once
    queued_jobs: int | None = Field(default=None, ge=0)  # waiting at once
    worker_slots: int | None = Field(default=None, ge=1)  # held by its jobs in all
    rows_per_day: int | None = Field(default=None, ge=1)  # read by its jobs in 24 h
    # What it makes over HTTP: each is state the server's loops go through.
    schedules: int = Field(default=100, ge=0)  # its own, in /v1/schedules
    triggers: int = Field(default=20, ge=0)  # its own, in /v1/triggers
    trigger_min_poll_seconds: float = Field(default=1.0, ge=0.05)  # the shortest poll
    webhook_endpoints: int = Field(default=20, ge=0)
    batches_in_flight: int = Field(default=100, ge=0)  # not yet ended
    # Bytes of its files in `data_dir/uploads` (uploads and batch results): an upload
    # that would pass it is refused (a batch's results are kept, and count).
    stored_bytes: int = Field(default=100 * 1024**3, ge=0)
    # Each of its tokens' requests: a bucket of `requests_burst`, refilled at this rate
    # (`service/policies/rates.py`); past it, 429 with Retry-After.
    requests_per_second: float = Field(default=200.0, gt=0)
    requests_burst: int = Field(default=1000, ge=1)


class ServerConfig(BaseModel):
    """Everything `thresher serve` is told in its config file; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
    models: dict[str, ModelSection] = Field(default_factory=dict)
    allowed_roots: list[str] = Field(default_factory=list)
    max_upload_bytes: int = Field(default=1024**3, ge=1)
    max_request_bytes: int = Field(default=1024**2, ge=1024)
    body_timeout: float = Field(default=30.0, gt=0)
    body_min_rate: float = Field(default=16 * 1024, gt=0)
    max_concurrent_jobs: int = Field(default=1, ge=1)
    # /metrics: with a token, a tenant sees its own jobs and these tenants see all;
    # `metrics_public = true` shows all to anyone, with no token.
    metrics_public: StrictBool = False
    metrics_operators: list[str] = Field(default_factory=list)
    webhook_allow_private: StrictBool = False
    # A webhook attempt's wall-clock limit, all of it (connect, send, the answer's
    # headers, however slowly a receiver drips them), and the delivery threads: at most
    # `webhook_workers_per_tenant` of them hold one tenant's deliveries at once, so a
    # tenant's slow receiver delays only its own webhooks.
    webhook_timeout: float = Field(default=10.0, gt=0, le=300)
    webhook_workers: int = Field(default=8, ge=1, le=256)
    webhook_workers_per_tenant: int = Field(default=2, ge=1)
    # A failed webhook is tried again for this long from its event, waiting from
    # `webhook_retry_first` seconds, doubling (with jitter) up to `webhook_retry_longest`.
    webhook_retry_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    webhook_retry_first: float = Field(default=1.0, gt=0, le=3600)
    webhook_retry_longest: float = Field(default=3600.0, gt=0, le=24 * 3600)
    docs: StrictBool = False  # serve /docs (Swagger UI, whose page loads from a CDN)
    # The HMAC key webhooks are signed with; `load_config` always fills it in (generated
    # once and kept in `data_dir/webhook_secret` when the file does not give one).
    webhook_secret: str | None = None
    buffer: dict[str, BufferSettings] = Field(default_factory=dict)
    run: RunSection = Field(default_factory=RunSection)
    schedules: dict[str, ScheduleSettings] = Field(default_factory=dict)
    # OpenAI-style batches: the most request lines and bytes one file may hold (OpenAI's
    # own limits), and the `completion_window`s a batch may ask for (a batch not done by
    # then expires).
    batch_max_requests: int = Field(default=50_000, ge=1)
    batch_max_bytes: int = Field(default=200 * 1024**2, ge=1)
    batch_completion_windows: list[str] = Field(default_factory=lambda: ["24h"])
    # A tenant's file the server parses itself (a part of actuals) is read in a child
    # process, and refused (413) past this many rows or decompressed bytes: a 19 KB gzip
    # can hold five million rows.
    upload_max_rows: int = Field(default=5_000_000, ge=1)
    upload_max_decompressed_bytes: int = Field(default=1024**3, ge=1)
    triggers: dict[str, TriggerSettings] = Field(default_factory=dict)
    capacity: CapacitySettings = Field(default_factory=CapacitySettings)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)
    tenant_defaults: TenantLimits = Field(default_factory=TenantLimits)
    # A job is not preempted again within this many seconds of (re)starting, so two
    # jobs cannot take turns preempting each other without doing any work.
    min_run_seconds: float = Field(default=30.0, ge=0)
    # A server on another host whose heartbeat is this many seconds old is dead: its
    # running jobs are resumed, its tick claims taken over, its slot leases reclaimed.
    owner_timeout: float = Field(default=60.0, gt=0)
    # A background loop quarantines one tenant's object (a schedule or trigger paused, a
    # batch failed, a delivery given up) after it failed this many passes in a row.
    quarantine_after: int = Field(default=5, ge=1)

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits: `[tenant_defaults]`, with what its own `[tenants.NAME]`
        section gives in their place."""
        own = self.tenants.get(tenant)
        if own is None:
            return self.tenant_defaults
        return self.tenant_defaults.model_copy(update=own.model_dump(exclude_unset=True))

    @field_validator("schedules")
    @classmethod
    def _schedule_names(cls, schedules: dict[str, ScheduleSettings]) -> dict[str, ScheduleSettings]:
        for name in schedules:
            valid_name(name)
        return schedules

    @field_validator("models", "triggers")
    @classmethod
    def _names(cls, named: dict[str, object]) -> dict[str, object]:
        for name in named:
            if not name or not all(c.isalnum() or c in "-_." for c in name):
                raise ValueError(f"names are letters, digits, '-', '_', '.'; not {name!r}")
        return named


def load_config(path: Path | None = None) -> ServerConfig:
    """The config a server runs on: `read_config`, then `prepare`d (`data_dir` created,
    `webhook_secret` filled in). Only `thresher serve` and the commands that act for it
    load; commands that only look `read_config`."""
    return prepare(read_config(path))


def read_config(path: Path | None = None) -> ServerConfig:
    """Read and validate a server config (TOML); relative paths are resolved against the
    file's folder. With no file, the defaults (no models, nothing readable server-side).
    Writes nothing. Raises ConfigError naming each bad key."""
    raw: dict[str, object] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError([f"{path}: {exc}"]) from exc
        _resolve_paths(raw, path.parent)
    try:
        return ServerConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(
            [f"{path or 'config'}: {p}" for p in describe_errors(exc, ServerConfig)]
        ) from None


def check_models(config: ServerConfig) -> None:
    """Refuse a config with a registered model that cannot load: an unknown kind, a
    loader module or a model file that is not there. ConfigError names
    `models.<name>.<field>` for each, so `thresher serve` never starts without one."""
    from thresher.models import check_model_section

    problems = [
        f"models.{name}.{problem.removeprefix('model.')}"
        for name, model in config.models.items()
        for problem in check_model_section(model)
    ]
    if problems:
        raise ConfigError(problems)


def prepare(config: ServerConfig) -> ServerConfig:
    """The config with `data_dir` created (absolute; readable by this user only, when it is
    made here) and `webhook_secret` filled in."""
    data_dir = config.data_dir.expanduser().absolute()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # tenants' files: ours alone
    secret = config.webhook_secret or _stored_secret(data_dir / SECRET_FILE)
    return config.model_copy(update={"data_dir": data_dir, "webhook_secret": secret})


def _stored_secret(path: Path) -> str:
    """The secret kept in `path`, created (readable by this user only) on first use."""
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    secret = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secret)
    return secret


def _resolve_paths(raw: dict[str, object], base: Path) -> None:
    if isinstance(raw.get("data_dir"), str):
        raw["data_dir"] = resolve_uri(str(raw["data_dir"]), base)
    roots = raw.get("allowed_roots")
    if isinstance(roots, list):
        raw["allowed_roots"] = [resolve_uri(r, base) if isinstance(r, str) else r for r in roots]
    triggers = raw.get("triggers")
    for section in triggers.values() if isinstance(triggers, dict) else ():
        if isinstance(section, dict):
            _resolve_watch(section, base)
    models = raw.get("models")
    if isinstance(models, dict):
        for section in models.values():
            if isinstance(section, dict) and isinstance(section.get("uri"), str):
                section["uri"] = resolve_uri(section["uri"], base)
    schedules = raw.get("schedules")
    for section in schedules.values() if isinstance(schedules, dict) else ():
        job = section.get("job") if isinstance(section, dict) else None
        source = job.get("source") if isinstance(job, dict) else None
        if isinstance(source, dict):
            _resolve_source(source, base)


def _resolve_watch(trigger: dict[str, object], base: Path) -> None:
    """A trigger's `watch` against the config's folder when it is a path (a folder, a
    Delta table); an Iceberg table's `watch` is its name in a catalog, left as it is."""
    table = WATCHES.get(str(trigger.get("table")))
    if isinstance(trigger.get("watch"), str) and (table is None or table.is_path):
        trigger["watch"] = resolve_uri(str(trigger["watch"]), base)


def _resolve_source(source: dict[str, object], base: Path) -> None:
    """A schedule's job's `source.uri` (`{date}` and all) and its options' uris (a
    features source's tables), as a job spec's are against the spec's folder."""
    if isinstance(source.get("uri"), str):
        source["uri"] = resolve_uri(str(source["uri"]), base)
    options = source.get("options")
    if isinstance(options, dict):
        resolve_option_uris(options, base)
