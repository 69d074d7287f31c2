"""The services' Postgres role must be one that row-level security applies to (DESIGN 5)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import asyncpg

from servicekit.settings import SettingsError

log = logging.getLogger(__name__)

OVERRIDE = "RATION_ALLOW_PRIVILEGED_DB_ROLE"

# Superusers and BYPASSRLS roles skip every policy; the tables' owner (or a member of the
# owning role, who can become it) may disable them. Any of these undoes CTI-1's second line.
_ROLE = """
SELECT current_user AS name, r.rolsuper, r.rolbypassrls,
    (SELECT string_agg(DISTINCT n.nspname, ', ' ORDER BY n.nspname)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = ANY($1::text[]) AND c.relkind IN ('r', 'p')
       AND pg_has_role(current_user, c.relowner, 'MEMBER')) AS owned
FROM pg_roles r WHERE r.rolname = current_user"""


async def privilege_problem(conn: asyncpg.Connection, schemas: Sequence[str]) -> str | None:
    """Why the connected role would bypass row-level security, or None."""
    row = await conn.fetchrow(_ROLE, list(schemas))
    name = row["name"]
    if row["rolsuper"]:
        return f"the database role {name!r} is a superuser"
    if row["rolbypassrls"]:
        return f"the database role {name!r} has BYPASSRLS"
    if row["owned"]:
        return f"the database role {name!r} owns the tables of schema {row['owned']}"
    return None


async def check_role(
    conn: asyncpg.Connection, schemas: Sequence[str], *, dev_mode: bool, allowed: bool
) -> None:
    """Outside development mode, refuses (SettingsError) a role that bypasses row-level
    security, unless the operator set the override."""
    if dev_mode:
        return
    problem = await privilege_problem(conn, schemas)
    if problem is None:
        return
    if allowed:
        log.warning("privileged database role allowed", extra={"problem": problem})
        return
    raise SettingsError(
        f"{problem}, so row-level security would not apply: connect as the application role"
        f" (README, Postgres roles) or set {OVERRIDE}=true"
    )
