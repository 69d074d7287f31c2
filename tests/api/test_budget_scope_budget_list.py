"""ListScopeBudgets: an admin's keyset-paged, filtered listing of its own tenant's budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from ration_client import (
    BudgetClient,
    InvalidRequest,
    PermissionDenied,
    Policy,
    Scope,
    ScopeBudgetKind,
    Window,
)
from tests.support.ids import new_id
from tests.support.servers import SharedServers, StartServer
from tests.support.token_files import write_token_file

TOKENS = {"admin-a": ("a", "admin"), "admin-b": ("b", "admin"), "reader-a": ("a", "reader")}
POOLED, CAP = ScopeBudgetKind.POOLED, ScopeBudgetKind.PER_RUN_CAP


def token_file(path: Path) -> Path:
    return write_token_file(path, *((t, n, [r]) for t, (n, r) in TOKENS.items()))


@pytest.fixture
async def address(start_server: StartServer, tmp_path: Path) -> str:
    """A server on a database of the test's own: for the test that lists whole tenants."""
    tokens = token_file(tmp_path / "tokens.json")
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    return f"127.0.0.1:{runner.port}"


@pytest.fixture
async def admin(address: str) -> AsyncIterator[BudgetClient]:
    async with BudgetClient(address, token="admin-a") as client:
        yield client


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tokens = token_file(tmp_path_factory.mktemp("scope-budget-list") / "tokens.json")
    return {"RATION_TOKEN_FILE": str(tokens)}


@pytest.fixture
async def shared_admin(shared_servers: SharedServers) -> AsyncIterator[BudgetClient]:
    """Tenant a's admin on the module's server, for the tests that need no tenant to
    themselves (refusals, and a page token read back against another filter)."""
    async with BudgetClient(shared_servers.address("budget"), token="admin-a") as client:
        yield client


async def put(client: BudgetClient, scope: Scope, scope_id: str, kind: ScopeBudgetKind) -> None:
    window = Window.DAY if kind is POOLED and scope_id.endswith("d") else Window.NONE
    await client.put_scope_budget(
        scope, scope_id, kind, policy=Policy(max_cost=Decimal("1")), window=window
    )


async def test_pages_follow_the_key_order_and_filters_narrow(
    admin: BudgetClient, address: str
) -> None:
    stored = [
        (Scope.PROJECT, "p1d", POOLED),
        (Scope.PROJECT, "p2", CAP),
        (Scope.AGENT, "x", POOLED),
        (Scope.WORKFLOW, "w", POOLED),
        (Scope.PROJECT, "p3d", POOLED),
        (Scope.PROJECT, "p1d", CAP),
    ]
    for key in stored:
        await put(admin, *key)
    async with BudgetClient(address, token="admin-b") as other:
        await put(other, Scope.PROJECT, "b-only", POOLED)

    first = await admin.list_scope_budgets(page_size=4)
    assert len(first.budgets) == 4
    assert first.next_page_token
    await put(admin, Scope.WORKFLOW, "late", CAP)  # after the cursor: it appears, once
    rest = await admin.list_scope_budgets(page_size=4, page_token=first.next_page_token)
    assert rest.next_page_token == ""
    listed = [(b.scope, b.scope_id, b.kind) for b in (*first.budgets, *rest.budgets)]
    assert listed == sorted([*stored, (Scope.WORKFLOW, "late", CAP)], key=lambda k: k)
    assert all(b.balance is None and b.version == 1 for b in first.budgets)

    pools = await admin.list_scope_budgets_all(scope=Scope.PROJECT, kind=POOLED, window=Window.DAY)
    assert [b.scope_id for b in pools] == ["p1d", "p3d"]
    assert pools[0].policy.max_cost == Decimal(1)
    caps = await admin.list_scope_budgets_all(kind=CAP, page_size=1)
    assert [b.scope_id for b in caps] == ["p1d", "p2", "late"]
    async with BudgetClient(address, token="admin-b") as other:
        assert [b.scope_id for b in await other.list_scope_budgets_all()] == ["b-only"]


async def test_only_an_admin_lists(shared_servers: SharedServers) -> None:
    async with BudgetClient(shared_servers.address("budget"), token="reader-a") as reader:
        with pytest.raises(PermissionDenied):
            await reader.list_scope_budgets()


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"scope": Scope.RUN}, "scope"),
        ({"page_size": 1001}, "page_size"),
        ({"page_token": "not a token"}, "page_token"),
    ],
)
async def test_bad_input_names_the_field(
    shared_admin: BudgetClient, arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await shared_admin.list_scope_budgets(**arguments)  # type: ignore[arg-type]
    assert [f for f, _ in refused.value.violations] == [field]


async def test_a_page_token_is_bound_to_its_filter(shared_admin: BudgetClient) -> None:
    for scope_id in (new_id("a"), new_id("b")):
        await put(shared_admin, Scope.PROJECT, scope_id, POOLED)
    page = await shared_admin.list_scope_budgets(kind=POOLED, page_size=1)
    with pytest.raises(InvalidRequest) as refused:
        await shared_admin.list_scope_budgets(kind=CAP, page_token=page.next_page_token)
    assert [f for f, _ in refused.value.violations] == ["page_token"]
