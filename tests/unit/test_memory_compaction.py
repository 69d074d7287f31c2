"""Compaction eligibility, ordering, limits and signed reclaimed bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.domain.capacity import Usage
from memory_service.domain.compaction import (
    CompactionPolicy,
    TombstoneStatus,
    age_cutoff,
    compaction_changes,
    compaction_disabled_error,
    eligible,
    plan_compaction,
    select_for_compaction,
)
from memory_service.domain.ids import new_entry_id, new_version_id
from memory_service.domain.manifest import (
    Change,
    ChangeOp,
    EntryState,
    ManifestItem,
    canonical_content,
)
from servicekit.errors import ErrorKind

POLICY = CompactionPolicy(enabled=True, min_tombstone_revisions=10)


def tombstone(last_change: int = 1, *, tagged: bool = False, entry_id: str = "") -> TombstoneStatus:
    return TombstoneStatus(
        entry_id or new_entry_id(), new_version_id(), EntryState.INACTIVE, tagged, last_change
    )


def test_policy_defaults_disabled_with_ten_revision_window() -> None:
    policy = CompactionPolicy()
    assert (policy.enabled, policy.min_tombstone_revisions) == (False, 10)
    assert policy.violations() == []
    assert [v.field for v in CompactionPolicy(min_tombstone_revisions=-1).violations()] == [
        "min_tombstone_revisions"
    ]


def test_tombstone_deactivated_at_2_qualifies_at_head_12_not_11() -> None:
    item = tombstone(last_change=2)
    assert not eligible(item, 11, POLICY)
    assert eligible(item, 12, POLICY)
    assert eligible(item, 13, POLICY)


def test_age_zero_makes_a_fresh_tombstone_eligible() -> None:
    fresh = tombstone(last_change=12)
    assert not eligible(fresh, 12, POLICY)
    assert eligible(fresh, 12, CompactionPolicy(min_tombstone_revisions=0))


def test_active_and_tagged_items_are_never_eligible() -> None:
    zero = CompactionPolicy(min_tombstone_revisions=0)
    active = TombstoneStatus(new_entry_id(), new_version_id(), EntryState.ACTIVE, False, 1)
    assert not eligible(active, 100, zero)
    assert not eligible(tombstone(1, tagged=True), 100, zero)


def test_eligibility_ignores_whether_compaction_is_enabled() -> None:
    assert eligible(tombstone(1), 20, CompactionPolicy(enabled=False))


def test_selection_is_in_entry_id_byte_order_and_capped_by_limit() -> None:
    ids = ["mem_ent_" + c * 32 for c in "f0a5"]
    items = [tombstone(1, entry_id=i) for i in ids]
    items.append(tombstone(15, entry_id="mem_ent_" + "1" * 32))  # too recent
    chosen = select_for_compaction(items, 20, POLICY)
    assert [c.entry_id for c in chosen] == sorted(ids)
    assert [c.entry_id for c in select_for_compaction(items, 20, POLICY, 2)] == sorted(ids)[:2]
    assert len(select_for_compaction(items, 20, POLICY, 0)) == 4
    with pytest.raises(ValueError, match="limit"):
        select_for_compaction(items, 20, POLICY, -1)


def test_compaction_changes_name_the_dropped_version_and_null() -> None:
    item = tombstone()
    assert compaction_changes([item], "tidy") == [
        Change(ChangeOp.COMPACT, item.entry_id, item.entry_version_id, None, "tidy")
    ]


def test_noop_compaction_writes_no_revision_and_reclaims_zero() -> None:
    base = Usage(1, 2, 999)
    plan = plan_compaction([tombstone(last_change=19)], base, 20, POLICY)
    assert plan.entry_ids == ()
    assert plan.after is None
    assert plan.reclaimed_bytes == 0


def _materialised_plan(
    count: int, active: int, base_reason: str, reason: str | None, limit: int = 0
) -> None:
    """Build real manifests before and after and compare their lengths with the plan."""
    actives = [
        ManifestItem(new_entry_id(), new_version_id(), "a" * 64, EntryState.ACTIVE)
        for _ in range(active)
    ]
    stones = [
        ManifestItem(new_entry_id(), new_version_id(), "b" * 64, EntryState.INACTIVE)
        for _ in range(count)
    ]
    # The base revision's own changes: the last forget, which deactivated one of the stones.
    base_changes = [
        Change(
            ChangeOp.DEACTIVATE,
            stones[0].entry_id,
            stones[0].entry_version_id,
            stones[0].entry_version_id,
            base_reason,
        )
    ]
    before = canonical_content(actives + stones, base_changes)
    base = Usage(active, active + count, len(before))
    status = [
        TombstoneStatus(s.entry_id, s.entry_version_id, s.state, False, 1) for s in stones
    ] + [TombstoneStatus(a.entry_id, a.entry_version_id, a.state, False, 1) for a in actives]
    plan = plan_compaction(status, base, 20, POLICY, limit, reason)
    dropped = set(plan.entry_ids)
    kept = [i for i in actives + stones if i.entry_id not in dropped]
    after = canonical_content(kept, list(plan.changes))
    assert plan.after == Usage(active, len(kept), len(after))
    assert plan.reclaimed_bytes == len(before) - len(after)


def test_reclaimed_bytes_equals_materialised_before_minus_after() -> None:
    _materialised_plan(count=3, active=2, base_reason="forget", reason=None)
    _materialised_plan(count=5, active=0, base_reason="", reason="retention", limit=2)


def test_reclaimed_bytes_is_negative_when_the_reason_outweighs_the_items() -> None:
    tombstones = [tombstone() for _ in range(2)]
    base_bytes = 87 + 2 + 2 * 224 + 1  # two tombstones, no changes
    plan = plan_compaction(tombstones, Usage(0, 2, base_bytes), 20, POLICY, reason="r" * 2000)
    assert plan.entry_ids
    assert plan.reclaimed_bytes < 0


@settings(max_examples=50)
@given(
    st.integers(1, 6),
    st.integers(0, 4),
    st.text(max_size=30),
    st.none() | st.text(max_size=300),
    st.integers(0, 7),
)
def test_plan_matches_materialised_content(
    count: int, active: int, base_reason: str, reason: str | None, limit: int
) -> None:
    _materialised_plan(count, active, base_reason, reason, limit)


def test_compaction_disabled_error() -> None:
    error = compaction_disabled_error()
    assert (error.kind, error.reason) == (ErrorKind.PRECONDITION, "COMPACTION_DISABLED")


def test_age_cutoff_is_the_latest_old_enough_state_change() -> None:
    assert age_cutoff(12, POLICY) == 2
    assert age_cutoff(5, POLICY) == -5  # nothing can be old enough yet
    assert age_cutoff(12, CompactionPolicy(min_tombstone_revisions=0)) is None
