"""The OpenWOP `memory` capability block, derived from configuration and what is wired."""

from __future__ import annotations

import json
from dataclasses import dataclass

from memory_service.usecases.settings import MemorySettings


@dataclass(frozen=True)
class MemoryCapabilities:
    max_entry_size_bytes: int
    token_counter: str
    # Whether ListMemory with token_budget is served (RFC 0113 injectionBudget).
    injection_budget: bool
    # Search modes actually served; empty means `search.supported` is false.
    search_modes: tuple[str, ...]
    max_active_entries: int
    max_manifest_entries: int
    max_manifest_bytes: int
    compaction_enabled: bool
    min_tombstone_revisions: int
    max_history_revisions: int

    @classmethod
    def from_settings(
        cls,
        settings: MemorySettings,
        *,
        injection_budget: bool = False,
        search_modes: tuple[str, ...] = (),
    ) -> MemoryCapabilities:
        return cls(
            max_entry_size_bytes=settings.max_entry_size_bytes,
            token_counter=settings.token_counter,
            injection_budget=injection_budget,
            search_modes=search_modes,
            max_active_entries=settings.max_active_entries,
            max_manifest_entries=settings.max_manifest_entries,
            max_manifest_bytes=settings.max_manifest_bytes,
            compaction_enabled=settings.compaction_enabled,
            min_tombstone_revisions=settings.min_tombstone_revisions,
            max_history_revisions=settings.max_history_revisions,
        )

    def to_json(self) -> str:
        injection: dict[str, object] = {"supported": self.injection_budget}
        if self.injection_budget:
            injection["tokenCounter"] = self.token_counter
        document = {
            "memory": {
                "supported": True,
                "maxEntrySizeBytes": self.max_entry_size_bytes,
                "ttlSupported": True,
                "search": {"supported": bool(self.search_modes), "modes": list(self.search_modes)},
                "injectionBudget": injection,
                "retention": {"ttl": True, "forget": True},
            }
        }
        return json.dumps(document, separators=(",", ":"), sort_keys=True)
