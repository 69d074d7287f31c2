"""Memory service configuration: capacity budget, compaction policy, limits and token counter."""

from __future__ import annotations

from dataclasses import dataclass

from servicekit.settings import DatabaseSettings, Env, ServerSettings, SettingsError

TOKEN_COUNTERS = ("o200k_base", "cl100k_base", "chars")


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
    list_limit_cap: int
    token_counter: str
    budget_address: str | None

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
        return cls(
            server=ServerSettings.from_env(env, "memory", 50052, 9465),
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
            max_entry_size_bytes=env.integer("RATION_MEMORY_MAX_ENTRY_BYTES", 65536, minimum=16),
            max_batch_entries=env.integer("RATION_MEMORY_MAX_BATCH_ENTRIES", 100, minimum=1),
            list_limit_cap=env.integer("RATION_MEMORY_LIST_LIMIT_CAP", 1000, minimum=1),
            token_counter=env.choice("RATION_MEMORY_TOKEN_COUNTER", "o200k_base", TOKEN_COUNTERS),
            budget_address=env.optional_text("RATION_MEMORY_BUDGET_ADDRESS"),
        )
