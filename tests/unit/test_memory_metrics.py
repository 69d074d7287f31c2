"""Memory domain metrics: one unit per name, detector labels bounded."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from memory_service.adapters.metrics import MAX_DETECTORS, ListMetrics, MemoryMetrics
from memory_service.domain.token_counters import TokenCounter


def test_tokens_and_characters_returned_are_separate_metrics() -> None:
    registry = CollectorRegistry()
    metrics = ListMetrics(registry)
    metrics.listed(TokenCounter.O200K_BASE, "recency", "none", 120, 0, None)
    metrics.listed(TokenCounter.CHARS, "recency", "none", 300, 0, None)
    text = generate_latest(registry).decode()
    assert 'ration_memory_list_returned_tokens_sum{token_counter="o200k_base"} 120.0' in text
    assert "ration_memory_list_returned_chars_sum 300.0" in text
    assert 'token_counter="chars"' not in text


def test_redaction_detector_labels_stay_bounded() -> None:
    registry = CollectorRegistry()
    metrics = MemoryMetrics(registry)
    metrics.redacted({f"detector-{i}": 1 for i in range(3 * MAX_DETECTORS)})
    samples = [
        sample
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "ration_memory_redactions_total"
    ]
    assert len(samples) == MAX_DETECTORS + 1
    assert sum(s.value for s in samples) == 3 * MAX_DETECTORS
