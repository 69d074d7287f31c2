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

Cyrillic and Greek letters drawn like Latin ones (`ѕk-…` with a Cyrillic s) read as their
Latin twins in the view. A key wrapped across two lines is found too: where a line ends in a
token and the next goes on with a token run that holds a digit (as the rest of a random key
does, and a following word does not), a match that ends at the break takes the rest, and the
two halves are matched joined. A request secret's value is also found when only its first half
is written (for a secret of 2 × MIN_SECRET_CHARS or more).
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

# Letters of the Cyrillic and Greek scripts drawn like Latin ones (from Unicode's
# confusables.txt, the letters keys are made of): NFKD keeps scripts apart, so without this a
# Cyrillic `ѕk-…` would not read as `sk-…`. Only the view reads them so; the text keeps them.
_LOOKALIKES = str.maketrans(
    "аеіјорсѕухһԁԛԝӏАВЕКМНОРСТХУІЈЅԚԜΑΒΕΖΗΙΚΜΝΟΡΤΥΧο",
    "aeijopcsyxhdqwlABEKMHOPCTXYIJSQWABEZHIKMNOPTYXo",
)
# A line break inside a token: the next line goes on with a run of token characters that
# holds a digit (the rest of a random key does, a following word does not).
_WRAP = re.compile(r"(?<=[A-Za-z0-9_+/=-])\r?\n(?=[A-Za-z0-9_+/=-]{0,255}[0-9])")
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_+/=.-]")
_MAX_TOKEN = 1024


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
        form = None
        if not _INVISIBLE.fullmatch(char):
            form = unicodedata.normalize("NFKD", char).translate(_LOOKALIKES)
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


def _replace_secret(
    view: str, runs: list[_Run], needle: str, label: str, shortest: int | None = None
) -> tuple[list[_Run], int]:
    """Every occurrence of `needle` in the runs not yet replaced labelled `label`; with
    `shortest`, of its prefixes too: the longest one (of at least `shortest` characters) at
    each place the text holds one."""
    head = needle if shortest is None else needle[:shortest]
    out: list[_Run] = []
    replaced = 0
    for start, end, run_label in runs:
        if run_label is not None:
            out.append((start, end, run_label))
            continue
        position = start
        while (found := view.find(head, position, end)) >= 0:
            length = len(head)
            while length < len(needle) and found + length < end:
                if view[found + length] != needle[length]:
                    break
                length += 1
            if found > position:
                out.append((position, found, None))
            out.append((found, found + length, label))
            replaced += 1
            position = found + length
        if position < end:
            out.append((position, end, None))
    return out, replaced


def prefix_chars(needle: str) -> int:
    """The fewest leading characters of a request secret that are redacted on their own: half
    of it. A secret shorter than twice MIN_SECRET_CHARS is only ever matched whole (a few
    leading characters of a short one are too likely to be a word)."""
    if len(needle) < 2 * MIN_SECRET_CHARS:
        return len(needle)
    return (len(needle) + 1) // 2


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


def _label(runs: list[_Run], start: int, end: int, label: str) -> list[_Run]:
    """`runs` with [start, end) (plain text so far) labelled, joined to a labelled run of the
    same label that ends at `start`."""
    out: list[_Run] = []
    for run_start, run_end, run_label in runs:
        if run_label is not None or run_end <= start or run_start >= end:
            out.append((run_start, run_end, run_label))
            continue
        if run_start < start:
            out.append((run_start, start, None))
        first = max(start, run_start)
        last = min(end, run_end)
        if out and out[-1][1] == first and out[-1][2] == label:
            out[-1] = (out[-1][0], last, label)
        else:
            out.append((first, last, label))
        if run_end > end:
            out.append((end, run_end, None))
    return out


def _label_at(runs: list[_Run], index: int) -> str | None:
    for run_start, run_end, run_label in runs:
        if run_start <= index < run_end:
            return run_label
    return None


def _token_bounds(view: str, start: int, end: int) -> tuple[int, int]:
    """The token ending at `start` (its first index) and the one starting at `end` (its end)."""
    left = start
    while left > max(0, start - _MAX_TOKEN) and _TOKEN_CHAR.match(view, left - 1):
        left -= 1
    right = end
    while right < min(len(view), end + _MAX_TOKEN) and _TOKEN_CHAR.match(view, right):
        right += 1
    return left, right


def _wrapped_keys(view: str, runs: list[_Run], counts: dict[str, int]) -> list[_Run]:
    """Keys split by a line break (see the module docstring)."""
    if "\n" not in view:
        return runs
    for wrap in _WRAP.finditer(view):
        start, end = wrap.span()
        left, right = _token_bounds(view, start, end)
        if _label_at(runs, end) is not None:
            continue
        before = _label_at(runs, start - 1)
        if before is not None:  # the first half was matched: the match takes the rest
            runs = _label(runs, start, right, before)
            continue
        joined = view[left:start] + view[end:right]
        cut = start - left
        for detector in DETECTORS:
            match = next((m for m in detector.pattern.finditer(joined) if m.end() > cut), None)
            if match is None or match.start() >= cut:
                continue
            span_start, span_end = secret_span(match)
            first = left + span_start if span_start < cut else end + span_start - cut
            last = left + span_end if span_end <= cut else end + span_end - cut
            runs = _label(runs, first, last, detector.name)
            counts[detector.name] = counts.get(detector.name, 0) + 1
            break
    return runs


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
        for needle, secret_id in self._needles:  # then what is left of them: their prefixes
            if prefix_chars(needle) >= len(needle) or needle[: prefix_chars(needle)] not in view:
                continue
            runs, replaced = _replace_secret(view, runs, needle, secret_id, prefix_chars(needle))
            if replaced:
                counts[secret_id] = counts.get(secret_id, 0) + replaced
        lowered = view.lower()
        for detector in DETECTORS:
            if detector.hints and not any(hint in lowered for hint in detector.hints):
                continue
            runs, replaced = _apply_detector(view, runs, detector.name, detector.pattern)
            if replaced:
                counts[detector.name] = counts.get(detector.name, 0) + replaced
        runs = _wrapped_keys(view, runs, counts)
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
