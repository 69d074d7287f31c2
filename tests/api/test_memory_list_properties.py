"""ListMemory's budget walk as a property, through the real server and checked against tiktoken.

For random entries (non-ASCII, emoji, code), budgets, limits, units and rankings: the answer is
a prefix of the ranking, its total is within the budget, the next ranked entry would not have
fit or the limit was reached, no entry is altered, and every size equals a fresh tiktoken count
(or code-point count) of the returned content.
"""

from __future__ import annotations

import hashlib
import unicodedata
import uuid

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ration.memory.v1 import memory_pb2 as m
from tests.support.memory import Memory
from tests.support.tokens import fresh_size

SNIPPETS = (
    "Grüße aus Köln, naïve café",
    "中文字符和日本語のテキスト",
    "emoji 🎉🚀 family 👨‍👩‍👧‍👦 flag 🇩🇪",
    "def f(x: int) -> int:\n    return x ** 2  # square\n",
    '{"key": [1, 2.5e-3, null], "s": "a\\nb"}',
    "SELECT count(*) FROM t WHERE a <> 'b';",
    "   spaced   out\n\n",
    "<|endoftext|> is just text",
)
UNITS = (m.TOKEN_COUNTER_O200K_BASE, m.TOKEN_COUNTER_CL100K_BASE, m.TOKEN_COUNTER_CHARS)
QUERIES = ("which language is this written in?", "source code and functions", "emoji")

_characters = st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="\x00")
contents = (
    st.lists(
        st.one_of(st.text(_characters, min_size=1, max_size=30), st.sampled_from(SNIPPETS)),
        min_size=1,
        max_size=5,
    )
    .map("".join)
    .filter(lambda text: bool(text.strip()))
)


def recency(stored: list[m.EntryVersion]) -> list[m.EntryVersion]:
    ranked = sorted(stored, key=lambda v: v.entry_id.encode())
    ranked.sort(key=lambda v: (v.created_at.seconds, v.created_at.nanos), reverse=True)
    return ranked


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(st.lists(contents, min_size=1, max_size=4), min_size=1, max_size=3),
    budget=st.integers(0, 120),
    limit=st.integers(0, 6),
    unit=st.sampled_from(UNITS),
    relevance=st.booleans(),
    query=st.sampled_from(QUERIES),
)
async def test_the_answer_is_the_prefix_that_fits_sized_exactly_like_tiktoken(
    memory_channel: grpc.aio.Channel,
    batches: list[list[str]],
    budget: int,
    limit: int,
    unit: int,
    relevance: bool,
    query: str,
) -> None:
    memory = Memory(memory_channel, f"prop/{uuid.uuid4().hex}")
    stored = [v for batch in batches for v in (await memory.append(*batch)).entries]
    by_id = {v.entry_id: v for v in stored}
    if relevance:  # RELEVANCE is SearchMemory's semantic ranking of the same candidates
        hits = await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=query, limit=100)
        ranking = [by_id[h.entry.entry_id] for h in hits.hits]
        assert len(ranking) == len(stored)
    else:
        ranking = recency(stored)
    reply = await memory.list_memory(
        token_budget=budget,
        limit=limit,
        token_counter=unit,
        rank=m.RANK_RELEVANCE if relevance else m.RANK_RECENCY,
        query=query if relevance else "",
    )
    returned = list(reply.entries)
    count = len(returned)
    # A prefix of the ranking, each entry exactly as stored.
    assert [e.entry_id for e in returned] == [v.entry_id for v in ranking[:count]]
    for item, version in zip(returned, ranking, strict=False):
        assert item.entry_version_id == version.entry_version_id
        assert item.content == version.content
        nfc = unicodedata.normalize("NFC", item.content).encode()
        assert hashlib.sha256(nfc).hexdigest() == version.content_hash
        assert item.size == fresh_size(unit, item.content)
    # Within the budget; the next ranked entry did not fit, or the limit was reached.
    assert reply.total_tokens == sum(e.size for e in returned)
    if budget:
        assert reply.total_tokens <= budget
    assert reply.candidate_count == len(ranking)
    assert reply.omitted_count == len(ranking) - count
    if count == len(ranking):
        assert reply.stopped_by == m.STOPPED_BY_NONE
        assert reply.first_omitted_entry_id == ""
    else:
        following = ranking[count]
        size = fresh_size(unit, following.content)
        assert (reply.first_omitted_entry_id, reply.first_omitted_size) == (
            following.entry_id,
            size,
        )
        if limit and count == limit:
            assert reply.stopped_by == m.STOPPED_BY_LIMIT
        else:
            assert reply.stopped_by == m.STOPPED_BY_BUDGET
            assert budget
            assert reply.total_tokens + size > budget
