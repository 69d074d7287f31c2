"""The capacity contract: budget, usage, which operations may grow what, and the refusal."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from servicekit.errors import DomainError, ErrorKind, FieldViolation, PreconditionDetail


class Dimension(enum.StrEnum):
    """A measured dimension; the member order is the fixed evaluation and reporting order."""

    MANIFEST_BYTES = "manifest_bytes"
    MANIFEST_ENTRIES = "manifest_entries"
    ACTIVE_ENTRIES = "active_entries"


DIMENSION_ORDER: tuple[Dimension, ...] = tuple(Dimension)


class Operation(enum.StrEnum):
    """A write operation, named for the growth table."""

    APPEND = "append"
    REVISE = "revise"
    FORGET = "forget"
    REACTIVATE = "reactivate"
    ORGANIZE = "organize"
    COMPACT = "compact"


# Only dimensions listed here are ever checked for an operation, so relief (forget, organize,
# compact) can never be refused by construction rather than by convention.
GROWTH: dict[Operation, frozenset[Dimension]] = {
    Operation.APPEND: frozenset(Dimension),
    Operation.REVISE: frozenset(Dimension),
    Operation.REACTIVATE: frozenset({Dimension.ACTIVE_ENTRIES}),
    Operation.FORGET: frozenset(),
    Operation.ORGANIZE: frozenset(),
    Operation.COMPACT: frozenset(),
}


@dataclass(frozen=True)
class CapacityBudget:
    """The ceiling applied to every memory; configuration, validated once at start."""

    max_active_entries: int = 5_000
    max_manifest_entries: int = 10_000
    max_manifest_bytes: int = 4 * 1024 * 1024

    def violations(self) -> list[FieldViolation]:
        """Everything wrong with this budget, each naming its field; empty when valid."""
        found: list[FieldViolation] = []
        if self.max_active_entries < 1:
            found.append(FieldViolation("max_active_entries", "must be at least 1"))
        if self.max_manifest_entries < 1:
            found.append(FieldViolation("max_manifest_entries", "must be at least 1"))
        if self.max_active_entries > self.max_manifest_entries:
            found.append(FieldViolation("max_active_entries", "cannot exceed max_manifest_entries"))
        if self.max_manifest_bytes < 1024:
            found.append(FieldViolation("max_manifest_bytes", "must be at least 1024"))
        return found

    def limit(self, dimension: Dimension) -> int:
        match dimension:
            case Dimension.MANIFEST_BYTES:
                return self.max_manifest_bytes
            case Dimension.MANIFEST_ENTRIES:
                return self.max_manifest_entries
            case Dimension.ACTIVE_ENTRIES:
                return self.max_active_entries


@dataclass(frozen=True)
class Usage:
    """The measured dimensions of one exact revision (derived from its manifest, never stored
    redundantly); a memory that does not exist yet has Usage(0, 0, 0)."""

    active_entries: int
    manifest_entries: int
    manifest_bytes: int

    def value(self, dimension: Dimension) -> int:
        match dimension:
            case Dimension.MANIFEST_BYTES:
                return self.manifest_bytes
            case Dimension.MANIFEST_ENTRIES:
                return self.manifest_entries
            case Dimension.ACTIVE_ENTRIES:
                return self.active_entries


EMPTY_USAGE = Usage(0, 0, 0)


@dataclass(frozen=True)
class Refusal:
    """The dimension that bound, its configured limit, and what the write would have produced."""

    dimension: Dimension
    limit: int
    observed: int


def check_growth(
    op: Operation, base: Usage | None, prepared: Usage, budget: CapacityBudget
) -> Refusal | None:
    """Decide a fully prepared next revision against the budget; None means it may be written.

    A dimension refuses only when the prepared value exceeds the limit AND exceeds the base
    revision's value, so a memory over a lowered budget still takes writes that do not make the
    breach worse. The first refusing dimension in DIMENSION_ORDER is reported, so the answer is
    a pure function of (op, base, prepared, budget): the same write on the same head fails alike.
    """
    start = base if base is not None else EMPTY_USAGE
    grows = GROWTH[op]
    for dimension in DIMENSION_ORDER:
        if dimension not in grows:
            continue
        limit = budget.limit(dimension)
        observed = prepared.value(dimension)
        if observed > limit and observed > start.value(dimension):
            return Refusal(dimension, limit, observed)
    return None


def exceeded(usage: Usage, budget: CapacityBudget) -> list[Dimension]:
    """The dimensions over budget in this usage, in DIMENSION_ORDER (GetCapacity.exceeded)."""
    return [d for d in DIMENSION_ORDER if usage.value(d) > budget.limit(d)]


def capacity_exceeded_error(refusal: Refusal) -> DomainError:
    """FAILED_PRECONDITION / MEMORY_CAPACITY_EXCEEDED with dimension, limit and observed."""
    description = (
        f"memory capacity budget is exceeded: {refusal.dimension} "
        f"{refusal.observed} > {refusal.limit}"
    )
    return DomainError(
        ErrorKind.PRECONDITION,
        "MEMORY_CAPACITY_EXCEEDED",
        description,
        metadata={
            "dimension": refusal.dimension.value,
            "limit": str(refusal.limit),
            "observed": str(refusal.observed),
        },
        detail=PreconditionDetail(
            type="CAPACITY", subject=refusal.dimension.value, description=description
        ),
    )
