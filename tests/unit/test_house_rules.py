"""The house rules, checked: small modules and functions, no import circles, pinned public
names, docstring examples that run."""

from __future__ import annotations

import ast
import doctest
import importlib
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import thresher

SRC = Path(thresher.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def test_no_module_over_400_lines() -> None:
    long = {n: c for n, p in modules() if (c := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_50_lines() -> None:
    long = {}
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def imports_of(name: str, path: Path) -> set[str]:
    """The thresher modules `name` imports anywhere: at the top, inside a function (where a
    circle only hides until the function runs) and under TYPE_CHECKING (where it hides
    from the interpreter, not from the reader: the two modules still need each other)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("thresher")}


def test_no_import_circles() -> None:
    known = dict(modules())
    graph = {
        name: {m for m in imports_of(name, path) if m in known and m != name}
        for name, path in known.items()
    }
    # A package's __init__ importing its own submodules is how a package is made; a
    # circle through it is still a circle between the submodules, so keep those edges.
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


MAX_ARROWS_UP = 2


def package_of(module: str) -> str:
    """The room a module stands in: its top-level package or root module (`store` for
    `thresher.store._jobs`, `spec` for `thresher.spec`; `thresher` for the face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_arrows() -> dict[tuple[str, str], set[str]]:
    """Each arrow between two rooms, (A, B), with the modules of A that import B (any
    import, as `imports_of` counts them)."""
    known = dict(modules())
    arrows: dict[tuple[str, str], set[str]] = {}
    for name, path in known.items():
        for imported in imports_of(name, path) & known.keys():
            if package_of(imported) != package_of(name):
                arrows.setdefault((package_of(name), package_of(imported)), set()).add(name)
    return arrows


def _reaches(arrows: Iterable[tuple[str, str]], start: str, goal: str) -> bool:
    ahead: dict[str, set[str]] = {}
    for a, b in arrows:
        ahead.setdefault(a, set()).add(b)
    seen, todo = set(), [start]
    while todo:
        room = todo.pop()
        if room == goal:
            return True
        if room not in seen:
            seen.add(room)
            todo.extend(ahead.get(room, ()))
    return False


def _has_circle(arrows: set[tuple[str, str]]) -> bool:
    return any(_reaches(arrows, b, a) for a, b in arrows)


def test_at_most_two_arrows_run_back_up() -> None:
    """Stack the rooms (packages and root modules) in floors, each above what it imports,
    and an arrow of a circle of rooms must run back up. However they are stacked, at least
    as many run up as the fewest arrows whose removal leaves no circle: that number is at
    most MAX_ARROWS_UP. (`farm-studio look` counts the arrows up its own floor plan draws,
    benchmarks/ and scripts/ included.)"""
    arrows = package_arrows()
    looped = [arrow for arrow in arrows if _reaches(arrows, arrow[1], arrow[0])]
    for count in range(MAX_ARROWS_UP + 1):
        for cut in itertools.combinations(looped, count):
            if not _has_circle(set(arrows) - set(cut)):
                return
    shown = [f"  {a} -> {b}: {', '.join(sorted(arrows[a, b]))}" for a, b in sorted(looped)]
    pytest.fail(
        f"more than {MAX_ARROWS_UP} arrows must run back up; the arrows in circles of rooms:\n"
        + "\n".join(shown)
    )


# Modules third parties import from, pinned like the packages.
PUBLIC_MODULES = ["thresher.plugins", "thresher.testing"]


def packages() -> list[str]:
    return [n for n, p in modules() if p.name == "__init__.py"] + PUBLIC_MODULES


@pytest.mark.parametrize("package", packages())
def test_every_package_declares_its_public_names(package: str) -> None:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    assert names is not None, f"{package} has no __all__"
    assert names == sorted(names), f"{package}.__all__ is not sorted"
    assert PUBLIC[package] == names, f"{package}.__all__ changed: update PUBLIC on purpose"


PUBLIC: dict[str, list[str]] = {
    "thresher": [
        "BadInputError",
        "JobFailed",
        "JobResult",
        "JobSpec",
        "ModelLoadError",
        "ModelOutputError",
        "MonitorError",
        "SinkError",
        "SourceError",
        "SpecError",
        "ThresherError",
        "add_actuals",
        "approve",
        "drift",
        "load_spec",
        "parse_spec",
        "predict",
        "profile",
        "quality",
        "reject",
        "resume",
        "run",
    ],
    "thresher.cli": ["cli", "main"],
    "thresher.cli.views": [],
    "thresher.coordinator": [
        "JobResult",
        "commit_retry_shard",
        "commit_shard",
        "new_job_id",
        "resume_job",
        "retry_errors",
        "run_job",
    ],
    "thresher.executors": ["Executor", "make_executor"],
    "thresher.models": [
        "ADAPTERS",
        "LoadContext",
        "Model",
        "ModelLoader",
        "check_model_section",
        "load_model",
        "model_fingerprint",
    ],
    "thresher.models.llm": ["load_llm"],
    "thresher.monitor": [
        "Change",
        "ColumnDrift",
        "ColumnProfile",
        "DriftReport",
        "Moments",
        "MonitorSection",
        "Profile",
        "SegmentDrift",
        "Share",
        "Thresholds",
        "compare_profiles",
    ],
    "thresher.plugins": [
        "BUILTINS",
        "ENTRY_POINT_GROUP",
        "Kind",
        "ModelUri",
        "NoOptions",
        "Options",
        "Plugin",
        "PluginError",
        "check_plugin",
        "check_sink_mode",
        "completion_hooks",
        "default_sink_format",
        "find",
        "is_class_uri",
        "lookup",
        "names",
        "option_problems",
        "registry",
    ],
    "thresher.testing": [
        "ContractError",
        "MemorySink",
        "check_model",
        "check_sink",
        "check_source",
        "in_process_executor",
        "memory_sink",
    ],
    "thresher.notify": [
        "SECRET_VARIABLE",
        "check_notify",
        "check_webhook_url",
        "notify_job_end",
        "signed_headers",
        "standard_secret",
        "verify_signature",
    ],
    "thresher.profiles": [],
    "thresher.plan": [
        "Placement",
        "check_features",
        "known_rows",
        "measurable",
        "place",
        "plan_input",
        "plan_placement",
        "worker_slots",
    ],
    "thresher.service": [],
    "thresher.service.background": [],
    "thresher.service.policies": [],
    "thresher.openai": [],
    "thresher.service.openai": [],
    "thresher.service.routers": [],
    "thresher.service.ui": ["STATIC", "router"],
    "thresher.sinks": ["PartLayout", "PartTarget", "PartWriter", "Sink", "StagedPart", "open_sink"],
    "thresher.sources": [
        "Chunk",
        "Plan",
        "Shard",
        "ShardReader",
        "Source",
        "feature_columns",
        "open_source",
        "tell_published",
    ],
    "thresher.schedules": ["Catchup", "Cron", "CronError", "TickFate", "due_ticks"],
    "thresher.triggers": [
        "FileSeen",
        "FileSet",
        "Settling",
        "TriggerSettings",
        "candidates",
        "complete_sets",
        "file_digest",
        "list_watch",
    ],
    "thresher.store": [
        "AtLimit",
        "BackfillRow",
        "BackfillState",
        "BatchRow",
        "BatchStatus",
        "BufferedRequest",
        "DeliveryState",
        "DuplicateRequest",
        "EndpointRow",
        "FileRecord",
        "IdempotencyConflict",
        "JobRecord",
        "JobState",
        "Lease",
        "NewPart",
        "PartRecord",
        "PredictionInfo",
        "RequestState",
        "RetryShard",
        "RetryShardState",
        "RunningJob",
        "ScheduleExists",
        "ScheduleRow",
        "SetOutcome",
        "ShardRecord",
        "ShardState",
        "SlotRequest",
        "Slots",
        "Store",
        "StoreError",
        "TakenFile",
        "Tick",
        "TickLedger",
        "TickOutcome",
        "Totals",
        "TriggerDefRow",
        "TriggerExists",
        "TriggerLedger",
        "WaitingGroup",
        "WaitingJob",
        "beat_seconds",
        "beating",
        "default_store_url",
        "keep_beating",
        "now",
        "open_store",
        "owner_host",
        "read_store",
        "retry_lease",
        "schedule_key",
        "set_job_key",
        "this_host",
        "this_owner",
        "tick_key",
    ],
    "thresher.trees": [],
    "thresher.inmemory": [],
    "thresher.integrations": [],
    "thresher.media": ["IMAGE_KINDS", "sniff"],
    "thresher.worker": ["run_shard", "run_task"],
}


@pytest.mark.parametrize("name", [n for n, p in modules() if ">>>" in p.read_text()])
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} docstring example(s) failed"


def test_no_sql_against_the_stores_tables_outside_store() -> None:
    """The store owns its tables: no statement outside `store/` reads or writes one (a
    table's name after FROM, JOIN, INTO, UPDATE or TABLE; metric names and prose that
    mention a table are not SQL)."""
    import re

    from thresher.store import _schema as schema

    created = re.compile(r"CREATE TABLE IF NOT EXISTS (thresher_\w+)")
    tables = {m for step in schema.MIGRATIONS for s in step for m in created.findall(s)}
    assert "thresher_jobs" in tables  # the pattern finds them
    named = re.compile(
        r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(" + "|".join(sorted(tables)) + r")\b", re.I
    )
    outside = {
        name: sorted(set(named.findall(path.read_text())))
        for name, path in modules()
        if not name.startswith("thresher.store") and named.search(path.read_text())
    }
    assert outside == {}, f"the store's tables named outside store/: {outside}"
