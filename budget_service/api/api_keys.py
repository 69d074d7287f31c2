"""The issued-key RPCs of BudgetService: requests validated, use cases called, replies built."""

from __future__ import annotations

import base64
import binascii

import grpc

from budget_service.api import requests as convert
from budget_service.api.responses import scope_budget
from budget_service.domain import api_keys as keys
from budget_service.domain import input_rules as v
from budget_service.domain.api_keys import ApiKey, Minted
from budget_service.domain.policy import ScopeBudget
from budget_service.usecases.api_keys import ApiKeys, Created
from ration.budget.v1 import budget_pb2 as pb
from servicekit.auth import current_identity
from servicekit.errors import FieldViolation
from servicekit.timestamps import timestamp

DEFAULT_PAGE_SIZE = 100


def api_key(key: ApiKey) -> pb.ApiKey:
    message = pb.ApiKey(
        key_id=key.key_id,
        roles=list(key.roles),
        principal=key.principal,
        created_at=timestamp(key.created_at),
        has_budget=key.has_budget,
    )
    if key.revoked_at is not None:
        message.revoked_at.CopyFrom(timestamp(key.revoked_at))
    return message


def _created_reply(created: Created) -> bytes:
    """Stored with the effect: never the secret (a replay answers without it)."""
    response = pb.CreateApiKeyResponse(key=api_key(created.minted.key))
    if created.budget is not None:
        response.budget.CopyFrom(scope_budget(created.budget))
    return response.SerializeToString(deterministic=True)


def _rotated_reply(minted: Minted) -> bytes:
    response = pb.RotateApiKeyResponse(key=api_key(minted.key))
    if minted.previous_valid_until is not None:
        response.previous_valid_until.CopyFrom(timestamp(minted.previous_valid_until))
    return response.SerializeToString(deterministic=True)


def _revoked_reply(key: ApiKey) -> bytes:
    return pb.RevokeApiKeyResponse(key=api_key(key)).SerializeToString(deterministic=True)


def _budget(request: pb.CreateApiKeyRequest, found: convert.Violations) -> ScopeBudget | None:
    """The key's budget, validated as a PutScopeBudget of scope API_KEY (the id is minted later:
    a valid placeholder stands in for it here)."""
    if not request.HasField("budget"):
        return None
    return convert.scope_budget_of(request.budget, found, scope_id="key-new")


def _page_token(key_id: str) -> str:
    return base64.urlsafe_b64encode(key_id.encode()).decode()


def _after(token: str, found: list[FieldViolation]) -> str | None:
    if not token:
        return None
    try:
        after = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        after = ""
    if not after or v.validate_id(after, "page_token"):
        found.append(FieldViolation("page_token", "is not a page token of ListApiKeys"))
        return None
    return after


class ApiKeysServicer:
    """CreateApiKey, ListApiKeys, RotateApiKey and RevokeApiKey (role admin: api/roles.py)."""

    _keys: ApiKeys

    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateApiKeyResponse:
        tenant = current_identity().tenant
        found = convert.Violations()
        mutation = convert.mutation_of("CreateApiKey", request, found)
        roles = list(request.roles)
        found += keys.validate_roles(roles)
        found += keys.validate_principal(request.principal)
        budget = _budget(request, found)
        found.check()
        data, secret = await self._keys.create(
            tenant, mutation, roles, request.principal, budget, _created_reply
        )
        response = pb.CreateApiKeyResponse.FromString(data)
        response.secret = secret
        return response

    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListApiKeysResponse:
        tenant = current_identity().tenant
        found = convert.Violations(v.check_int(request.page_size, "page_size", 0, v.MAX_PAGE_SIZE))
        after = _after(request.page_token, found)
        found.check()
        size = request.page_size or DEFAULT_PAGE_SIZE
        page, more = await self._keys.list(tenant, after, request.include_revoked, size)
        token = _page_token(page[-1].key_id) if more and page else ""
        return pb.ListApiKeysResponse(keys=[api_key(k) for k in page], next_page_token=token)

    async def RotateApiKey(
        self, request: pb.RotateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RotateApiKeyResponse:
        tenant = current_identity().tenant
        found = convert.Violations()
        mutation = convert.mutation_of("RotateApiKey", request, found)
        found += keys.validate_key_id(request.key_id)
        found += keys.validate_overlap(request.overlap_seconds)
        found.check()
        data, secret = await self._keys.rotate(
            tenant, mutation, request.key_id, request.overlap_seconds, _rotated_reply
        )
        response = pb.RotateApiKeyResponse.FromString(data)
        response.secret = secret
        return response

    async def RevokeApiKey(
        self, request: pb.RevokeApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeApiKeyResponse:
        tenant = current_identity().tenant
        found = convert.Violations()
        mutation = convert.mutation_of("RevokeApiKey", request, found)
        found += keys.validate_key_id(request.key_id)
        found.check()
        data = await self._keys.revoke(tenant, mutation, request.key_id, _revoked_reply)
        return pb.RevokeApiKeyResponse.FromString(data)
