"""A LangGraph `BaseStore` on ration memory (`pip install 'ration[langgraph]'`).

Each namespace is one memory, `prefix/` + its labels percent-encoded and joined by "/"; each key
one entry (id and a `k:` tag derived from the key) whose content is the JSON of the value.
`put` appends, revises, or reactivates a deleted key's entry; `delete` forgets it; `get` reads it
by its tag. `search` is ListMemory under the store's `token_budget`: ranked by relevance to
`query` (a server embedder is needed), else newest first, with `filter`'s equalities sent as
tags (`f:<field>=<JSON value>`, for scalar fields up to 64 characters; a value with over 31 of
them is tagged on its first 31) and every condition checked again here. `secrets` are redacted
before anything is stored. The namespaces are listed from an index memory (`prefix` itself).
One gRPC channel per event loop: the sync `batch` runs on a private loop thread."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from ration_client.errors import InvalidRequest, NotFound
from ration_client.integrations.agents_session import json_safe_secrets
from ration_client.memory import MemoryClient
from ration_client.memory_views import EntryInput, MemoryItem, Rank, TokenCounter

__all__ = ["RationStore"]

KIND = "langgraph.item"
MAX_TAG = 64


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def key_tag(key: str) -> str:
    return f"k:{_digest(key)}"


def entry_id_of(key: str) -> str:
    return f"mem_ent_{_digest(key)}"


def filter_tags(value: Mapping[str, Any]) -> list[str]:
    """Tags for a value's scalar top-level fields (what `filter` equalities are sent as)."""
    tags = []
    for field, item in value.items():
        if isinstance(item, str | int | float | bool) or item is None:
            tag = f"f:{field}={json.dumps(item, ensure_ascii=False)}"
            if len(tag) <= MAX_TAG:
                tags.append(tag)
    return tags[:31]  # with the key tag: at most 32


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any]) -> bool:
    """A value passes every condition: an equality, or a dict of $eq/$ne/$gt/$gte/$lt/$lte."""
    for field, wanted in conditions.items():
        have = value.get(field)
        if isinstance(wanted, dict) and wanted and all(k.startswith("$") for k in wanted):
            if not all(_OPERATORS[op](have, operand) for op, operand in wanted.items()):
                return False
        elif have != wanted:
            return False
    return True


def _namespace_matches(namespace: tuple[str, ...], op: ListNamespacesOp) -> bool:
    for condition in op.match_conditions or ():
        path = condition.path
        if len(path) > len(namespace):
            return False
        part = (
            namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
        )
        if not all(want in ("*", have) for want, have in zip(path, part, strict=True)):
            return False
    return True


class RationStore(BaseStore):
    """LangGraph long-term memory in ration memory; see the module for the mapping."""

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        prefix: str = "langgraph-store",
        token_budget: int = 0,
        token_counter: TokenCounter | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.address = address
        self.token = token
        self.prefix = prefix
        self.token_budget = token_budget
        self.token_counter = token_counter
        self._secrets = json_safe_secrets(secrets or {})
        self._clients: dict[asyncio.AbstractEventLoop, MemoryClient] = {}
        self._namespaces: set[tuple[str, ...]] = set()
        self._sync_loop: asyncio.AbstractEventLoop | None = None

    # ---- the BaseStore interface -----------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            results.append(await self._run(op))
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The same on a private event loop thread (sync graphs); from async code use abatch."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("RationStore.batch blocks: call abatch (the a* methods) here")
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop()).result()

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    # ---- ops -------------------------------------------------------------------------------

    def _run(self, op: Op) -> Awaitable[Result]:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        return self._list_namespaces(op)

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = await self._find(namespace, key)
        if found is None:
            return None
        item = self._item(namespace, found)
        return Item(
            value=item.value,
            key=item.key,
            namespace=namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    async def _find(self, namespace: tuple[str, ...], key: str) -> MemoryItem | None:
        listed = await self._memory().list(self.ref(namespace), tag=key_tag(key), limit=1)
        return listed.entries[0] if listed.entries else None

    async def _put(self, op: PutOp) -> None:
        memory, ref = self._memory(), self.ref(op.namespace)
        existing = await self._find(op.namespace, op.key)
        if op.value is None:
            if existing is not None:
                await memory.forget(ref, [existing.entry_id])
            return
        now = datetime.now(UTC).isoformat()
        created = now if existing is None else json.loads(existing.content)["created_at"]
        content = {"key": op.key, "value": op.value, "created_at": created}
        entry = EntryInput(
            json.dumps(content, ensure_ascii=False),
            kind=KIND,
            tags=(key_tag(op.key), *filter_tags(op.value)),
            entry_id=entry_id_of(op.key),
        )
        if existing is not None:
            await memory.revise(ref, entry.entry_id, entry, secrets=self._secrets)
            return
        await self._remember(op.namespace)
        try:
            await memory.append(ref, [entry], secrets=self._secrets)
        except InvalidRequest as refused:
            try:  # the key was deleted: its entry id is taken by the tombstone, revive it
                await memory.reactivate(ref, [entry.entry_id])
            except NotFound:
                raise refused from None
            await memory.revise(ref, entry.entry_id, entry, secrets=self._secrets)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        conditions = dict(op.filter or {})
        tags = filter_tags({k: v for k, v in conditions.items() if not isinstance(v, dict)})
        found: list[SearchItem] = []
        for namespace in sorted(await self._known()):
            if namespace[: len(op.namespace_prefix)] != op.namespace_prefix:
                continue
            listed = await self._memory().list(
                self.ref(namespace),
                token_budget=self.token_budget,
                token_counter=self.token_counter,
                rank=Rank.RELEVANCE if op.query else Rank.RECENCY,
                query=op.query or "",
                tag=tags[0] if tags else "",
            )
            for entry in listed.entries:
                item = self._item(namespace, entry)
                if matches(item.value, conditions):
                    found.append(item)
        return found[op.offset : op.offset + op.limit]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        depth = op.max_depth
        chosen = {
            ns[:depth] if depth is not None else ns
            for ns in await self._known()
            if _namespace_matches(ns, op)
        }
        return sorted(chosen)[op.offset : op.offset + op.limit]

    # ---- namespaces ------------------------------------------------------------------------

    def ref(self, namespace: tuple[str, ...]) -> str:
        return "/".join([self.prefix, *(quote(label, safe="") for label in namespace)])

    async def _remember(self, namespace: tuple[str, ...]) -> None:
        """Adds the namespace to the index memory once (its entry id is derived from it)."""
        if namespace in await self._known():
            return
        entry_id = entry_id_of(self.ref(namespace))
        entry = EntryInput(json.dumps(list(namespace)), kind="langgraph.ns", entry_id=entry_id)
        with contextlib.suppress(InvalidRequest):  # another writer indexed it first
            await self._memory().append(self.prefix, [entry])
        self._namespaces.add(namespace)

    async def _known(self) -> set[tuple[str, ...]]:
        listed = await self._memory().list(self.prefix)
        self._namespaces |= {tuple(json.loads(e.content)) for e in listed.entries}
        return self._namespaces

    def _item(self, namespace: tuple[str, ...], entry: MemoryItem) -> SearchItem:
        content = json.loads(entry.content)
        return SearchItem(
            namespace=namespace,
            key=content["key"],
            value=content["value"],
            created_at=datetime.fromisoformat(content["created_at"]),
            updated_at=entry.created_at,
        )

    # ---- clients ---------------------------------------------------------------------------

    def _memory(self) -> MemoryClient:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = MemoryClient(self.address, token=self.token)
        return self._clients[loop]

    def _loop(self) -> asyncio.AbstractEventLoop:
        if self._sync_loop is None:
            self._sync_loop = asyncio.new_event_loop()
            threading.Thread(target=self._sync_loop.run_forever, daemon=True).start()
        return self._sync_loop
