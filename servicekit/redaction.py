"""SR-1 redaction of one text: request-carried secrets first, then the built-in detectors.

Matching runs on a *view* of the text, never on the stored text itself: each character's
compatibility decomposition (NFKD, which NFKC only recomposes, so the two match the same things)
with invisible characters (zero-width spaces and joiners, soft hyphens, bidi and variation
controls, tags) removed. A full-width `ｓｋ－…`, a ligature or a key split by U+200B is found like
its plain form, and a request secret is found in NFC, NFD or compatibility forms alike.

What is stored is the *original* text with each matched span replaced by a marker: the span
maps back to every original character it came from, invisible ones inside it included, so no
form of the secret survives, while text outside the matches is kept exactly as written (not
normalised, not stripped: an emoji's zero-width joiner or a full-width Japanese sentence are
content). A match that ends inside a decomposed character takes the whole character.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from servicekit.errors import FieldViolation
from servicekit.secret_shapes import DETECTOR_NAMES, DETECTORS, secret_span

__all__ = [
    "DETECTOR_NAMES",
    "Redacted",
    "Redactor",
    "Secret",
    "SecretBesideMarker",
    "marker",
    "redact",
]

MIN_SECRET_CHARS = 8
MAX_SECRETS = 64
MAX_SECRET_VALUE_CHARS = 4096
_SECRET_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# Default-ignorable code points that render as nothing: removed from the view only.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)


class Secret(NamedTuple):
    """A value the orchestrator resolved for this run; `value` is never stored or echoed."""

    secret_id: str
    value: str


@dataclass(frozen=True)
class Redacted:
    text: str
    counts: dict[str, int]  # replacements by secret id or detector name; never values


class SecretBesideMarker(Exception):
    """A request secret's value would reappear in the redacted text, formed by a marker and
    the text around it (e.g. a value ending in `[`); the write is refused, never stored."""

    def __init__(self, secret_id: str) -> None:
        super().__init__(secret_id)
        self.secret_id = secret_id


def marker(label: str) -> str:
    return f"[REDACTED:{label}]"


class _ViewTable(dict[int, "str | None"]):
    """str.translate table from a code point to its view: its NFKD form, or None (removed)
    for an invisible one. Filled on first use, up to a bound (the rest are computed per use)."""

    LIMIT = 65536

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        form = None if _INVISIBLE.fullmatch(char) else unicodedata.normalize("NFKD", char)
        if len(self) < self.LIMIT:
            self[code] = form
        return form


_VIEW = _ViewTable()


def view_of(text: str) -> str:
    """The view detectors and secrets are matched on."""
    return text if text.isascii() else text.translate(_VIEW)


def _origins(text: str) -> list[int]:
    """For each character of the view of `text`, the index of the character it came from."""
    origin: list[int] = []
    for index, char in enumerate(text):
        form = _VIEW[ord(char)]
        if form:
            origin.extend([index] * len(form))
    return origin


def validate_secrets(
    secrets: Sequence[tuple[str, str]], field: str = "secrets"
) -> list[FieldViolation]:
    """Violations for too many secrets, bad or duplicate ids and short or long values;
    descriptions never hold values."""
    if len(secrets) > MAX_SECRETS:  # refused before any of them costs work
        return [FieldViolation(field, f"at most {MAX_SECRETS} secrets per request")]
    found: list[FieldViolation] = []
    first_index: dict[str, int] = {}
    for index, (secret_id, value) in enumerate(secrets):
        if _SECRET_ID.fullmatch(secret_id) is None:
            found.append(
                FieldViolation(
                    f"{field}[{index}].secret_id",
                    "must be 1..64 characters from A-Z a-z 0-9 _ . : -",
                )
            )
        elif secret_id in first_index:
            found.append(
                FieldViolation(
                    f"{field}[{index}].secret_id",
                    f"duplicates {field}[{first_index[secret_id]}].secret_id",
                )
            )
        else:
            first_index[secret_id] = index
        if len(value) > MAX_SECRET_VALUE_CHARS:
            found.append(
                FieldViolation(
                    f"{field}[{index}].value",
                    f"must be at most {MAX_SECRET_VALUE_CHARS} characters",
                )
            )
        elif len(view_of(value)) < MIN_SECRET_CHARS:
            found.append(
                FieldViolation(
                    f"{field}[{index}].value",
                    f"must be at least {MIN_SECRET_CHARS} visible characters",
                )
            )
    return found


def needles(secrets: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(view of the value, secret_id) pairs, longest first, ties by secret id."""
    pairs = {(view_of(value), secret_id) for secret_id, value in secrets}
    return sorted(pairs, key=lambda pair: (-len(pair[0]), pair[1], pair[0]))


def find_secret(text: str, views: Sequence[str]) -> int | None:
    """The index of the first secret value view (see `view_of`) in `text`, in any form."""
    view = view_of(text)
    for index, value in enumerate(views):
        if value in view:
            return index
    return None


# Runs of the view as (start, end, label): label None is plain text that later secrets and
# detectors may still match; a label marks a replaced span, never searched again, so a marker
# (or a secret spanning one) can never be matched by a later secret or detector.
_Run = tuple[int, int, "str | None"]


def _replace_secret(view: str, runs: list[_Run], needle: str, label: str) -> tuple[list[_Run], int]:
    out: list[_Run] = []
    replaced = 0
    for start, end, run_label in runs:
        if run_label is not None:
            out.append((start, end, run_label))
            continue
        position = start
        while (found := view.find(needle, position, end)) >= 0:
            if found > position:
                out.append((position, found, None))
            out.append((found, found + len(needle), label))
            replaced += 1
            position = found + len(needle)
        if position < end:
            out.append((position, end, None))
    return out, replaced


def _apply_detector(
    view: str, runs: list[_Run], name: str, pattern: re.Pattern[str]
) -> tuple[list[_Run], int]:
    out: list[_Run] = []
    replaced = 0
    for start, end, run_label in runs:
        if run_label is not None:
            out.append((start, end, run_label))
            continue
        # Matched on the run alone, so lookbehinds and \Z never see a neighbouring marker.
        position = 0
        run = view[start:end]
        for match in pattern.finditer(run):
            span_start, span_end = secret_span(match)
            if span_start > position:
                out.append((start + position, start + span_start, None))
            out.append((start + span_start, start + span_end, name))
            replaced += 1
            position = span_end
        if position < len(run):
            out.append((start + position, end, None))
    return out, replaced


def _rebuild(text: str, origin: list[int] | None, runs: list[_Run]) -> str:
    """The original text with every labelled run's source characters replaced by its marker."""
    parts: list[str] = []
    kept = 0  # original characters before this index are emitted or replaced
    for start, end, label in runs:
        if label is None:
            continue
        first = start if origin is None else origin[start]
        last = end if origin is None else origin[end - 1] + 1
        if first > kept:
            parts.append(text[kept:first])
        parts.append(marker(label))
        kept = max(kept, last)
    parts.append(text[kept:])
    return "".join(parts)


class Redactor:
    """Redacts texts with one request's secrets (validated and prepared once) and the
    built-in detectors."""

    def __init__(self, secrets: Sequence[tuple[str, str]] = ()) -> None:
        if validate_secrets(secrets):
            raise ValueError("invalid secrets; call validate_secrets first")
        self._needles = needles(secrets)

    def redact(self, text: str) -> Redacted:
        """Replace request secrets (longest first), then built-in detector matches, with
        markers. Counts only list names that replaced something; a secret id that equals a
        detector name shares its count. Raises SecretBesideMarker when a secret's value would
        reappear across a marker."""
        if not text:
            return Redacted(text, {})
        view = view_of(text)
        runs: list[_Run] = [(0, len(view), None)] if view else []
        counts: dict[str, int] = {}
        for needle, secret_id in self._needles:
            if needle not in view:
                continue
            runs, replaced = _replace_secret(view, runs, needle, secret_id)
            if replaced:
                counts[secret_id] = counts.get(secret_id, 0) + replaced
        lowered = view.lower()
        for detector in DETECTORS:
            if detector.hints and not any(hint in lowered for hint in detector.hints):
                continue
            runs, replaced = _apply_detector(view, runs, detector.name, detector.pattern)
            if replaced:
                counts[detector.name] = counts.get(detector.name, 0) + replaced
        if not counts:
            return Redacted(text, counts)
        result = _rebuild(text, None if view == text else _origins(text), runs)
        if self._needles:
            result_view = view_of(result)
            for needle, secret_id in self._needles:
                if needle in result_view:
                    raise SecretBesideMarker(secret_id)
        return Redacted(result, counts)


def redact(text: str, secrets: Sequence[tuple[str, str]] = ()) -> Redacted:
    """One text redacted with `secrets` (which must pass `validate_secrets`; an invalid set
    raises ValueError rather than redact with, say, an empty value)."""
    return Redactor(secrets).redact(text)
