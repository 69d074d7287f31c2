"""Domain metrics of the memory service (capacity, redaction, compaction); never ids as labels."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram

from memory_service.capacity import Dimension, Operation

# Canonical content runs from ~0.5 KiB (one entry) to the 4 MiB default ceiling; the top bucket
# leaves room for budgets raised above the default and memories over a lowered one.
MANIFEST_BYTES_BUCKETS = tuple(float(1024 * 4**k) for k in range(7)) + (8.0 * 1024 * 1024,)


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

    def committed(self, operation: Operation, head_manifest_bytes: int) -> None:
        self.writes.labels(operation.value).inc()
        self.manifest_bytes.observe(head_manifest_bytes)

    def redacted(self, by_detector: Mapping[str, int]) -> None:
        for detector, count in by_detector.items():
            self.redactions.labels(detector).inc(count)
