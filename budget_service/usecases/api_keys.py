"""Issued API keys: mint, list, rotate and revoke (admin use cases), one transaction each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import asyncpg

from budget_service.adapters.metrics import Tally
from budget_service.domain.api_keys import ApiKey, Minted, NewKey, api_key_not_found
from budget_service.domain.commands import Mutation
from budget_service.domain.policy import Scope, ScopeBudget, ScopeBudgetKind
from budget_service.domain.records import StoredScopeBudget
from budget_service.store import api_keys as store
from budget_service.store import reads as store_reads
from budget_service.usecases.transactions import Transactions
from servicekit.auth import digest

T = TypeVar("T")


@dataclass(frozen=True)
class Created:
    minted: Minted
    budget: StoredScopeBudget | None


@dataclass
class _Fresh(Generic[T]):
    """The bytes this call encoded: the stored reply is this call's own (so it may carry the
    secret minted now) exactly when Transactions.mutate returns this very object."""

    encode: Callable[[T], bytes]
    out: bytes | None = None

    def __call__(self, value: T) -> bytes:
        self.out = self.encode(value)
        return self.out


class ApiKeys:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    async def create(
        self,
        tenant: str,
        mutation: Mutation,
        roles: Sequence[str],
        principal: str,
        budget: ScopeBudget | None,
        encode: Callable[[Created], bytes],
    ) -> tuple[bytes, str]:
        """The stored reply (never holding the secret) and the secret, shown once: empty when
        the reply is a replay of an earlier call."""
        new = NewKey.mint()

        async def work(conn: asyncpg.Connection, tally: Tally) -> Created:
            who = principal or new.key_id
            await store.insert_key(conn, tenant, new.key_id, roles, who, digest(new.secret))
            stored = None
            if budget is not None:
                bound = replace(
                    budget, scope=Scope.API_KEY, scope_id=new.key_id, kind=ScopeBudgetKind.POOLED
                )
                stored = await store_reads.put_scope_budget(conn, tenant, bound)
            key = await store.get_key(conn, tenant, new.key_id)
            assert key is not None  # inserted just now
            return Created(Minted(key, ""), stored)

        fresh = _Fresh(encode)
        data = await self._tx.mutate(tenant, mutation, work, fresh)
        return data, new.secret if data is fresh.out else ""

    async def rotate(
        self,
        tenant: str,
        mutation: Mutation,
        key_id: str,
        overlap_seconds: int,
        encode: Callable[[Minted], bytes],
    ) -> tuple[bytes, str]:
        new = NewKey.mint()

        async def work(conn: asyncpg.Connection, tally: Tally) -> Minted:
            exists, revoked = await store.lock_key(conn, tenant, key_id)
            if not exists or revoked:
                raise api_key_not_found()
            until = await store.rotate(conn, tenant, key_id, digest(new.secret), overlap_seconds)
            key = await store.get_key(conn, tenant, key_id)
            assert key is not None
            return Minted(key, "", until)

        fresh = _Fresh(encode)
        data = await self._tx.mutate(tenant, mutation, work, fresh)
        return data, new.secret if data is fresh.out else ""

    async def revoke(
        self, tenant: str, mutation: Mutation, key_id: str, encode: Callable[[ApiKey], bytes]
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> ApiKey:
            exists, _ = await store.lock_key(conn, tenant, key_id)
            if not exists:
                raise api_key_not_found()
            await store.revoke(conn, tenant, key_id)
            key = await store.get_key(conn, tenant, key_id)
            assert key is not None
            return key

        return await self._tx.mutate(tenant, mutation, work, encode)

    async def list(
        self, tenant: str, after: str | None, include_revoked: bool, page_size: int
    ) -> tuple[list[ApiKey], bool]:
        """A page of keys after `after` and whether more follow."""

        async def work(conn: asyncpg.Connection) -> list[ApiKey]:
            return await store.page(conn, tenant, after, include_revoked, page_size + 1)

        found = await self._tx.read(tenant, work)
        return found[:page_size], len(found) > page_size
