"""One tenant cannot stall another (issue 17 item 5): tenant A floods the memory service with
large concurrent appends; tenant B's 15-byte append is answered within the client's default
deadline and ahead of A's batch, and A's excess is refused TENANT_BUSY with RetryInfo."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.sizing import worst_case_texts
from ration_client import MemoryClient, TenantBusy
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

A_APPENDS = 6
# One append's preparation (redaction, sizing, embedding of 12 × 64 KiB, about a second) far
# outlasts the test's round trips, yet leaves B's wait well inside its default deadline.
A_ENTRIES = 12
# One worker, so the order of turns is visible from outside: A's first append runs, A's next two
# wait, the rest are refused.
SHARE = 3


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json", ("tenant-a", "a", ["writer"]), ("tenant-b", "b", ["writer"])
    )


def large_entries(seed: int) -> list[str]:
    dna = worst_case_texts()["dna"]
    # Distinct entries (no two alike), each a max-size pre-token without word breaks.
    return [dna[n:] + dna[:n] for n in range(seed * A_ENTRIES, (seed + 1) * A_ENTRIES)]


async def test_a_small_write_of_one_tenant_is_not_stalled_by_another_tenants_flood(
    start_server: StartServer, token_file: Path
) -> None:
    runner = await start_server(
        "memory",
        RATION_TOKEN_FILE=str(token_file),
        RATION_CPU_WORKERS="1",
        RATION_CPU_TENANT_SHARE=str(SHARE),
    )
    address = f"127.0.0.1:{runner.port}"
    finished: list[str] = []  # completion order of every call that succeeded

    async with (
        MemoryClient(address, token="tenant-a", timeout=120) as a,
        MemoryClient(address, token="tenant-b") as b,  # the client's default deadline
    ):

        async def flood(n: int) -> str:
            await a.append(f"flood/{n}", large_entries(n))
            finished.append(f"a{n}")
            return f"a{n}"

        floods = [asyncio.create_task(flood(n)) for n in range(A_APPENDS)]
        # The first refusal means A's share is taken: its jobs hold the pool's one worker.
        first_refusal = None
        for next_done in asyncio.as_completed(floods):
            try:
                await next_done
            except TenantBusy as busy:
                first_refusal = busy
                break
        assert first_refusal is not None, "tenant A was never refused"
        in_flight = {f"a{n}" for n, task in enumerate(floods) if not task.done()}
        assert in_flight, "A's accepted appends finished before B could be sent"

        reply = await b.append("b/notes", ["fifteen bytes!!"])  # 15 bytes, B's only call
        finished.append("b")
        outcomes = await asyncio.gather(*floods, return_exceptions=True)

    assert reply.revision == 1
    assert reply.entries[0].sizes.chars == 15
    # B waited for at most the one preparation that was running when it arrived, not for A's
    # queue: every other append of A already in the server then completed after B.
    accepted = [name for name in finished if name in in_flight]
    after_b = finished[finished.index("b") + 1 :]
    assert len(accepted) >= 2, finished
    assert len(after_b) >= len(accepted) - 1, finished
    succeeded = [o for o in outcomes if isinstance(o, str)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(succeeded) >= SHARE  # the share was served
    assert len(refused) >= 1
    for error in refused:
        assert isinstance(error, TenantBusy), error
        assert error.limit == SHARE
        assert error.retry_after_seconds > 0
        assert error.retryable


# Issue 24: the pool is shared by work. A's appends are many entries of 15 KB; each is
# prepared as parts of bounded text, so B's 20-byte append waits for a part, not for an append.
WIDE_ENTRIES = 40
WIDE_CHARS = 15_000


def wide_entries(seed: int) -> list[str]:
    dna = worst_case_texts()["dna"]
    first = seed * WIDE_ENTRIES
    return [(dna[n:] + dna[:n])[:WIDE_CHARS] for n in range(first, first + WIDE_ENTRIES)]


async def test_a_small_write_goes_ahead_of_another_tenants_large_appends_on_every_worker(
    start_server: StartServer, token_file: Path
) -> None:
    runner = await start_server(
        "memory",
        RATION_TOKEN_FILE=str(token_file),
        RATION_CPU_WORKERS="2",
        RATION_CPU_TENANT_SHARE=str(SHARE),
    )
    address = f"127.0.0.1:{runner.port}"
    finished: list[str] = []
    async with (
        MemoryClient(address, token="tenant-a", timeout=120) as a,
        MemoryClient(address, token="tenant-b") as b,
    ):

        async def flood(n: int) -> str:
            await a.append(f"wide/{n}", wide_entries(n))
            finished.append(f"a{n}")
            return f"a{n}"

        floods = [asyncio.create_task(flood(n)) for n in range(SHARE + 3)]
        refused = None
        for next_done in asyncio.as_completed(floods):
            try:
                await next_done
            except TenantBusy as busy:  # A's share is taken: its parts hold both workers
                refused = busy
                break
        assert refused is not None, "tenant A was never refused"
        in_flight = {f"a{n}" for n, task in enumerate(floods) if not task.done()}
        assert in_flight, "A's accepted appends finished before B could be sent"
        await b.append("b/notes", ["twenty bytes, no more"[:20]])
        finished.append("b")
        await asyncio.gather(*floods, return_exceptions=True)
    # B's append was prepared after at most one part per worker: every append of A in the
    # server when B arrived (and served) finished after B.
    accepted = [name for name in finished if name in in_flight]
    assert len(accepted) >= 2, finished
    assert finished.index("b") < min(finished.index(name) for name in accepted), finished
