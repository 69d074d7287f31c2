"""Revision plans: the prepared next revision's counts and bytes are exactly what it encodes to."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.domain.capacity import CapacityBudget, Dimension, Operation
from memory_service.domain.compaction import CompactionPolicy, TombstoneStatus, plan_compaction
from memory_service.domain.ids import new_entry_id, new_version_id
from memory_service.domain.manifest import ChangeOp, EntryState, ManifestItem, canonical_content
from memory_service.domain.records import Head, HeadItem
from memory_service.domain.revisions import (
    RevisionPlan,
    duplicates_to_retire,
    plan_append,
    plan_compaction_revision,
    plan_dedupe,
    plan_forget,
    plan_reactivate,
    plan_revise,
)
from memory_service.domain.token_counters import TokenCounter
from memory_service.usecases.preparation import PreparedEntry

HASHES = ("a" * 64, "b" * 64, "c" * 64)


def prepared(content_hash: str = HASHES[0], tags: tuple[str, ...] = ()) -> PreparedEntry:
    return PreparedEntry(
        entry_id=new_entry_id(),
        entry_version_id=new_version_id(),
        kind="",
        content="text",
        tags=tags,
        metadata={},
        content_hash=content_hash,
        expires_at=None,
        sizes=dict.fromkeys(TokenCounter, 1),
    )


def item(state: EntryState, content_hash: str = HASHES[0], created: int = 1) -> HeadItem:
    return HeadItem(
        new_entry_id(), new_version_id(), content_hash, state, False, created, 1, created
    )


def head_of(items: list[HeadItem], revision: int = 3) -> Head:
    active = sum(i.state is EntryState.ACTIVE for i in items)
    manifest = [
        ManifestItem(i.entry_id, i.entry_version_id, i.entry_content_hash, i.state) for i in items
    ]
    # The base's own bytes do not matter to the plan: any value stands for "whatever it was".
    return Head(None, revision, active, len(items) - active, len(canonical_content(manifest, [])))


def applied(items: list[HeadItem], plan: RevisionPlan) -> list[ManifestItem]:
    """The next manifest, materialised: close the planned ranges, open the new ones."""
    kept = [i for i in items if i.entry_id not in plan.closed]
    manifest = [
        ManifestItem(i.entry_id, i.entry_version_id, i.entry_content_hash, i.state) for i in kept
    ]
    manifest += [
        ManifestItem(o.entry_id, o.entry_version_id, o.entry_content_hash, o.state)
        for o in plan.opened
    ]
    return manifest


def assert_exact(items: list[HeadItem], plan: RevisionPlan) -> None:
    manifest = applied(items, plan)
    assert plan.manifest_bytes == len(canonical_content(manifest, plan.changes))
    assert plan.active_count == sum(m.state is EntryState.ACTIVE for m in manifest)
    assert plan.active_count + plan.inactive_count == len(manifest)


states = st.lists(st.sampled_from(EntryState), max_size=12)


@settings(max_examples=60)
@given(states=states, picks=st.lists(st.integers(0, 11), max_size=6), adds=st.integers(1, 4))
def test_every_plan_encodes_to_its_reported_bytes(
    states: list[EntryState], picks: list[int], adds: int
) -> None:
    items = [item(s, HASHES[n % 3], created=n + 1) for n, s in enumerate(states)]
    head = head_of(items)
    chosen = (
        list({items[p % len(items)].entry_id: items[p % len(items)] for p in picks}.values())
        if items
        else []
    )
    assert_exact(items, plan_append(head, [prepared() for _ in range(adds)]))
    assert_exact(items, plan_forget(head, chosen, "why"))
    assert_exact(items, plan_reactivate(head, chosen, ""))
    assert_exact(items, plan_dedupe(head, items))
    active = [i for i in chosen if i.state is EntryState.ACTIVE]
    if active:
        assert_exact(items, plan_revise(head, active[0], prepared(HASHES[2]), "fix"))
    tombstones = [
        TombstoneStatus(i.entry_id, i.entry_version_id, i.state, False, 1)
        for i in items
        if i.state is EntryState.INACTIVE
    ]
    compaction = plan_compaction(
        tombstones, head.usage, 3, CompactionPolicy(min_tombstone_revisions=0)
    )
    assert_exact(items, plan_compaction_revision(head, compaction))


def test_append_grows_everything_and_starts_versions_at_1() -> None:
    head = Head(None, 0, 0, 0, 0)
    entries = [prepared(tags=("t",)), prepared()]
    plan = plan_append(head, entries)
    assert plan.revision == 1
    assert (plan.active_count, plan.inactive_count) == (2, 0)
    assert [v.version for v in plan.versions] == [1, 1]
    assert [o.has_tags for o in plan.opened] == [True, False]
    assert all(o.last_state_change_revision == 1 for o in plan.opened)
    assert [c.entry_id for c in plan.changes] == sorted(e.entry_id for e in entries)


def test_revise_numbers_the_next_version_and_keeps_the_compaction_age() -> None:
    current = replace(item(EntryState.ACTIVE), version=4, last_state_change_revision=2)
    new = prepared(HASHES[1])
    plan = plan_revise(head_of([current], revision=7), current, new, "")
    assert plan.versions[0].version == 5
    assert plan.versions[0].previous_version_id == current.entry_version_id
    assert plan.opened[0].last_state_change_revision == 2
    (change,) = plan.changes
    assert (change.op, change.from_entry_version_id, change.to_entry_version_id, change.reason) == (
        ChangeOp.REVISE,
        current.entry_version_id,
        new.entry_version_id,
        None,
    )


def test_state_changes_skip_entries_already_in_that_state() -> None:
    gone, live = item(EntryState.INACTIVE), item(EntryState.ACTIVE)
    head = head_of([gone, live])
    assert plan_forget(head, [gone], "").is_noop
    assert plan_reactivate(head, [live], "").is_noop
    plan = plan_forget(head, [gone, live], "old")
    assert [(c.entry_id, c.op, c.reason) for c in plan.changes] == [
        (live.entry_id, ChangeOp.DEACTIVATE, "old")
    ]
    assert plan.opened[0].last_state_change_revision == head.revision + 1


def test_dedupe_keeps_the_earliest_written_copy_then_the_smallest_id() -> None:
    late = item(EntryState.ACTIVE, HASHES[0], created=5)
    early = item(EntryState.ACTIVE, HASHES[0], created=2)
    twins = sorted(
        (item(EntryState.ACTIVE, HASHES[1], created=3) for _ in range(2)), key=lambda i: i.entry_id
    )
    unique = item(EntryState.ACTIVE, HASHES[2])
    retired = duplicates_to_retire([late, twins[1], unique, early, twins[0]])
    assert {i.entry_id for i in retired} == {late.entry_id, twins[1].entry_id}
    plan = plan_dedupe(head_of([late, early, *twins, unique]), [late, early, *twins, unique])
    assert plan.operation is Operation.ORGANIZE
    assert {c.reason for c in plan.changes} == {"dedupe"}


def test_refusal_is_decided_on_the_prepared_revision() -> None:
    budget = CapacityBudget(
        max_active_entries=2, max_manifest_entries=10, max_manifest_bytes=1 << 20
    )
    items = [item(EntryState.ACTIVE), item(EntryState.ACTIVE)]
    head = head_of(items)
    refusal = plan_append(head, [prepared()]).refusal(budget)
    assert refusal is not None
    assert (refusal.dimension, refusal.limit, refusal.observed) == (Dimension.ACTIVE_ENTRIES, 2, 3)
    assert plan_forget(head, items, "").refusal(budget) is None
