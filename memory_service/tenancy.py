"""CTI-1's second line: every memory transaction runs as the RLS role, scoped to one tenant."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from servicekit.db import Database

T = TypeVar("T")

RLS_ROLE = "ration_memory_rls"

# One statement, transaction-local (is_local = true): nothing outlives the transaction, so a
# pooled connection (or PgBouncer in transaction mode) never carries a tenant into the next
# one. The role switch is what makes the policies apply: the login role may own the tables or
# be a superuser, and both bypass row-level security.
ENTER_TENANT = (
    "SELECT set_config('role', 'ration_memory_rls', true), set_config('ration.tenant_id', $1, true)"
)


async def enter_tenant(conn: asyncpg.Connection, tenant: str) -> None:
    await conn.execute(ENTER_TENANT, tenant)


class TenantDatabase(Database):
    """The service's pool seen by one tenant: each transaction first enters that tenant.

    Reads run in a transaction too, so the role and tenant settings stay local to them. Built
    per call; it shares the underlying pool and never connects or closes it.
    """

    def __init__(self, shared: Database, tenant: str) -> None:
        super().__init__(shared.url, shared.settings)
        self._shared = shared
        self._tenant = tenant

    @property
    def ready(self) -> bool:
        return self._shared.ready

    @property
    def pool(self) -> asyncpg.Pool:
        return self._shared.pool

    async def connect(self) -> None:
        raise RuntimeError("a tenant view never connects; the shared database does")

    async def close(self) -> None:
        raise RuntimeError("a tenant view never closes the shared pool")

    async def transaction(
        self, work: Callable[[asyncpg.Connection], Awaitable[T]], *, attempts: int = 3
    ) -> T:
        tenant = self._tenant

        async def scoped(conn: asyncpg.Connection) -> T:
            await enter_tenant(conn, tenant)
            return await work(conn)

        return await self._shared.transaction(scoped, attempts=attempts)

    async def read(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        return await self.transaction(work)

    async def statement(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Never a bare statement: the role switch needs a transaction to stay local to."""
        return await self.transaction(work, attempts=attempts)


def for_tenant(database: Database, tenant: str) -> TenantDatabase:
    return TenantDatabase(database, tenant)
