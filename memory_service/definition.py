"""Composition root of the memory service: builds its parts explicitly from settings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from memory_service.adapters.budget_link import BudgetLink
from memory_service.adapters.embedder import Embedder, EmbedderUnavailable
from memory_service.adapters.metrics import ListMetrics, MemoryMetrics
from memory_service.adapters.tokenizer import Tokenizer, TokenizerUnavailable
from memory_service.api.capabilities import MemoryCapabilities
from memory_service.api.item_messages import MemoryItems
from memory_service.api.roles import REQUIRED_ROLES, SERVICE_NAME
from memory_service.api.servicer import MemoryServicer
from memory_service.domain.capacity import CapacityBudget
from memory_service.domain.compaction import CompactionPolicy
from memory_service.domain.token_counters import TokenCounter
from memory_service.domain.write_input_rules import InputLimits
from memory_service.usecases.candidate_cache import CandidateCache
from memory_service.usecases.compaction import MemoryCompaction
from memory_service.usecases.listing import MemoryReads, ResponseSize
from memory_service.usecases.queries import MemoryQueries
from memory_service.usecases.relevance_vectors import Vectors
from memory_service.usecases.settings import MemorySettings
from memory_service.usecases.write_path import REQUEST_LOG, WritePath, WritePolicy
from memory_service.usecases.writes import MemoryWrites
from ration.memory.v1 import memory_service_pb2_grpc
from servicekit.cpu import CpuPool
from servicekit.db import Database
from servicekit.definition import ServiceDefinition
from servicekit.errors import DomainError
from servicekit.idempotency import forget_older_than
from servicekit.migrations import MigrationSet
from servicekit.server import AppFactory, ServiceApp
from servicekit.settings import SettingsError

NAME = "memory"
# 0003 once created a role, which needs a superuser; its first text is still accepted (0005).
MIGRATIONS = MigrationSet(
    "memory",
    "memory_service.store.migrations",
    rewritten={3: frozenset({"4adf707961d0842178661837012c0971a8ce2459cd5908ffbe3c413a093c5126"})},
    functions_package="memory_service.store.functions",
)
REQUEST_RETENTION_HOURS = 24
REQUEST_SWEEP_SECONDS = 3600.0

log = logging.getLogger(__name__)

_VARIABLES = {
    "max_active_entries": "RATION_MEMORY_MAX_ACTIVE_ENTRIES",
    "max_manifest_entries": "RATION_MEMORY_MAX_MANIFEST_ENTRIES",
    "max_manifest_bytes": "RATION_MEMORY_MAX_MANIFEST_BYTES",
    "min_tombstone_revisions": "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS",
}


def capacity_budget(settings: MemorySettings) -> CapacityBudget:
    return CapacityBudget(
        max_active_entries=settings.max_active_entries,
        max_manifest_entries=settings.max_manifest_entries,
        max_manifest_bytes=settings.max_manifest_bytes,
    )


def compaction_policy(settings: MemorySettings) -> CompactionPolicy:
    return CompactionPolicy(
        enabled=settings.compaction_enabled,
        min_tombstone_revisions=settings.min_tombstone_revisions,
    )


def _checked(settings: MemorySettings) -> tuple[CapacityBudget, CompactionPolicy]:
    """The budget and policy, or a SettingsError naming the variable (also for settings built
    in code rather than from the environment, which skip from_env's checks)."""
    budget, policy = capacity_budget(settings), compaction_policy(settings)
    problems = budget.violations() + policy.violations()
    if problems:
        raise SettingsError(
            "; ".join(f"{_VARIABLES[p.field]} is invalid: {p.description}" for p in problems)
        )
    if settings.cache_entries < 0:
        raise SettingsError("RATION_MEMORY_CACHE_ENTRIES is invalid: must be >= 0 (0 = off)")
    return budget, policy


@dataclass(frozen=True)
class Adapters:
    """The heavy adapters, as loaders: a process loads each once at start (about 1 s of CPU for
    the encodings and the ONNX model); tests hand in loaders that share one instance."""

    tokenizer: Callable[[Path | None], Tokenizer] = Tokenizer.load
    embedder: Callable[[], Embedder] = Embedder.load


PRODUCTION = Adapters()


def load_embedder(settings: MemorySettings, adapters: Adapters = PRODUCTION) -> Embedder | None:
    """The embedder, or None (semantic search off) when disabled or its files do not verify.

    Unlike the tokenizer this is optional: without it the service still serves everything but
    relevance, and says so in its capabilities instead of ranking by anything else.
    """
    if not settings.embedder:
        log.info("embedder disabled (RATION_MEMORY_EMBEDDER=off): semantic search is off")
        return None
    try:
        return adapters.embedder()
    except (EmbedderUnavailable, ImportError, OSError) as error:
        log.warning("embedder unavailable: semantic search is off", extra={"reason": str(error)})
        return None


def factory(settings: MemorySettings, adapters: Adapters = PRODUCTION) -> AppFactory:
    budget, policy = _checked(settings)
    try:
        # Loaded and hash-verified once per process; entry sizes are computed at write only.
        counter = adapters.tokenizer(settings.tokenizer_dir)
    except TokenizerUnavailable as error:
        raise SettingsError(f"the memory service cannot start: {error}") from None
    embedder = load_embedder(settings, adapters)
    limits = InputLimits(
        settings.max_entry_size_bytes, settings.max_batch_entries, settings.max_request_text_bytes
    )
    capabilities = MemoryCapabilities.from_settings(
        settings,
        injection_budget=True,
        search_modes=("semantic", "filter") if embedder else ("filter",),
    )

    def build(database: Database, registry: CollectorRegistry) -> ServiceApp:
        # One bounded pool per process for redaction, sizing and embedding (servicekit/cpu.py).
        cpu = CpuPool.from_settings(settings.cpu)
        path = WritePath(database, WritePolicy(budget, policy, limits), MemoryMetrics(registry))
        link = BudgetLink(settings.budget_address) if settings.budget_address else None
        items = MemoryItems()
        reads = MemoryReads(
            database,
            CandidateCache(settings.cache_entries),
            Vectors(embedder, database, cpu) if embedder else None,
            link,
            ListMetrics(registry),
            TokenCounter(settings.token_counter),
            settings.list_limit_cap,
            ResponseSize(settings.server.max_response_bytes, items.wire_size),
        )
        servicer = MemoryServicer(
            capabilities,
            MemoryWrites(path, counter, cpu, embedder),
            MemoryCompaction(path),
            MemoryQueries(database, budget, policy, settings.max_history_revisions),
            reads,
            items,
        )

        def register(server: grpc.aio.Server) -> None:
            memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

        async def close() -> None:
            cpu.close()
            if link is not None:
                await link.close()

        async def sweep_request_log() -> None:
            # Replays need stored responses for at least 24 hours; older ones are dropped. In
            # an explicit transaction: Citus sends the function's SET LOCAL ration.upkeep on to
            # the workers only inside one (as a bare statement it would delete nothing there).
            while True:
                await asyncio.sleep(REQUEST_SWEEP_SECONDS)
                try:
                    await database.upkeep_transaction(
                        lambda conn: forget_older_than(conn, REQUEST_LOG, REQUEST_RETENTION_HOURS)
                    )
                except DomainError as error:  # the store is down; try again next period
                    log.warning("request log sweep failed", extra={"reason": error.reason})

        return ServiceApp(
            name=NAME,
            service_name=SERVICE_NAME,
            error_domain="ration.memory.v1",
            migrations=[MIGRATIONS],
            register=register,
            background=[sweep_request_log],
            close=close,
            roles=REQUIRED_ROLES,
        )

    return build


DEFINITION = ServiceDefinition(
    name=NAME,
    service_name=SERVICE_NAME,
    migrations=(MIGRATIONS,),
    settings=MemorySettings.from_env,
    factory=factory,
)
