"""An OpenAI Agents SDK `Session` on ration memory: redacted at write, token-budgeted reads.

One session is one memory (`ref_prefix + session_id`), one entry per conversation item (its
JSON). `get_items` is ListMemory's newest-first prefix that fits `token_budget` (whole items,
the server's list cap applies too), returned oldest first; `add_items` is one AppendEntries per
100 items with the session's `secrets` redacted before anything is stored; `pop_item` and
`clear_session` forget entries (tombstones stay in the memory's revisions). Imports no
framework: it satisfies the SDK's `Session` protocol structurally."""

from __future__ import annotations

import json
import secrets as random
from collections.abc import Mapping
from typing import Any

from ration_client.errors import RevisionConflict
from ration_client.memory import MemoryClient
from ration_client.memory_views import EntryInput, MemoryItem, TokenCounter

__all__ = ["RationSession"]

KIND = "agents.item"
BATCH = 100  # AppendEntries' default max_batch_entries
FORGET_BATCH = 1000  # ForgetEntries' most ids per call
POP_ATTEMPTS = 5


def json_safe_secrets(secrets: Mapping[str, str]) -> dict[str, str]:
    """The secrets and, for a value JSON escapes (quotes, backslashes, control characters),
    its escaped form too (id + ".json"): an item is stored as JSON text, where the raw value
    would not appear."""
    out = dict(secrets)
    for secret_id, value in secrets.items():
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]
        if escaped != value:
            out[f"{secret_id}.json"] = escaped
    return out


def batch_entry_ids(count: int) -> list[str]:
    """Fresh ids for one append, descending: ListMemory breaks the created_at tie of one
    revision's entries by ascending entry_id, so the last item of a batch lists as newest."""
    base = random.randbits(120)
    return [f"mem_ent_{base + (count - 1 - i):032x}" for i in range(count)]


class RationSession:
    """Conversation history of one session in ration memory (the SDK's `Session` protocol)."""

    def __init__(
        self,
        session_id: str,
        memory: MemoryClient,
        *,
        ref_prefix: str = "agents/sessions/",
        token_budget: int = 0,
        token_counter: TokenCounter | None = None,
        secrets: Mapping[str, str] | None = None,
        session_settings: Any = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.memory = memory
        self.memory_ref = ref_prefix + session_id
        self.token_budget = token_budget
        self.token_counter = token_counter
        self._secrets = json_safe_secrets(secrets or {})

    def _limit(self, limit: int | None) -> int:
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        return limit or 0

    async def _newest(self, limit: int, *, budgeted: bool) -> tuple[int, list[MemoryItem]]:
        listed = await self.memory.list(
            self.memory_ref,
            limit=limit,
            token_budget=self.token_budget if budgeted else 0,
            token_counter=self.token_counter,
        )
        return listed.revision, list(listed.entries)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The newest items that fit the token budget (and `limit`), oldest first."""
        _, items = await self._newest(self._limit(limit), budgeted=True)
        return [json.loads(item.content) for item in reversed(items)]

    async def add_items(self, items: list[Any]) -> None:
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            ids = batch_entry_ids(len(chunk))
            entries = [
                EntryInput(json.dumps(item, ensure_ascii=False), kind=KIND, entry_id=entry_id)
                for item, entry_id in zip(chunk, ids, strict=True)
            ]
            await self.memory.append(self.memory_ref, entries, secrets=self._secrets)

    async def pop_item(self) -> Any | None:
        """Forgets and returns the newest item (None when the session is empty)."""
        for attempt in range(POP_ATTEMPTS):
            revision, newest = await self._newest(1, budgeted=False)
            if not newest:
                return None
            try:
                await self.memory.forget(
                    self.memory_ref, [newest[0].entry_id], expected_revision=revision
                )
            except RevisionConflict:
                if attempt + 1 == POP_ATTEMPTS:
                    raise
                continue  # a concurrent write: read the newest again
            return json.loads(newest[0].content)
        return None

    async def clear_session(self) -> None:
        while True:
            _, items = await self._newest(0, budgeted=False)
            if not items:
                return
            ids = [item.entry_id for item in items]
            for start in range(0, len(ids), FORGET_BATCH):
                await self.memory.forget(self.memory_ref, ids[start : start + FORGET_BATCH])
