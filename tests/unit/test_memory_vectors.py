"""Query vectors: embedded on the CPU pool as the caller's tenant, once per burst of one query."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import numpy as np
import pytest

from memory_service.adapters.embedder import Embedder
from memory_service.usecases.relevance_vectors import Vectors
from servicekit.cpu import CpuPool
from servicekit.errors import DomainError
from tests.support.adapters import shared_embedder


class CountingEmbedder:
    """The real embedder, counting its inferences and holding each until `release` is set."""

    def __init__(self, real: Embedder) -> None:
        self.real = real
        self.calls: list[str] = []
        self.release = threading.Event()

    def embed(self, text: str) -> np.ndarray:
        self.calls.append(text)
        assert self.release.wait(30)
        return self.real.embed(text)


@pytest.fixture(scope="module")
def real() -> Embedder:
    return shared_embedder()


@pytest.fixture
async def pool() -> AsyncIterator[CpuPool]:
    cpu = CpuPool(workers=1, tenant_share=1)
    yield cpu
    cpu.close()


async def test_a_burst_of_one_new_query_is_one_job_of_the_tenant(
    real: Embedder, pool: CpuPool
) -> None:
    embedder = CountingEmbedder(real)
    vectors = Vectors(embedder, None, pool)  # type: ignore[arg-type]  # queries never read the db
    burst = [asyncio.create_task(vectors.query("t", "window seats?")) for _ in range(10)]
    await asyncio.sleep(0.05)
    assert pool.held("t") == 1  # a share of 1 is enough for the whole burst
    embedder.release.set()
    answers = await asyncio.gather(*burst)
    assert embedder.calls == ["window seats?"]
    assert all(np.array_equal(a, answers[0]) for a in answers)
    assert np.array_equal(await vectors.query("t", "window seats?"), answers[0])  # cached
    assert embedder.calls == ["window seats?"]


async def test_a_new_query_beyond_the_tenants_share_is_refused(
    real: Embedder, pool: CpuPool
) -> None:
    embedder = CountingEmbedder(real)
    vectors = Vectors(embedder, None, pool)  # type: ignore[arg-type]
    first = asyncio.create_task(vectors.query("t", "first"))
    await asyncio.sleep(0.05)
    with pytest.raises(DomainError, match="TENANT_BUSY"):
        await vectors.query("t", "second")
    other = asyncio.create_task(vectors.query("u", "second"))  # another tenant is not refused
    embedder.release.set()
    await asyncio.gather(first, other)
    assert sorted(embedder.calls) == ["first", "second"]
