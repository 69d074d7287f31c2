"""Input rules of ListMemory and SearchMemory; a malformed memory_ref is not one of them."""

from __future__ import annotations

from collections.abc import Sequence

from memory_service.domain.commands import ListQuery, Rank, SearchMode, SearchQuery
from memory_service.domain.write_input_rules import MAX_KIND_CHARS, MAX_TAG_CHARS, MAX_TAGS
from servicekit.errors import FieldViolation

MAX_QUERY_CHARS = 4096
# Far beyond any context window; larger numbers are a caller's bug, not a budget.
MAX_TOKEN_BUDGET = 1_000_000_000
MAX_RUN_ID_CHARS = 128
MAX_SEARCH_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 10


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
