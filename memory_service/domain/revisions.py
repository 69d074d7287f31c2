"""The next revision of each write, fully prepared before anything is written (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memory_service.domain.capacity import CapacityBudget, Operation, Refusal, Usage, check_growth
from memory_service.domain.compaction import CompactionPlan
from memory_service.domain.manifest import Change, ChangeOp, EntryState, manifest_bytes
from memory_service.domain.records import Head, HeadItem
from memory_service.usecases.preparation import PreparedEntry

DEDUPE_REASON = "dedupe"


@dataclass(frozen=True)
class NewVersion:
    """An entry version to insert: prepared content plus its place in the entry's lineage."""

    entry: PreparedEntry
    version: int
    previous_version_id: str | None


@dataclass(frozen=True)
class NewItem:
    """A manifest item range that opens at the planned revision."""

    entry_id: str
    entry_version_id: str
    entry_content_hash: str
    state: EntryState
    has_tags: bool
    last_state_change_revision: int


def _entry_key(entry_id: str) -> bytes:
    return entry_id.encode("utf-8")


@dataclass(frozen=True)
class RevisionPlan:
    """Revision base+1 as a delta: its changes, the versions it creates, and the item ranges it
    closes (`closed`, by entry id) and opens. The counts and canonical bytes follow from these,
    so the capacity check sees exactly what would be written."""

    operation: Operation
    base: Head
    changes: tuple[Change, ...]
    closed: tuple[str, ...] = ()
    opened: tuple[NewItem, ...] = ()
    versions: tuple[NewVersion, ...] = ()
    active_count: int = field(init=False)
    inactive_count: int = field(init=False)
    manifest_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.changes, key=lambda c: _entry_key(c.entry_id)))
        object.__setattr__(self, "changes", ordered)
        delta = {EntryState.ACTIVE: 0, EntryState.INACTIVE: 0}
        for item in self.opened:
            delta[item.state] += 1
        active = self.base.active_count + delta[EntryState.ACTIVE] - self._closed(EntryState.ACTIVE)
        inactive = (
            self.base.inactive_count
            + delta[EntryState.INACTIVE]
            - self._closed(EntryState.INACTIVE)
        )
        object.__setattr__(self, "active_count", active)
        object.__setattr__(self, "inactive_count", inactive)
        object.__setattr__(self, "manifest_bytes", manifest_bytes(active, inactive, ordered))

    def _closed(self, state: EntryState) -> int:
        # Each closed range belongs to exactly one change, and the op says which state it left:
        # revise and deactivate close active items, reactivate and compact close tombstones.
        leaving = {
            EntryState.ACTIVE: (ChangeOp.REVISE, ChangeOp.DEACTIVATE),
            EntryState.INACTIVE: (ChangeOp.REACTIVATE, ChangeOp.COMPACT),
        }[state]
        return sum(1 for change in self.changes if change.op in leaving)

    @property
    def revision(self) -> int:
        return self.base.revision + 1

    @property
    def is_noop(self) -> bool:
        """Nothing changes: no revision is created and the head answers."""
        return not self.changes

    @property
    def prepared(self) -> Usage:
        return Usage(
            active_entries=self.active_count,
            manifest_entries=self.active_count + self.inactive_count,
            manifest_bytes=self.manifest_bytes,
        )

    def refusal(self, budget: CapacityBudget) -> Refusal | None:
        """The capacity decision on this fully prepared revision (None: it may be written)."""
        return check_growth(self.operation, self.base.usage, self.prepared, budget)


def plan_append(head: Head, entries: Sequence[PreparedEntry]) -> RevisionPlan:
    revision = head.revision + 1
    return RevisionPlan(
        operation=Operation.APPEND,
        base=head,
        changes=tuple(Change(ChangeOp.ADD, e.entry_id, None, e.entry_version_id) for e in entries),
        opened=tuple(
            NewItem(
                e.entry_id,
                e.entry_version_id,
                e.content_hash,
                EntryState.ACTIVE,
                bool(e.tags),
                revision,
            )
            for e in entries
        ),
        versions=tuple(NewVersion(e, 1, None) for e in entries),
    )


def plan_revise(head: Head, item: HeadItem, entry: PreparedEntry, reason: str) -> RevisionPlan:
    """A new version of an active entry; its compaction age is untouched (not a state change)."""
    if item.state is not EntryState.ACTIVE:
        raise ValueError("only active entries can be revised")
    return RevisionPlan(
        operation=Operation.REVISE,
        base=head,
        changes=(
            Change(
                ChangeOp.REVISE,
                item.entry_id,
                item.entry_version_id,
                entry.entry_version_id,
                reason or None,
            ),
        ),
        closed=(item.entry_id,),
        opened=(
            NewItem(
                item.entry_id,
                entry.entry_version_id,
                entry.content_hash,
                EntryState.ACTIVE,
                bool(entry.tags),
                item.last_state_change_revision,
            ),
        ),
        versions=(NewVersion(entry, item.version + 1, item.entry_version_id),),
    )


def _set_state(
    head: Head, items: Iterable[HeadItem], target: EntryState, op: Operation, reason: str | None
) -> RevisionPlan:
    revision = head.revision + 1
    change_op = ChangeOp.DEACTIVATE if target is EntryState.INACTIVE else ChangeOp.REACTIVATE
    moving = [item for item in items if item.state is not target]  # the rest are no-ops
    return RevisionPlan(
        operation=op,
        base=head,
        changes=tuple(
            Change(change_op, i.entry_id, i.entry_version_id, i.entry_version_id, reason)
            for i in moving
        ),
        closed=tuple(item.entry_id for item in moving),
        opened=tuple(
            NewItem(
                i.entry_id, i.entry_version_id, i.entry_content_hash, target, i.has_tags, revision
            )
            for i in moving
        ),
    )


def plan_forget(head: Head, items: Iterable[HeadItem], reason: str) -> RevisionPlan:
    return _set_state(head, items, EntryState.INACTIVE, Operation.FORGET, reason or None)


def plan_reactivate(head: Head, items: Iterable[HeadItem], reason: str) -> RevisionPlan:
    return _set_state(head, items, EntryState.ACTIVE, Operation.REACTIVATE, reason or None)


def duplicates_to_retire(active: Iterable[HeadItem]) -> list[HeadItem]:
    """Active items whose content hash an earlier active item already has.

    The earliest is the one whose current version was written first (created_in_revision),
    ties (one batch) by entry_id bytes, so the choice is deterministic.
    """
    keep: dict[str, HeadItem] = {}
    retire: list[HeadItem] = []
    ordered = sorted(
        (item for item in active if item.state is EntryState.ACTIVE),
        key=lambda i: (i.created_in_revision, _entry_key(i.entry_id)),
    )
    for item in ordered:
        if item.entry_content_hash in keep:
            retire.append(item)
        else:
            keep[item.entry_content_hash] = item
    return retire


def plan_dedupe(head: Head, active: Iterable[HeadItem]) -> RevisionPlan:
    retire = duplicates_to_retire(active)
    return _set_state(head, retire, EntryState.INACTIVE, Operation.ORGANIZE, DEDUPE_REASON)


def plan_compaction_revision(head: Head, compaction: CompactionPlan) -> RevisionPlan:
    """The revision that drops the planned tombstones: ranges close, none opens."""
    plan = RevisionPlan(
        operation=Operation.COMPACT,
        base=head,
        changes=compaction.changes,
        closed=compaction.entry_ids,
    )
    if compaction.after is not None and plan.prepared != compaction.after:
        raise AssertionError("compaction plan and revision plan disagree on the usage")
    return plan
