"""Domain metrics of the memory service (capacity, redaction, compaction, ListMemory); no ids."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram

from memory_service.domain.capacity import Dimension, Operation
from memory_service.domain.token_counters import TokenCounter
from servicekit.labels import BoundedValues

# Canonical content runs from ~0.5 KiB (one entry) to the 4 MiB default ceiling; the top bucket
# leaves room for budgets raised above the default and memories over a lowered one.
MANIFEST_BYTES_BUCKETS = tuple(float(1024 * 4**k) for k in range(7)) + (8.0 * 1024 * 1024,)
# Injected tokens per ListMemory: from a single short note to whole-context injections.
TOKENS_RETURNED_BUCKETS = (0.0,) + tuple(50.0 * 2**k for k in range(12))
UTILIZATION_BUCKETS = tuple(round(0.1 * k, 1) for k in range(11))
STOPPED_BY = ("none", "budget", "limit", "size")
RANKS = ("recency", "relevance")
# Detector names are the server's own (plus request_secret); the bound keeps the label finite
# even if a detector were ever named after caller input.
MAX_DETECTORS = 100


class MemoryMetrics:
    """Registered on the service's registry (passed to build); incremented after commit."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.writes = Counter(
            "ration_memory_writes",
            "Committed write revisions by operation.",
            ("operation",),
            registry=registry,
        )
        self.capacity_refusals = Counter(
            "ration_memory_capacity_refusals",
            "Writes refused with MEMORY_CAPACITY_EXCEEDED, by the dimension that bound.",
            ("dimension",),
            registry=registry,
        )
        self.manifest_bytes = Histogram(
            "ration_memory_manifest_bytes",
            "Canonical manifest bytes of the head after each committed write.",
            buckets=MANIFEST_BYTES_BUCKETS,
            registry=registry,
        )
        self.redactions = Counter(
            "ration_memory_redactions",
            "Secrets redacted at write, by detector (request_secret for request-carried ones).",
            ("detector",),
            registry=registry,
        )
        self.compactions = Counter(
            "ration_memory_compactions",
            "Compaction runs by mode (dry_run, commit).",
            ("mode",),
            registry=registry,
        )
        self.compacted_entries = Counter(
            "ration_memory_compacted_entries",
            "Tombstones dropped from head manifests by committed compactions.",
            registry=registry,
        )
        self.entries_appended = Counter(
            "ration_memory_entries_appended",
            "Entries added by committed AppendEntries calls.",
            registry=registry,
        )
        # Expose zero-valued series up front so dashboards and alerts have data from the start.
        for operation in Operation:
            self.writes.labels(operation.value)
        for dimension in Dimension:
            self.capacity_refusals.labels(dimension.value)
        for mode in ("dry_run", "commit"):
            self.compactions.labels(mode)
        self._detectors = BoundedValues(MAX_DETECTORS)

    def committed(self, operation: Operation, head_manifest_bytes: int) -> None:
        self.writes.labels(operation.value).inc()
        self.manifest_bytes.observe(head_manifest_bytes)

    def redacted(self, by_detector: Mapping[str, int]) -> None:
        for detector, count in by_detector.items():
            self.redactions.labels(self._detectors(detector)).inc(count)


class ListMetrics:
    """ListMemory: what was injected, how much of the budget it used, and what was left out."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # One unit per name: tokenizer tokens (by tokenizer) and characters apart.
        self.returned_tokens = Histogram(
            "ration_memory_list_returned_tokens",
            "Tokens of the entries a ListMemory call returned, by the tokenizer counting them.",
            ("token_counter",),
            buckets=TOKENS_RETURNED_BUCKETS,
            registry=registry,
        )
        self.returned_chars = Histogram(
            "ration_memory_list_returned_chars",
            "Characters of the entries a ListMemory call returned (token_counter chars).",
            buckets=TOKENS_RETURNED_BUCKETS,
            registry=registry,
        )
        self.budget_utilization = Histogram(
            "ration_memory_list_budget_utilization_ratio",
            "Returned size divided by the effective token budget (calls with a budget only).",
            buckets=UTILIZATION_BUCKETS,
            registry=registry,
        )
        self.omitted_entries = Counter(
            "ration_memory_list_omitted_entries",
            "Ranked candidates ListMemory left out (budget or limit), summed over calls.",
            registry=registry,
        )
        self.requests = Counter(
            "ration_memory_list_requests",
            "ListMemory calls answered, by what ended the prefix and by ranking.",
            ("stopped_by", "rank"),
            registry=registry,
        )
        # Children resolved once: labels() takes a lock and a lookup on every call otherwise.
        self._requests = {(s, r): self.requests.labels(s, r) for s in STOPPED_BY for r in RANKS}
        self._returned = {
            unit: self.returned_chars
            if unit is TokenCounter.CHARS
            else self.returned_tokens.labels(unit.value)
            for unit in TokenCounter
        }

    def listed(
        self,
        token_counter: TokenCounter,
        rank: str,
        stopped_by: str,
        total: int,
        omitted: int,
        budget: int | None,
    ) -> None:
        self._returned[token_counter].observe(total)
        if budget:  # utilisation of "no budget" (or of a run with nothing left) is undefined
            self.budget_utilization.observe(total / budget)
        if omitted:
            self.omitted_entries.inc(omitted)
        self._requests[(stopped_by, rank)].inc()
