"""Degraded mode: fail-open within the allowance while the budget server is down, journal
replayed exactly once when it is back, also by a new client after a crash."""

from __future__ import annotations

import shutil
from pathlib import Path

import asyncpg
import openai
import pytest

from ration_client import Amounts, BudgetClient, BudgetPolicy, Dimension, Unavailable
from ration_client.degraded import FailOpen, FailOpenRefused, JournalEntry
from ration_client.integrations import BudgetGuard, PriceCatalog
from ration_client.integrations.openai import budgeted
from tests.integrations.ledger import assert_ledger_is_the_bill
from tests.support.fake_llm import FakeLLM
from tests.support.servers import StartServer

MODEL = "gpt-4o"
CATALOG = PriceCatalog(provider_id="openai")
MESSAGES = [{"role": "user", "content": "Next step?"}]


async def restart(start_server: StartServer, port: int) -> None:
    await start_server("budget", RATION_BUDGET_LISTEN=f"127.0.0.1:{port}")


def fail_open_client(address: str, journal: Path, per_run: int, per_process: int) -> BudgetClient:
    policy = FailOpen(
        journal,
        per_run=Amounts(tokens=per_run, cost_nanos=10**12),
        per_process=Amounts(tokens=per_process, cost_nanos=10**12),
    )
    return BudgetClient(address, attempts=2, on_unavailable="fail_open", fail_open=policy)


async def calls_until_refused(client: BudgetClient, fake: FakeLLM, run_id: str) -> int:
    """An agent's calls while the service is down: granted locally until the allowance is
    spent, then FailOpenRefused (an Unavailable) before reaching the provider."""
    llm = budgeted(
        openai.AsyncOpenAI(base_url=fake.openai_url, api_key="test", max_retries=0),
        BudgetGuard(client, run_id, prices=CATALOG),
    )
    made = 0
    while True:
        before = fake.requests
        try:
            await llm.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=50)
        except FailOpenRefused:
            assert fake.requests == before
            return made
        made += 1


async def test_fail_open_grants_the_allowance_then_replays_exactly_the_bill(
    start_server: StartServer, fake_llm: FakeLLM, tmp_path: Path, db: asyncpg.Connection
) -> None:
    runner = await start_server("budget")
    address = f"127.0.0.1:{runner.port}"
    async with BudgetClient(address) as admin:
        await admin.open_run("r", project_id="p", policy=BudgetPolicy(max_tokens=10_000))
    journal = tmp_path / "journal.jsonl"
    async with fail_open_client(address, journal, per_run=200, per_process=1000) as client:
        await runner.stop()
        made = await calls_until_refused(client, fake_llm, "r")
        # Each worst case is 8 + 50 tokens, each bill 8 + 20: the run's 200 allow 5 calls.
        assert made == 5
        counters = client.degraded.counters if client.degraded else None
        assert counters is not None
        assert (counters.granted, counters.refused, counters.journaled) == (5, 1, 5)
        assert counters.replayed == 0
        with pytest.raises(Unavailable):  # fail-closed beyond the allowance
            await client.get_run("r")

        await restart(start_server, runner.port)
        await client.wait_ready()
        async with client.call("r", model=MODEL, estimate=Amounts(tokens=1)) as hold:
            assert not hold.local  # the service answers: the journal was replayed first
            await hold.consume(Amounts(tokens=1))
        assert counters.replayed == 5
        assert client.degraded is not None
        assert client.degraded.pending() == []
        run = await client.get_run("r")
    probe = 1
    assert run.status(Dimension.TOKENS).consumed == fake_llm.billed_tokens + probe
    assert run.status(Dimension.TOKENS).held == 0
    consumes = await db.fetchval(
        "SELECT count(*) FROM budget.ledger WHERE run_id = 'r' AND decision = 'consume'"
    )
    assert consumes == 6


async def test_a_replay_after_a_client_crash_does_not_double_count(
    start_server: StartServer, fake_llm: FakeLLM, tmp_path: Path, db: asyncpg.Connection
) -> None:
    runner = await start_server("budget")
    address = f"127.0.0.1:{runner.port}"
    async with BudgetClient(address) as admin:
        await admin.open_run("r", project_id="p", policy=BudgetPolicy(max_tokens=10_000))
    journal = tmp_path / "journal.jsonl"
    async with fail_open_client(address, journal, per_run=120, per_process=1000) as first:
        await runner.stop()
        assert await calls_until_refused(first, fake_llm, "r") == 3
        await restart(start_server, runner.port)
        await first.wait_ready()
        # The crash: the replays reach the service, but their "replayed" lines never reach
        # the disk (the journal is put back as it was before the replay).
        before = tmp_path / "before.jsonl"
        shutil.copy(journal, before)
        assert await first.replay_journal() == 3
        shutil.copy(before, journal)
    async with fail_open_client(address, journal, per_run=120, per_process=1000) as second:
        assert second.degraded is not None
        assert len(second.degraded.pending()) == 3  # the new process finds them pending
        assert await second.replay_journal() == 3
        assert second.degraded.pending() == []
    await assert_ledger_is_the_bill_after(address, fake_llm)
    consumes = await db.fetchval(
        "SELECT count(*) FROM budget.ledger WHERE run_id = 'r' AND decision = 'consume'"
    )
    assert consumes == 3


async def assert_ledger_is_the_bill_after(address: str, fake: FakeLLM) -> None:
    async with BudgetClient(address) as client:
        await assert_ledger_is_the_bill(client, "r", fake, MODEL, CATALOG)


async def test_fail_closed_is_the_default(start_server: StartServer) -> None:
    runner = await start_server("budget")
    async with BudgetClient(f"127.0.0.1:{runner.port}", attempts=1) as client:
        await client.open_run("r", project_id="p", policy=BudgetPolicy(max_tokens=100))
        await runner.stop()
        with pytest.raises(Unavailable) as refused:
            async with client.call("r", model=MODEL, estimate=Amounts(tokens=1)):
                pass
        assert not isinstance(refused.value, FailOpenRefused)


def test_fail_open_needs_its_allowance_and_journal(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fail_open"):
        BudgetClient("127.0.0.1:1", on_unavailable="fail_open")
    with pytest.raises(ValueError, match="fail_closed"):
        BudgetClient("127.0.0.1:1", on_unavailable="fail_sideways")
    allowance = Amounts(tokens=1)
    policy = FailOpen(tmp_path / "j", per_run=allowance, per_process=allowance)
    with pytest.raises(ValueError, match="fail_open"):
        BudgetClient("127.0.0.1:1", fail_open=policy)
    with pytest.raises(ValueError, match="per_process must bound"):
        FailOpen(tmp_path / "j", per_run=allowance, per_process=Amounts())


def test_a_journal_line_cut_short_by_a_crash_is_not_replayed(tmp_path: Path) -> None:
    journal = tmp_path / "j"
    allowance = Amounts(tokens=100)
    policy = FailOpen(journal, per_run=allowance, per_process=allowance)
    entry = JournalEntry("0190a000-0000-7000-8000-000000000001", "r", MODEL, Amounts(tokens=7))
    policy.journal(entry)
    with journal.open("a") as cut:
        cut.write('{"kind":"consume","request_id":"0190a0')
    reopened = FailOpen(journal, per_run=allowance, per_process=allowance)
    assert reopened.pending() == [entry]
    assert reopened.waiting == 1
    after = JournalEntry("0190a000-0000-7000-8000-000000000002", "r", MODEL, Amounts(tokens=3))
    reopened.journal(after)  # on a line of its own, after the cut one
    assert reopened.pending() == [entry, after]
