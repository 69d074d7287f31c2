"""Compaction: which tombstones may leave the manifest, in what order, and what it reclaims."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from memory_service.domain.capacity import Usage
from memory_service.domain.manifest import Change, ChangeOp, EntryState, manifest_bytes
from servicekit.errors import DomainError, ErrorKind, FieldViolation


@dataclass(frozen=True)
class CompactionPolicy:
    """Disabled by default because a compacted entry can no longer be reactivated."""

    enabled: bool = False
    min_tombstone_revisions: int = 10  # 0 disables the age check (tags still protect)

    def violations(self) -> list[FieldViolation]:
        if self.min_tombstone_revisions < 0:
            return [FieldViolation("min_tombstone_revisions", "must be at least 0")]
        return []


class CompactionCandidate(Protocol):
    """What eligibility needs to know about a manifest item; the store supplies it."""

    @property
    def entry_id(self) -> str: ...
    @property
    def entry_version_id(self) -> str: ...
    @property
    def state(self) -> EntryState: ...
    @property
    def has_tags(self) -> bool: ...

    # The revision in which the entry was last added, deactivated or reactivated.
    @property
    def last_state_change_revision(self) -> int: ...


@dataclass(frozen=True)
class TombstoneStatus:
    """A plain CompactionCandidate, for callers that have no richer row type."""

    entry_id: str
    entry_version_id: str
    state: EntryState
    has_tags: bool
    last_state_change_revision: int


C = TypeVar("C", bound=CompactionCandidate)


def eligible(item: CompactionCandidate, head_revision: int, policy: CompactionPolicy) -> bool:
    """True when the item is an untagged tombstone outside the recovery window.

    `head_revision` is the base revision compaction reads (the head it previews). The last N
    revisions are H-N+1..H, so "not added, deactivated or reactivated within the last N
    revisions" means last_state_change_revision <= H - N: deactivated at 2 qualifies at head
    12 with N = 10 (the capacity RFC's example), not at head 11. Eligibility ignores
    `policy.enabled`, because previews work while compaction is disabled.
    """
    if item.state is not EntryState.INACTIVE or item.has_tags:
        return False
    cutoff = age_cutoff(head_revision, policy)
    return cutoff is None or item.last_state_change_revision <= cutoff


def age_cutoff(head_revision: int, policy: CompactionPolicy) -> int | None:
    """The latest last_state_change_revision old enough to compact at this head (None: any).

    The one statement of the age rule, shared by `eligible` and the store's count of
    compactable tombstones, which filters on it in SQL rather than loading every tombstone.
    """
    n = policy.min_tombstone_revisions
    return None if n == 0 else head_revision - n


def select_for_compaction(
    items: Iterable[C], head_revision: int, policy: CompactionPolicy, limit: int | None = None
) -> list[C]:
    """Eligible items in entry_id UTF-8 byte order, at most `limit` of them (0/None: all)."""
    if limit is not None and limit < 0:
        raise ValueError("limit must be non-negative")
    chosen = [item for item in items if eligible(item, head_revision, policy)]
    chosen.sort(key=lambda item: item.entry_id.encode("utf-8"))
    return chosen[:limit] if limit else chosen


def compaction_changes(dropped: Sequence[CompactionCandidate], reason: str | None) -> list[Change]:
    """One `compact` change per dropped item: from its version, to null."""
    return [
        Change(ChangeOp.COMPACT, item.entry_id, item.entry_version_id, None, reason)
        for item in dropped
    ]


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction of `base` would write; `after` is None for a no-op (no revision)."""

    entry_ids: tuple[str, ...]
    changes: tuple[Change, ...]
    base: Usage
    after: Usage | None
    reclaimed_bytes: int  # signed: base bytes - after bytes; 0 for a no-op


def plan_compaction(
    items: Iterable[CompactionCandidate],
    base: Usage,
    head_revision: int,
    policy: CompactionPolicy,
    limit: int | None = None,
    reason: str | None = None,
) -> CompactionPlan:
    """Plan the compaction of the revision `head_revision` whose usage is `base`.

    `items` may be the whole manifest or just its tombstones. The next revision keeps every
    other item and carries only the compact changes (a revision's changes are its own delta,
    so the base's changes are not repeated), which is why reclaimed_bytes can be negative
    with a long reason. A compaction that drops nothing creates no revision and reclaims 0.
    """
    dropped = select_for_compaction(items, head_revision, policy, limit)
    if not dropped:
        return CompactionPlan((), (), base, None, 0)
    changes = compaction_changes(dropped, reason)
    manifest_entries = base.manifest_entries - len(dropped)
    inactive = manifest_entries - base.active_entries
    if inactive < 0:
        raise ValueError("base usage has fewer tombstones than the items to drop")
    after = Usage(
        active_entries=base.active_entries,
        manifest_entries=manifest_entries,
        manifest_bytes=manifest_bytes(base.active_entries, inactive, changes),
    )
    return CompactionPlan(
        entry_ids=tuple(item.entry_id for item in dropped),
        changes=tuple(changes),
        base=base,
        after=after,
        reclaimed_bytes=base.manifest_bytes - after.manifest_bytes,
    )


def compaction_disabled_error() -> DomainError:
    """A real (non dry-run) compaction while the policy is disabled."""
    return DomainError(
        ErrorKind.PRECONDITION,
        "COMPACTION_DISABLED",
        "compaction is disabled on this server; dry runs are always allowed",
    )
