"""The memory service's documented refusals (DESIGN 11), as DomainErrors with structured fields."""

from __future__ import annotations

from collections.abc import Sequence

from servicekit.errors import DomainError, ErrorKind, RetryDetail


def memory_not_found() -> DomainError:
    """Absent, foreign and malformed refs all read alike, so the message names none of them."""
    return DomainError(ErrorKind.NOT_FOUND, "MEMORY_NOT_FOUND", "no such memory")


def entry_not_found(entry_ids: Sequence[str]) -> DomainError:
    """Entries absent from the head manifest (never written, or compacted away)."""
    shown = list(entry_ids[:10])
    return DomainError(
        ErrorKind.NOT_FOUND,
        "ENTRY_NOT_FOUND",
        f"no such entry in this memory: {', '.join(shown)}",
        metadata={"entryIds": ",".join(shown)},
    )


def entry_version_not_found() -> DomainError:
    return DomainError(ErrorKind.NOT_FOUND, "ENTRY_NOT_FOUND", "no such entry version")


def revision_not_found(revision: int, head: int) -> DomainError:
    return DomainError(
        ErrorKind.NOT_FOUND,
        "REVISION_NOT_FOUND",
        f"revision {revision} does not exist (head is {head})",
        metadata={"revision": str(revision), "head": str(head)},
    )


def revision_conflict(expected: int, actual: int) -> DomainError:
    """ABORTED: the caller's view of the head is stale; re-read and retry with a new request_id."""
    return DomainError(
        ErrorKind.CONFLICT,
        "REVISION_CONFLICT",
        f"expected head revision {expected}, but the head is {actual}",
        metadata={"expected": str(expected), "actual": str(actual)},
    )


def history_window_exceeded(requested: int, limit: int) -> DomainError:
    return DomainError(
        ErrorKind.PRECONDITION,
        "HISTORY_WINDOW_EXCEEDED",
        f"a history window of {requested} revisions exceeds the limit of {limit}; "
        "read it in bounded windows",
        metadata={"requested": str(requested), "limit": str(limit)},
    )


def relevance_unavailable() -> DomainError:
    """No embedder: never a fabricated ranking (RFC 0113, DESIGN 4.7)."""
    return DomainError(
        ErrorKind.PRECONDITION,
        "RELEVANCE_UNAVAILABLE",
        "semantic ranking is not available on this server (no embedder); use RANK_RECENCY or "
        "SEARCH_MODE_FILTER",
    )


def budget_link_unavailable(why: str) -> DomainError:
    """run_id was given but the budget service cannot be asked (not configured, or refused us)."""
    return DomainError(
        ErrorKind.PRECONDITION,
        "BUDGET_LINK_UNAVAILABLE",
        f"run_id cannot be honoured: {why}",
    )


def budget_unavailable(code: str) -> DomainError:
    return DomainError(
        ErrorKind.UNAVAILABLE,
        "BUDGET_UNAVAILABLE",
        f"budget_service did not answer Check ({code}); retry",
        detail=RetryDetail(0.5),
    )


def run_not_found() -> DomainError:
    return DomainError(ErrorKind.NOT_FOUND, "RUN_NOT_FOUND", "no such run")
