"""Stored functions are source code (DESIGN 6): every function installed in our schemas has
its file under <service>/store/functions/, every file is installed with exactly its text, and
no migration after the move defines a function."""

from __future__ import annotations

import re

import asyncpg
import pytest

from ration_server import registry
from servicekit.migrations import FunctionSource, MigrationSet

SETS = registry.all_migrations()
SCHEMAS = [mset.schema for mset in SETS]
# The last migration of each schema that still defined functions; none after it may.
LAST_WITH_FUNCTIONS = {"budget": 12, "memory": 7}
_CREATE = re.compile(r"^CREATE OR REPLACE FUNCTION (\w+)\.(\w+)\s*\(", re.M)
_BODY = re.compile(r"\sAS\s+(\$\w*\$)(.*?)\1", re.S)
_DEFINES = re.compile(r"\b(CREATE|ALTER)\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE)\b", re.I)
# The one definition a later migration may hold: a placeholder that only raises, so that a
# trigger can be created before the repeatable step (same transaction) installs the real body.
_PLACEHOLDER = re.compile(
    r"CREATE FUNCTION [a-z_.0-9]+\(\) RETURNS trigger LANGUAGE plpgsql AS \$\$\s*BEGIN\s*"
    r"RAISE EXCEPTION '[a-z_.0-9]+ is defined by its function file';\s*END;\s*\$\$;"
)

# An UPDATE's SET list (also ON CONFLICT DO UPDATE) and a subscript in it (not ARRAY[...]).
_SET_LIST = re.compile(
    r"\bUPDATE\s+(?:[\w.]+\s+(?:\w+\s+)?)?SET\b(.*?)(?:\bWHERE\b|\bRETURNING\b|;)", re.S
)
_SUBSCRIPT = re.compile(r"(?:\b(?!ARRAY\b)\w+|[)\]])\s*\[")

INSTALLED = """
SELECT n.nspname AS schema, p.proname AS name, p.prosrc AS body
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = ANY($1::text[])
"""


def sources() -> dict[tuple[str, str], FunctionSource]:
    return {(mset.schema, f.name): f for mset in SETS for f in mset.load_functions()}


def test_each_function_file_creates_the_one_function_it_is_named_after() -> None:
    found = sources()
    assert {schema for schema, _ in found} == set(SCHEMAS)
    for (schema, name), source in found.items():
        creates = _CREATE.findall(source.sql)
        assert creates == [(schema, name)], f"{schema}/functions/{name}.sql creates {creates}"
        others = [
            s
            for s in source.statements
            if not _CREATE.search(s)
            and not re.match(r"(\s*--[^\n]*\n)*\s*(GRANT|REVOKE|COMMENT)\b", s)
        ]
        assert not others, f"{name}.sql: only the function and its grants belong here"


async def test_every_installed_function_has_a_file_and_every_file_is_installed(
    db: asyncpg.Connection,
) -> None:
    rows = await db.fetch(INSTALLED, SCHEMAS)
    installed = [(r["schema"], r["name"]) for r in rows]
    assert len(installed) == len(set(installed)), "an overload: one name, one function, one file"
    found = sources()
    assert sorted(installed) == sorted(found)
    for row in rows:
        source = found[(row["schema"], row["name"])]
        body = _BODY.search(source.sql)
        assert body is not None, source.name
        assert row["body"] == body[2], f"{row['schema']}.{row['name']} differs from its file"


@pytest.mark.parametrize("mset", SETS, ids=SCHEMAS)
def test_no_migration_after_the_move_defines_a_function(mset: MigrationSet) -> None:
    later = [m for m in mset.load() if m.version > LAST_WITH_FUNCTIONS[mset.schema]]
    for migration in later:
        assert not _DEFINES.search(_PLACEHOLDER.sub("", migration.sql)), (
            f"{mset.schema} migration {migration.version:04d}_{migration.name} defines a function:"
            f" it belongs in {mset.functions_package}"
        )


def test_no_update_sets_a_column_from_a_subscript() -> None:
    """Citus 13.2.2 crashes the backend planning an UPDATE of a distributed table (signal 11,
    on the worker when the call is delegated) whose SET list subscripts a parameter
    (`SET consumed_tokens = r.used[1]`): copy the element into a scalar variable first."""
    for (schema, name), source in sources().items():
        code = re.sub(r"--[^\n]*", "", source.sql)
        for set_list in _SET_LIST.findall(code):
            found = _SUBSCRIPT.search(set_list)
            assert found is None, f"{schema}/functions/{name}.sql: SET ... {found and found[0]}"
