"""Budget refusals as an SDK's own HTTP status errors (the openai and anthropic SDKs share the
shape: `APIStatusError(message, *, response, body)` over an httpx2 response)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2

from ration_client.errors import RationError
from ration_client.integrations.core import (
    HTTP_STATUS,
    BudgetRefusal,
    Refusal,
    refusal_body,
    refusal_of,
)


def status_error(
    classes: Mapping[Refusal, type[Any]], error: RationError, url: str, *, inner_body: bool
) -> BaseException:
    """The SDK error of `classes` for a budget refusal, as if `url` had answered it (the error
    itself when it is not a refusal). `inner_body`: the SDK's body is the inner error object."""
    kind = refusal_of(error)
    if kind is None:
        return error
    body = refusal_body(error, kind)
    response = httpx2.Response(HTTP_STATUS[kind], request=httpx2.Request("POST", url), json=body)
    mapped = classes[kind](
        str(error), response=response, body=body["error"] if inner_body else body
    )
    if isinstance(mapped, BudgetRefusal):  # every class of `classes` is one
        mapped._set_refusal(error, kind)
    return mapped
