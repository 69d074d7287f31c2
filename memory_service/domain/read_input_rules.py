"""Input rules of the reads (ListMemory, SearchMemory, capacity, history, changes, citations);
a malformed memory_ref is not one of them: it reads as an absent memory."""

from __future__ import annotations

from collections.abc import Sequence

from memory_service.domain.change_pages import decode_page_token
from memory_service.domain.commands import (
    CapacityQuery,
    ChangesQuery,
    CitationQuery,
    ListQuery,
    Rank,
    RevisionsQuery,
    SearchMode,
    SearchQuery,
)
from memory_service.domain.ids import is_entry_id, is_version_id
from memory_service.domain.write_input_rules import MAX_KIND_CHARS, MAX_TAG_CHARS, MAX_TAGS
from servicekit.errors import FieldViolation

MAX_QUERY_CHARS = 4096
# Far beyond any context window; larger numbers are a caller's bug, not a budget.
MAX_TOKEN_BUDGET = 1_000_000_000
MAX_RUN_ID_CHARS = 128
MAX_SEARCH_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 10
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


def _query(query: str, required: bool, why: str) -> list[FieldViolation]:
    if required and not query.strip():
        return [FieldViolation("query", f"is required {why} (1..{MAX_QUERY_CHARS} characters)")]
    if len(query) > MAX_QUERY_CHARS or "\x00" in query:
        return [FieldViolation("query", f"must be 1..{MAX_QUERY_CHARS} characters without NUL")]
    return []


def _revision(revision: int | None) -> list[FieldViolation]:
    if revision is not None and revision < 1:
        return [FieldViolation("revision", "must be >= 1 when set (unset = the head)")]
    return []


def _tag(value: str, field: str) -> list[FieldViolation]:
    if not value or len(value) > MAX_TAG_CHARS or not value.isprintable():
        return [FieldViolation(field, f"must be 1..{MAX_TAG_CHARS} printable characters")]
    return []


def validate_list(query: ListQuery) -> list[FieldViolation]:
    """The memory_ref is not checked here: a malformed one reads as an empty memory."""
    found = [FieldViolation(name, "is not a value this server knows") for name in query.unknown]
    if query.limit < 0:
        found.append(FieldViolation("limit", "must be >= 0 (0 = no count limit)"))
    if not 0 <= query.token_budget <= MAX_TOKEN_BUDGET:
        found.append(
            FieldViolation("token_budget", f"must be 0..{MAX_TOKEN_BUDGET} (0 = no budget)")
        )
    if query.tag:
        found.extend(_tag(query.tag, "tag"))
    found.extend(_query(query.query, query.rank is Rank.RELEVANCE, "for RANK_RELEVANCE"))
    found.extend(_revision(query.revision))
    run_id = query.run_id
    if run_id and (len(run_id) > MAX_RUN_ID_CHARS or not run_id.isprintable()):
        found.append(
            FieldViolation("run_id", f"must be 1..{MAX_RUN_ID_CHARS} printable characters")
        )
    return found


def validate_search(query: SearchQuery) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if query.mode is None:
        found.append(FieldViolation("mode", "must be SEARCH_MODE_SEMANTIC or SEARCH_MODE_FILTER"))
    semantic = query.mode is SearchMode.SEMANTIC
    found.extend(_query(query.query, semantic, "for SEARCH_MODE_SEMANTIC"))
    if not 0 <= query.limit <= MAX_SEARCH_LIMIT:
        found.append(FieldViolation("limit", f"must be 1..{MAX_SEARCH_LIMIT} (0 = 10)"))
    found.extend(_tags(query.tags))
    kind = query.kind
    if kind is not None and (len(kind) > MAX_KIND_CHARS or not kind.isprintable()):
        found.append(FieldViolation("kind", f"must be 0..{MAX_KIND_CHARS} printable characters"))
    found.extend(_revision(query.revision))
    return found


def _tags(tags: Sequence[str]) -> list[FieldViolation]:
    if len(tags) > MAX_TAGS:
        return [FieldViolation("tags", f"at most {MAX_TAGS} tags")]
    return [v for index, tag in enumerate(tags) for v in _tag(tag, f"tags[{index}]")]


def validate_capacity(query: CapacityQuery) -> list[FieldViolation]:
    if query.revision is not None and query.revision < 1:
        return [FieldViolation("revision", "must be >= 1 when set")]
    return []


def validate_revisions(query: RevisionsQuery) -> list[FieldViolation]:
    """The window's shape; its bounds against the head and the history limit are the use
    case's (they depend on the stored memory)."""
    found: list[FieldViolation] = []
    if query.since < 0:
        found.append(FieldViolation("since", "must be >= 0"))
    if query.through < 0:
        found.append(FieldViolation("through", "must be >= 0 (0 = the head)"))
    elif query.through and query.since > query.through:
        found.append(FieldViolation("through", "must be >= since"))
    return found


def validate_changes(query: ChangesQuery) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if query.revision is not None and query.revision < 1:
        found.append(FieldViolation("revision", "must be >= 1"))
    if query.since is not None and query.since < 0:
        found.append(FieldViolation("since", "must be >= 0"))
    if not 0 <= query.page_size <= MAX_PAGE_SIZE:
        found.append(FieldViolation("page_size", f"must be 0..{MAX_PAGE_SIZE} (0 = default)"))
    if query.page_token and decode_page_token(query.page_token) is None:
        found.append(FieldViolation("page_token", "is not a token this server issued"))
    return found


def validate_citation(query: CitationQuery) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if query.revision < 1:
        found.append(FieldViolation("revision", "must be >= 1"))
    if not is_entry_id(query.entry_id):
        found.append(FieldViolation("entry_id", "must be mem_ent_ + 32 hex"))
    if not is_version_id(query.entry_version_id):
        found.append(FieldViolation("entry_version_id", "must be mem_ver_ + 32 hex"))
    return found
