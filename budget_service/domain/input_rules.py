"""Input validation of the budget domain: policies, scope budgets, amounts, ids and paging."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from budget_service.domain.policy import (
    MAX_MODEL_CALLS,
    POOL_ONLY_SCOPES,
    BudgetPolicy,
    Dimension,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)
from servicekit.errors import FieldViolation
from servicekit.redaction import redact

MAX_GLOBS = 64
MAX_GLOB_LENGTH = 200
MAX_IDENTIFIER_LENGTH = 200  # model ids: provider ids can be long paths
MAX_ID_LENGTH = 128  # run, project, workflow, agent, scope, reservation and request ids
MAX_PAGE_SIZE = 1000
_GLOB_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/@+-*")
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")
_SPACE = re.compile(r"\s")  # the characters str.isspace() accepts, searched in C
_AMOUNT_LIMITS = tuple((d, d.field_name, d.spec.max_amount) for d in Dimension)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def check_int(value: object, path: str, low: int, high: int) -> list[FieldViolation]:
    """Violations for an integer that must lie in [low, high] (bools are not integers here)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return [FieldViolation(path, "must be an integer")]
    if value < low:
        return [FieldViolation(path, f"must be at least {low}")]
    if value > high:
        return [FieldViolation(path, f"must be at most {high}")]
    return []


def validate_identifier(
    value: str, path: str, max_length: int = MAX_IDENTIFIER_LENGTH
) -> list[FieldViolation]:
    """Model ids and scope ids: non-empty, bounded, printable, no whitespace."""
    if not value:
        return [FieldViolation(path, "must not be empty")]
    if len(value) > max_length:
        return [FieldViolation(path, f"must be at most {max_length} characters")]
    if not value.isprintable() or _SPACE.search(value):
        return [FieldViolation(path, "must be printable with no whitespace")]
    return []


def validate_model_id(model: str, path: str = "model") -> list[FieldViolation]:
    return validate_identifier(model, path)


def validate_id(value: str, path: str) -> list[FieldViolation]:
    """Request, reservation, project, workflow, agent and scope ids: 1..128 printable."""
    return validate_identifier(value, path, MAX_ID_LENGTH)


def validate_optional_id(value: str, path: str) -> list[FieldViolation]:
    return validate_id(value, path) if value else []


def validate_run_id(run_id: str, path: str = "run_id") -> list[FieldViolation]:
    """1..128 characters of [A-Za-z0-9._:-]: safe in logs, URLs and notification payloads."""
    found = validate_id(run_id, path)
    if not found and not _RUN_ID.match(run_id):
        found.append(FieldViolation(path, "may only contain letters, digits and . _ : -"))
    return found


def validate_note(note: str, path: str) -> list[FieldViolation]:
    """A free-text audit note (ResumeRun's `approver`): 1..128 printable characters. It is
    stored in the ledger (redacted: `stored_note`), so it is bounded and never echoed in replies
    or events."""
    if not note:
        return [FieldViolation(path, "must not be empty")]
    if len(note) > MAX_ID_LENGTH or not note.isprintable():
        return [FieldViolation(path, f"must be 1..{MAX_ID_LENGTH} printable characters")]
    return []


def stored_note(note: str) -> str:
    """The note as it may be kept: SR-1's built-in detectors (API keys, passwords,
    tokens, ...) replace what they find with `[REDACTED:<detector>]` markers."""
    return redact(note).text


def validate_request_id(request_id: str, path: str = "request_id") -> list[FieldViolation]:
    """Required on every mutating RPC: it is the idempotency key."""
    if not request_id:
        return [FieldViolation(path, "is required on mutating calls (e.g. a UUIDv7)")]
    return validate_id(request_id, path)


def _glob_problem(glob: str) -> str | None:
    if not glob:
        return "must not be empty"
    if len(glob) > MAX_GLOB_LENGTH:
        return f"must be at most {MAX_GLOB_LENGTH} characters"
    if any(c.isspace() or not c.isprintable() for c in glob):
        return "must not contain whitespace or control characters"
    if not set(glob) <= _GLOB_CHARS:
        return "may only contain letters, digits and . _ : / @ + - *"
    return None


def validate_globs(globs: Sequence[str], path: str) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if len(globs) > MAX_GLOBS:
        found.append(FieldViolation(path, f"must have at most {MAX_GLOBS} globs"))
    seen: set[str] = set()
    for i, glob in enumerate(globs):
        problem = _glob_problem(glob)
        if problem is None and glob in seen:
            problem = "duplicate glob"
        if problem is not None:
            found.append(FieldViolation(f"{path}[{i}]", problem))
        seen.add(glob)
    return found


def validate_policy(policy: BudgetPolicy, prefix: str = "policy") -> list[FieldViolation]:
    """Everything wrong with a policy, each with a dotted field path; empty when valid."""
    found: list[FieldViolation] = []
    for dimension in Dimension:
        value = policy.limit(dimension)
        if value is not None:
            spec = dimension.spec
            path = _path(prefix, spec.limit_field)
            found += check_int(value, path, spec.min_limit, spec.max_amount)
    if policy.threshold_percent is not None:
        found += check_int(policy.threshold_percent, _path(prefix, "threshold_percent"), 0, 100)
    if policy.model_allow is not None:
        found += validate_globs(policy.model_allow, _path(prefix, "model_allow"))
    found += validate_globs(policy.model_deny, _path(prefix, "model_deny"))
    if not isinstance(policy.on_exhaustion, OnExhaustion):
        found.append(FieldViolation(_path(prefix, "on_exhaustion"), "must be FAIL or INTERRUPT"))
    return found


SCOPE_NAMES = "WORKFLOW, AGENT, PROJECT, END_USER or API_KEY"
MAX_TAGS = 16
MAX_TAG_KEY = 64
MAX_TAG_VALUE = 256
_TAG_KEY = re.compile(r"[A-Za-z0-9._:/-]+")


def validate_scope_budget(budget: ScopeBudget, prefix: str = "") -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if budget.scope is Scope.RUN:
        found.append(FieldViolation(_path(prefix, "scope"), f"must be {SCOPE_NAMES}"))
    if budget.scope in POOL_ONLY_SCOPES:
        # The run's reply and events name the scope binding a limit or refusing a model by
        # the run's own owner ids: an end-user or key budget is a pool, without model lists.
        if budget.kind is ScopeBudgetKind.PER_RUN:
            found.append(FieldViolation(_path(prefix, "kind"), "must be POOLED for this scope"))
        if budget.policy.model_allow is not None or budget.policy.model_deny:
            found.append(
                FieldViolation(
                    _path(prefix, "policy"), "model lists are not allowed for this scope"
                )
            )
    found += validate_id(budget.scope_id, _path(prefix, "scope_id"))
    if budget.kind is ScopeBudgetKind.PER_RUN and budget.window is not Window.NONE:
        found.append(FieldViolation(_path(prefix, "window"), "only pooled budgets have a window"))
    if budget.model_match:
        path = _path(prefix, "model_match")
        if budget.kind is ScopeBudgetKind.PER_RUN:
            found.append(FieldViolation(path, "only pooled budgets have a model_match"))
        problem = _glob_problem(budget.model_match)
        if problem is not None:
            found.append(FieldViolation(path, problem))
    if budget.max_model_calls is not None:
        path = _path(prefix, "max_model_calls")
        if budget.kind is ScopeBudgetKind.PER_RUN:
            found.append(FieldViolation(path, "only pooled budgets bound model calls"))
        found += check_int(budget.max_model_calls, path, 0, MAX_MODEL_CALLS)
    return found + validate_policy(budget.policy, _path(prefix, "policy"))


def validate_tags(tags: Mapping[str, str], path: str = "tags") -> list[FieldViolation]:
    """Run tags: at most MAX_TAGS pairs; keys 1..64 of [A-Za-z0-9._:/-], values 0..256
    printable characters (a tag is a report key, never a credential: no free text)."""
    if len(tags) > MAX_TAGS:
        return [FieldViolation(path, f"must have at most {MAX_TAGS} tags")]
    found: list[FieldViolation] = []
    for key in sorted(tags):
        value = tags[key]
        if not 0 < len(key) <= MAX_TAG_KEY or not _TAG_KEY.fullmatch(key):
            found.append(
                FieldViolation(
                    path, f"keys must be 1..{MAX_TAG_KEY} characters of letters, digits and ._:/-"
                )
            )
        elif len(value) > MAX_TAG_VALUE or not value.isprintable():
            found.append(
                FieldViolation(
                    f"{path}[{key}]", f"must be at most {MAX_TAG_VALUE} printable characters"
                )
            )
    return found


def validate_amounts(amounts: Mapping[Dimension, int], prefix: str) -> list[FieldViolation]:
    """Estimates, usage and resume deltas: each amount in [0, max_amount]."""
    found: list[FieldViolation] = []
    for dimension, name, high in _AMOUNT_LIMITS:
        if dimension in amounts:
            value = amounts[dimension]
            if type(value) is int and 0 <= value <= high:  # the common case, without a path
                continue
            found += check_int(value, _path(prefix, name), 0, high)
    return found


def validate_ttl(
    ttl_seconds: int, max_seconds: int, path: str = "ttl_seconds"
) -> list[FieldViolation]:
    """0 asks for the host default; anything else must lie within the host maximum."""
    return check_int(ttl_seconds, path, 0, max_seconds)


def validate_page(after_seq: int, page_size: int) -> list[FieldViolation]:
    return check_int(after_seq, "after_seq", 0, 2**63 - 1) + check_int(
        page_size, "page_size", 0, MAX_PAGE_SIZE
    )
