"""One shape of store access: every table hangs off `Store` (`store.batches`, `store.ticks`,
...), and what lies outside `store/` imports `thresher.store` alone, never one of its
private submodules, nor builds a table by hand around `store.db`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from thresher.store import Store, open_store

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "src" / "thresher" / "store"


def outside_store() -> Iterator[Path]:
    for folder in (ROOT / "src", ROOT / "benchmarks"):
        for path in sorted(folder.rglob("*.py")):
            if STORE not in path.parents:
                yield path


def submodules_imported(tree: ast.AST) -> list[str]:
    """`thresher.store.<x>` named by an import, or `_x` imported from `thresher.store`."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("thresher.store.")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("thresher.store."):
                found.append(node.module)
            elif node.module == "thresher.store":
                found += [f"thresher.store.{a.name}" for a in node.names if a.name[0] == "_"]
    return found


def test_nothing_outside_store_imports_a_store_submodule() -> None:
    imported = {
        str(path.relative_to(ROOT)): names
        for path in outside_store()
        if (names := submodules_imported(ast.parse(path.read_text())))
    }
    assert imported == {}, f"import thresher.store's public names instead: {imported}"


def test_the_check_sees_a_submodule_import() -> None:
    code = "from thresher.store.db import now\nimport thresher.store.jobs\n"
    code += "from thresher.store import _schema, Store\n"
    assert submodules_imported(ast.parse(code)) == [
        "thresher.store.db",
        "thresher.store.jobs",
        "thresher.store._schema",
    ]


HAND_BUILT = re.compile(r"\b[A-Z]\w*\(\s*[\w.]*\bstore\.db\s*\)")


def test_no_table_is_built_by_hand_around_store_db() -> None:
    assert HAND_BUILT.search("ledger = TickLedger(state.store.db)")  # the pattern finds one
    built = {
        str(path.relative_to(ROOT)): HAND_BUILT.findall(path.read_text())
        for path in outside_store()
        if HAND_BUILT.search(path.read_text())
    }
    assert built == {}, f"use the Store's attribute (store.ticks, ...) instead: {built}"


@pytest.mark.parametrize(
    "name",
    [
        "actuals",
        "announced",
        "batches",
        "deliveries",
        "files",
        "leases",
        "owners",
        "profiles",
        "queue",
        "requests",
        "retries",
        "schedules",
        "ticks",
        "tokens",
        "trigger_defs",
        "triggers",
        "views",
        "webhook_endpoints",
    ],
)
def test_every_table_hangs_off_the_store(tmp_path: Path, name: str) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    table = getattr(store, name)
    assert isinstance(store, Store) and table.db is store.db
