"""Issued API keys in the budget client: create, list, rotate, revoke (admin token)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ration.budget.v1 import budget_pb2
from ration_client import convert
from ration_client._rpc import Client, new_request_id
from ration_client.views import Enforcement, Policy, ScopeBudget, Window


@dataclass(frozen=True)
class ApiKey:
    """An issued key as the server lists it (never its secret)."""

    key_id: str
    roles: tuple[str, ...]
    principal: str
    created_at: datetime
    revoked_at: datetime | None  # None while the key is valid
    has_budget: bool


@dataclass(frozen=True)
class MintedKey:
    """A key with its secret, shown once: pass `secret` as the bearer token. `secret` is empty
    when the server replayed an earlier call with the same request_id."""

    key: ApiKey
    secret: str
    budget: ScopeBudget | None = None  # the key's pool, when created with one
    previous_valid_until: datetime | None = None  # RotateApiKey: when the old secrets end


@dataclass(frozen=True)
class ApiKeyPage:
    keys: list[ApiKey]
    next_page_token: str  # empty on the last page


def api_key(message: budget_pb2.ApiKey) -> ApiKey:
    return ApiKey(
        key_id=message.key_id,
        roles=tuple(message.roles),
        principal=message.principal,
        created_at=convert.datetime_of(message.created_at),
        revoked_at=(
            convert.datetime_of(message.revoked_at) if message.HasField("revoked_at") else None
        ),
        has_budget=message.has_budget,
    )


class ApiKeysMixin(Client):
    """The key RPCs of BudgetClient (this module keeps them apart from the run methods)."""

    _stub: Any

    async def create_api_key(
        self,
        roles: list[str],
        *,
        principal: str = "",
        budget_policy: Policy | budget_pb2.BudgetPolicy | None = None,
        budget_window: Window = Window.NONE,
        budget_enforcement: Enforcement = Enforcement.HARD,
        budget_model_match: str = "",
        budget_max_model_calls: int | None = None,
        request_id: str | None = None,
    ) -> MintedKey:
        """Mints a key with `roles` (reader, writer, admin, approver). With `budget_policy`
        (limits only), every run opened with the key draws on that pool (SCOPE_API_KEY)."""
        request = budget_pb2.CreateApiKeyRequest(
            request_id=request_id or new_request_id(), roles=roles, principal=principal
        )
        if budget_policy is not None:
            request.budget.CopyFrom(
                budget_pb2.ScopeBudget(
                    kind=budget_pb2.SCOPE_BUDGET_KIND_POOLED,
                    policy=convert.policy_message(budget_policy),
                    window=convert.WINDOWS.number(budget_window),
                    enforcement=convert.ENFORCEMENTS.number(budget_enforcement),
                    model_match=budget_model_match,
                    max_model_calls=budget_max_model_calls,
                )
            )
        reply = await self._rpc.unary(self._stub.CreateApiKey, request)
        budget = convert.scope_budget(reply.budget) if reply.HasField("budget") else None
        return MintedKey(api_key(reply.key), reply.secret, budget)

    async def list_api_keys(
        self, *, page_size: int = 0, page_token: str = "", include_revoked: bool = False
    ) -> ApiKeyPage:
        request = budget_pb2.ListApiKeysRequest(
            page_size=page_size, page_token=page_token, include_revoked=include_revoked
        )
        reply = await self._rpc.unary(self._stub.ListApiKeys, request)
        return ApiKeyPage([api_key(k) for k in reply.keys], reply.next_page_token)

    async def list_all_api_keys(self, *, include_revoked: bool = False) -> list[ApiKey]:
        found: list[ApiKey] = []
        token = ""
        while True:
            page = await self.list_api_keys(page_token=token, include_revoked=include_revoked)
            found.extend(page.keys)
            token = page.next_page_token
            if not token:
                return found

    async def rotate_api_key(
        self, key_id: str, *, overlap_seconds: int = 0, request_id: str | None = None
    ) -> MintedKey:
        """A new secret; the key's current secrets stay valid `overlap_seconds` more."""
        request = budget_pb2.RotateApiKeyRequest(
            request_id=request_id or new_request_id(),
            key_id=key_id,
            overlap_seconds=overlap_seconds,
        )
        reply = await self._rpc.unary(self._stub.RotateApiKey, request)
        until = (
            convert.datetime_of(reply.previous_valid_until)
            if reply.HasField("previous_valid_until")
            else None
        )
        return MintedKey(api_key(reply.key), reply.secret, None, until)

    async def revoke_api_key(self, key_id: str, *, request_id: str | None = None) -> ApiKey:
        request = budget_pb2.RevokeApiKeyRequest(
            request_id=request_id or new_request_id(), key_id=key_id
        )
        return api_key((await self._rpc.unary(self._stub.RevokeApiKey, request)).key)
