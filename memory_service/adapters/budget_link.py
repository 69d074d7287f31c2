"""ListMemory's run_id clamp: the run's remaining tokens from budget_service Check (adapter)."""

from __future__ import annotations

from typing import Protocol

from memory_service.domain.refusals import (
    budget_link_unavailable,
    budget_unavailable,
    run_not_found,
)
from ration_client import BudgetClient
from ration_client.errors import (
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RationError,
    Unauthenticated,
)
from servicekit.errors import FieldViolation, validation_error

CHECK_TIMEOUT_SECONDS = 1.0


class RemainingTokens(Protocol):
    async def remaining_tokens(self, run_id: str, authorization: str | None) -> int | None:
        """The run's remaining tokens (the tightest of its limits and pools); None if unbounded."""
        ...


class BudgetLink:
    """A Check-only client of budget_service (ration_client's): never reserves or consumes
    (DESIGN 4.5), and never retries: a ListMemory waits at most one Check deadline.

    The caller's own authorization header is forwarded, so budget_service resolves the run in
    the caller's tenant, exactly as if the caller had asked it directly.
    """

    def __init__(self, address: str, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
        self._address = address
        self._timeout = timeout
        self._client: BudgetClient | None = None

    def _budget(self) -> BudgetClient:
        if self._client is None:  # its channel is created on first use, in the serving loop
            self._client = BudgetClient(self._address, token="", timeout=self._timeout, attempts=1)
        return self._client

    async def remaining_tokens(self, run_id: str, authorization: str | None) -> int | None:
        try:
            return await self._budget().remaining_tokens(run_id, authorization=authorization)
        except NotFound:
            raise run_not_found() from None
        except InvalidRequest:
            raise validation_error(
                [FieldViolation("run_id", "is not a run id budget_service accepts")]
            ) from None
        except (Unauthenticated, PermissionDenied) as error:
            raise budget_link_unavailable(
                f"budget_service refused the caller's credentials ({error.code.name})"
            ) from None
        except RationError as error:
            raise budget_unavailable(error.code.name) from None

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
