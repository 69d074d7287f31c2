"""The engine is the ledger's only writer (DESIGN 6): no SQL text in the production Python of the
budget service inserts, updates or deletes rows of the run, hold, pool, ledger or event tables,
or locks runs or pool rows itself; it calls the engine's functions (store/functions/) instead,
which hold the one canonical lock order."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import budget_service

PACKAGE = Path(budget_service.__file__).parent
TABLES = r"budget\.(?:runs|holds|pool_balances|ledger|events|pool_events)\b"
WRITE = re.compile(rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{TABLES}", re.IGNORECASE)
LOCK = re.compile(rf"\bFROM\s+{TABLES}[^;]*\bFOR\s+(?:NO\s+KEY\s+)?UPDATE\b", re.IGNORECASE | re.S)


def sql_texts(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a module, f-strings with their literal parts joined (a
    placeholder reads as a space, so a table name cannot hide behind one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            parts = [
                p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else " "
                for p in node.values
            ]
            found.append((node.lineno, "".join(parts)))
    return found


def offending(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {match.group(0)!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in sql_texts(path)
        for match in [pattern.search(text)]
        if match is not None
    ]


def test_no_production_python_writes_budget_rows_except_through_the_engine() -> None:
    assert offending(WRITE) == []


def test_no_production_python_locks_runs_or_pools_itself() -> None:
    assert offending(LOCK) == []


def test_the_scan_sees_a_write_and_a_lock_in_sql_text() -> None:
    """The patterns match the shapes the deleted Python writer used (so the tests above can
    fail), and not the engine calls that replaced them."""
    assert WRITE.search("UPDATE budget.runs r SET state = x.state")
    assert WRITE.search("INSERT INTO budget.pool_balances (tenant_id) VALUES ($1)")
    assert WRITE.search("delete from budget.holds where tenant_id = $1")
    assert LOCK.search("SELECT r.* FROM budget.runs r\nWHERE r.tenant_id = $1 FOR UPDATE OF r")
    assert not WRITE.search("SELECT status FROM budget.close_run_v1($1, $2, $3, $4)")
    assert not LOCK.search("SELECT 1 FROM budget.runs WHERE tenant_id = $1 FOR SHARE")
