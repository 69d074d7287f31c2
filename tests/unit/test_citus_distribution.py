"""The Citus distribution step's pure parts: table order and one statement per migration part."""

from __future__ import annotations

from typing import Any

from servicekit.citus import distribution_order
from servicekit.migrations import Migration


def _table(name: str, *references: str) -> dict[str, Any]:
    return {"name": name, "references": list(references)}


def test_referenced_tables_are_distributed_before_the_tables_referring_to_them() -> None:
    tables = [
        _table("memory.changes", "memory.revisions"),
        _table("memory.manifest_items", "memory.entry_versions"),
        _table("memory.entry_versions", "memory.revisions"),
        _table("memory.revisions", "memory.memories"),
        _table("memory.memories"),
        _table("budget.runs"),
    ]
    names = [t["name"] for t in distribution_order(tables)]
    assert names.index("memory.memories") < names.index("memory.revisions")
    assert names.index("memory.revisions") < names.index("memory.changes")
    assert names.index("memory.revisions") < names.index("memory.entry_versions")
    assert names.index("memory.entry_versions") < names.index("memory.manifest_items")
    assert sorted(names) == sorted(t["name"] for t in tables)
    # whatever order the catalog lists them in
    assert [t["name"] for t in distribution_order(list(reversed(tables)))] == names


def test_a_reference_outside_the_schemas_or_a_cycle_does_not_stop_the_order() -> None:
    tables = [_table("a.x", "a.y"), _table("a.y", "a.x"), _table("a.z", "public.elsewhere")]
    assert sorted(t["name"] for t in distribution_order(tables)) == ["a.x", "a.y", "a.z"]


def test_a_migration_is_sent_one_statement_at_a_time_dollar_quoted_bodies_whole() -> None:
    sql = """-- a comment; with a semicolon
CREATE TABLE t (a text DEFAULT ';');
CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1; RETURN 2;
END;
$$;
CREATE FUNCTION g() RETURNS text LANGUAGE sql AS $body$ SELECT 'x;y' $body$;
"""
    statements = Migration(1, "x", sql).statements
    assert len(statements) == 3
    assert statements[1].startswith("CREATE FUNCTION f()")
    assert statements[1].rstrip().endswith("$$;")
    assert "PERFORM 1; RETURN 2;" in statements[1]
    assert "'x;y'" in statements[2]
