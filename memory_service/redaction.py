"""SR-1 redaction at write: request-carried secrets first, then built-in secret detectors."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from servicekit.errors import FieldViolation

MIN_SECRET_CHARS = 8
_SECRET_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class Secret(NamedTuple):
    """A value the orchestrator resolved for this run; `value` is never stored or echoed."""

    secret_id: str
    value: str


@dataclass(frozen=True)
class Redacted:
    text: str
    counts: dict[str, int]  # replacements by secret id or detector name; never values


@dataclass(frozen=True)
class Detector:
    """A built-in detector: a stable lowercase name and a pattern.

    When the pattern has a group named `secret`, only that group is replaced, which keeps the
    surrounding context (a key name, a URL's scheme, user and host) readable.
    """

    name: str
    pattern: re.Pattern[str]


# Lookbehinds anchor each token pattern at the start of a token-character run: they avoid
# matching inside longer words and keep the scan linear on long runs of such characters.
_B64URL = r"[A-Za-z0-9_-]"
_DETECTORS: tuple[Detector, ...] = (
    # First: a key block would otherwise be shredded by the token detectors below. A BEGIN line
    # without its END redacts to the end of the text, since a truncated key still leaks.
    Detector(
        "private_key",
        re.compile(
            r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
            r"(?:.*?-----END (?P=label)-----|.*\Z)",
            re.DOTALL,
        ),
    ),
    # scheme://user:password@host -> scheme://user:[REDACTED:...]@host. The greedy password
    # backs off to the last `@` of the authority, so an unencoded `@` in a password is covered.
    Detector(
        "connection_string_password",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\[\]]*:"
            r"(?P<secret>[^\s/?#]+)(?=@)"
        ),
    ),
    Detector(
        "jwt",
        re.compile(rf"(?<!{_B64URL})eyJ{_B64URL}{{10,}}\.{_B64URL}{{2,}}\.{_B64URL}*"),
    ),
    # Provider keys must contain a digit: real keys always do in practice, while hyphenated
    # words such as "sk-learn-compatible-estimators" do not.
    Detector(
        "anthropic_api_key",
        re.compile(rf"(?<!{_B64URL})sk-ant-(?=[A-Za-z_-]*[0-9]){_B64URL}{{20,}}"),
    ),
    Detector(
        "openai_api_key",
        re.compile(rf"(?<!{_B64URL})sk-(?=[A-Za-z_-]*[0-9]){_B64URL}{{20,}}"),
    ),
    Detector(
        "stripe_key",
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ),
    Detector(
        "github_token",
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    ),
    Detector("slack_token", re.compile(r"(?<![A-Za-z0-9_-])xox[abprs]-[A-Za-z0-9-]{10,}")),
    Detector(
        "aws_access_key_id",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ),
    # A secret key is 40 base64 characters with nothing to recognise it by, so only the value
    # of an assignment to a recognisable name (env, ini, JSON, YAML, Ruby hash) is redacted.
    Detector(
        "aws_secret_access_key",
        re.compile(
            r"(?i:(?:aws[_-]?)?secret[_-]?access[_-]?key)[\"']?\s*(?:=>|=|:)\s*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
    ),
)

DETECTOR_NAMES: tuple[str, ...] = tuple(d.name for d in _DETECTORS)


def marker(label: str) -> str:
    return f"[REDACTED:{label}]"


def validate_secrets(
    secrets: Sequence[tuple[str, str]], field: str = "secrets"
) -> list[FieldViolation]:
    """Violations for bad ids, duplicate ids and short values; descriptions never hold values."""
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
        if len(value) < MIN_SECRET_CHARS:
            found.append(
                FieldViolation(
                    f"{field}[{index}].value", f"must be at least {MIN_SECRET_CHARS} characters"
                )
            )
    return found


# The text being redacted, as runs of plain text and markers. Only plain runs are searched, so a
# marker (or a secret spanning one) can never be matched again by a later secret or detector.
class _Run(NamedTuple):
    text: str
    is_marker: bool


def _replace_secret(runs: list[_Run], value: str, label: str) -> tuple[list[_Run], int]:
    out: list[_Run] = []
    replaced = 0
    for run in runs:
        if run.is_marker or value not in run.text:
            out.append(run)
            continue
        parts = run.text.split(value)
        replaced += len(parts) - 1
        for index, part in enumerate(parts):
            if index:
                out.append(_Run(marker(label), True))
            if part:
                out.append(_Run(part, False))
    return out, replaced


def _apply_detector(runs: list[_Run], detector: Detector) -> tuple[list[_Run], int]:
    out: list[_Run] = []
    replaced = 0
    partial = "secret" in detector.pattern.groupindex
    for run in runs:
        if run.is_marker:
            out.append(run)
            continue
        position = 0
        for match in detector.pattern.finditer(run.text):
            start, end = match.span("secret") if partial else match.span()
            if start > position:
                out.append(_Run(run.text[position:start], False))
            out.append(_Run(marker(detector.name), True))
            replaced += 1
            position = end
        if position < len(run.text):
            out.append(_Run(run.text[position:], False))
    return out, replaced


def _needles(secrets: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(value, secret_id) pairs, longest value first, ties by secret id for determinism.

    Each value is also searched in its NFC and NFD forms, so a normalising client or editor
    between the orchestrator and this service cannot slip a secret past an exact comparison.
    """
    pairs: set[tuple[str, str]] = set()
    for secret_id, value in secrets:
        for form in (
            value,
            unicodedata.normalize("NFC", value),
            unicodedata.normalize("NFD", value),
        ):
            pairs.add((form, secret_id))
    return sorted(pairs, key=lambda pair: (-len(pair[0]), pair[1], pair[0]))


def redact(text: str, secrets: Sequence[tuple[str, str]] = ()) -> Redacted:
    """Replace request secrets (longest first), then built-in detector matches, with markers.

    Secrets must pass `validate_secrets`; an invalid set raises ValueError rather than redact
    with, say, an empty value. Counts only list names that replaced something; a secret id that
    equals a detector name shares its count.
    """
    if validate_secrets(secrets):
        raise ValueError("invalid secrets; call validate_secrets first")
    runs = [_Run(text, False)] if text else []
    counts: dict[str, int] = {}
    for value, secret_id in _needles(secrets):
        runs, replaced = _replace_secret(runs, value, secret_id)
        if replaced:
            counts[secret_id] = counts.get(secret_id, 0) + replaced
    for detector in _DETECTORS:
        runs, replaced = _apply_detector(runs, detector)
        if replaced:
            counts[detector.name] = counts.get(detector.name, 0) + replaced
    return Redacted("".join(run.text for run in runs), counts)
