"""CTI-1's second line: every transaction of a tenant's call enters that tenant for RLS."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from servicekit.db import TENANT_SETTING, Database, enter_tenant, quote_literal

__all__ = ["TENANT_SETTING", "TenantDatabase", "enter_tenant", "for_tenant", "quote_literal"]

T = TypeVar("T")


class TenantDatabase(Database):
    """The service's pool seen by one tenant: each transaction first enters that tenant.

    Reads run in a transaction too, so the setting stays local to them. Built per call; it
    shares the underlying pool and never connects or closes it.
    """

    def __init__(self, shared: Database, tenant: str) -> None:
        super().__init__(shared.url, shared.settings)
        self._shared = shared
        self._slots = shared._slots  # the pool's slots are the shared database's
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
        return await self.statement(work, attempts=attempts)

    async def read(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        return await self.statement(work)

    async def statement(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Never a bare statement: the tenant setting needs a transaction to stay local to."""
        return await self._shared.tenant_transaction(
            self._tenant, work, attempts=attempts, retry_on=retry_on
        )


def for_tenant(database: Database, tenant: str) -> TenantDatabase:
    return TenantDatabase(database, tenant)
