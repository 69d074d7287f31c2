"""SR-1 redaction: request secrets longest first, built-in detectors, markers never re-matched."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servicekit.redaction import (
    DETECTOR_NAMES,
    Secret,
    SecretBesideMarker,
    marker,
    redact,
    validate_secrets,
    view_of,
)

# Fake credentials are assembled at runtime so that secret scanners do not flag this file.
OPENAI_LEGACY = "sk-" + "a1B2c3D4e5F6g7H8i9J0" + "T3BlbkFJ" + "k1L2m3N4o5P6q7R8s9T0"
OPENAI_PROJECT = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5q_Rs8tUv1wXy4z-" * 3
ANTHROPIC = "sk-" + "ant-api03-" + "Zq8_Yp7-Xo6Wn5Vm4Ul3Tk2Sj1Ri0Qh" * 3 + "AA"
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SESSION_KEY_ID = "ASIA" + "Y34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GITHUB_CLASSIC = "gh" + "p_" + "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"
GITHUB_FINE = "github_" + "pat_" + "11ABCDEFG0123456789_" + "aBcDeFgHiJ" * 6
SLACK = "xo" + "xb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = "MIIEowIBAAKCAQEA7bq0" + "x9Yz/+AbCdEf==\nQ2w3e4r5t6y7u8i9o0p\n"


def only(detector: str, count: int = 1) -> dict[str, int]:
    return {detector: count}


@pytest.mark.parametrize(
    ("value", "detector"),
    [
        (OPENAI_LEGACY, "openai_api_key"),
        (OPENAI_PROJECT, "openai_api_key"),
        (ANTHROPIC, "anthropic_api_key"),
        (AWS_KEY_ID, "aws_access_key_id"),
        (AWS_SESSION_KEY_ID, "aws_access_key_id"),
        (GITHUB_CLASSIC, "github_token"),
        ("gh" + "o_" + GITHUB_CLASSIC[4:], "github_token"),
        ("gh" + "u_" + GITHUB_CLASSIC[4:], "github_token"),
        ("gh" + "s_" + GITHUB_CLASSIC[4:], "github_token"),
        ("gh" + "r_" + GITHUB_CLASSIC[4:], "github_token"),
        (GITHUB_FINE, "github_token"),
        (SLACK, "slack_token"),
        ("xo" + "xp-" + SLACK[5:], "slack_token"),
        (STRIPE, "stripe_key"),
        ("rk_" + "live_" + STRIPE[8:], "stripe_key"),
        ("sk_" + "test_" + STRIPE[8:], "stripe_key"),
        (JWT, "jwt"),
    ],
)
def test_detector_replaces_whole_token(value: str, detector: str) -> None:
    result = redact(f"use {value} for the call, then rotate ({value}).")
    assert value not in result.text
    assert result.text == f"use {marker(detector)} for the call, then rotate ({marker(detector)})."
    assert result.counts == only(detector, 2)


@pytest.mark.parametrize(
    "label", ["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"]
)
def test_pem_private_key_block_is_redacted_whole(label: str) -> None:
    block = f"-----BEGIN {label}-----\n{PEM_BODY}-----END {label}-----"
    result = redact(f"key:\n{block}\ndone")
    assert result.text == f"key:\n{marker('private_key')}\ndone"
    assert result.counts == only("private_key")


def test_truncated_pem_block_is_redacted_to_the_end() -> None:
    result = redact("key:\n-----BEGIN EC PRIVATE KEY-----\n" + PEM_BODY)
    assert result.text == "key:\n" + marker("private_key")


def test_public_key_and_certificate_blocks_are_kept() -> None:
    text = "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----"
    assert redact(text).text == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "postgresql://app:s3cr3t-P@ss@db.internal:5432/app?sslmode=require",
            "postgresql://app:[REDACTED:connection_string_password]@db.internal:5432/app"
            "?sslmode=require",
        ),
        (
            "redis://:hunter2hunter2@cache:6379/0",
            "redis://:[REDACTED:connection_string_password]@cache:6379/0",
        ),
        (
            "DSN mongodb+srv://svc:pa%40ss:word@cluster0.example.net/db today",
            "DSN mongodb+srv://svc:[REDACTED:connection_string_password]@cluster0.example.net/db"
            " today",
        ),
    ],
)
def test_connection_string_password_keeps_scheme_user_and_host(text: str, expected: str) -> None:
    result = redact(text)
    assert result.text == expected
    assert result.counts == only("connection_string_password")


@pytest.mark.parametrize(
    "text",
    [
        f"aws_secret_access_key = {AWS_SECRET}",
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        f'{{"SecretAccessKey": "{AWS_SECRET}"}}',
        f"aws-secret-access-key: '{AWS_SECRET}'",
    ],
)
def test_aws_secret_key_in_assignment_keeps_the_name(text: str) -> None:
    result = redact(text)
    assert AWS_SECRET not in result.text
    assert result.text == text.replace(AWS_SECRET, marker("aws_secret_access_key"))
    assert result.counts == only("aws_secret_access_key")


@pytest.mark.parametrize(
    "text",
    [
        "sk-learn-compatible-estimators-are-great",
        "https://example.com:8080/path and http://user@host/x",
        "the task-runner asked AKIAfoo about eyJ.things.here",
        f"a 40-char hex digest {'a1b2c3d4e5' * 4} without a name",
        "ghp_short sk_live_short xoxb-1",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == redact(text)  # deterministic
    assert redact(text).text == text
    assert redact(text).counts == {}


def test_detector_names_are_stable() -> None:
    assert set(DETECTOR_NAMES) == {
        "private_key",
        "connection_string_password",
        "jwt",
        "anthropic_api_key",
        "openai_api_key",
        "stripe_key",
        "github_token",
        "slack_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "slack_webhook",
        "google_api_key",
        "huggingface_token",
        "groq_api_key",
        "xai_api_key",
        "azure_api_key",
        "authorization_header",
        "password",
        "gitlab_token",
        "npm_token",
        "sendgrid_api_key",
        "twilio_api_key",
        "private_key_id",
        "secret_assignment",
        "api_key_assignment",
        "token_assignment",
    }


def test_request_secrets_are_replaced_by_id_and_counted_without_values() -> None:
    result = redact(
        "db password is CorrectHorse9 and again CorrectHorse9",
        [Secret("db.password", "CorrectHorse9")],
    )
    assert result.text == "db password is [REDACTED:db.password] and again [REDACTED:db.password]"
    assert result.counts == {"db.password": 2}


def test_overlapping_secrets_are_replaced_longest_first() -> None:
    secrets = [("short", "abcdefgh"), ("long", "abcdefgh12345"), ("mid", "gh123456")]
    result = redact("x abcdefgh12345 y abcdefgh z gh123456", secrets)
    assert result.text == "x [REDACTED:long] y [REDACTED:short] z [REDACTED:mid]"
    assert result.counts == {"long": 1, "short": 1, "mid": 1}


def test_markers_are_never_matched_again() -> None:
    # The second secret's value is the first one's marker and what follows it in the text.
    secrets = [("a", "1234567890abcdef"), ("b", "[REDACTED:a] end")]
    result = redact("token 1234567890abcdef tail", secrets)
    assert result.text == "token [REDACTED:a] tail"
    assert result.counts == {"a": 1}


@pytest.mark.parametrize(
    ("secrets", "text"),
    [
        # The value is literally the other secret's marker: storing it would store the value.
        ([("a", "1234567890abcdef"), ("b", "[REDACTED:a]")], "token 1234567890abcdef"),
        # Or inside every marker.
        ([("a", "1234567890abcdef"), ("b", "REDACTED")], "token 1234567890abcdef"),
        # Or formed by the text before a marker and the marker's first character.
        ([("a", "1234567890abcdef"), ("b", "password[")], "password1234567890abcdef"),
    ],
)
def test_a_secret_that_would_reappear_beside_a_marker_is_refused(
    secrets: list[tuple[str, str]], text: str
) -> None:
    with pytest.raises(SecretBesideMarker) as raised:
        redact(text, secrets)
    assert raised.value.secret_id == "b"


def test_detectors_do_not_match_inside_markers() -> None:
    result = redact("value: AKIAIOSFODNN7EXAMPLE", [("AKIAIOSFODNN7EXAMPLE", "value: AK")])
    assert result.text == "[REDACTED:AKIAIOSFODNN7EXAMPLE]IAIOSFODNN7EXAMPLE"
    assert result.counts == {"AKIAIOSFODNN7EXAMPLE": 1}


def test_request_secret_takes_precedence_over_detectors() -> None:
    result = redact(f"key {STRIPE}", [("stripe.prod", STRIPE)])
    assert result.text == "key [REDACTED:stripe.prod]"
    assert result.counts == {"stripe.prod": 1}


def test_normalisation_variants_of_a_secret_are_redacted() -> None:
    value = "pa\u00dfw\u00f6rt-geheim"  # NFC
    nfd = unicodedata.normalize("NFD", value)
    assert nfd != value
    result = redact(f"one {nfd} two {value}", [("de", value)])
    assert result.text == "one [REDACTED:de] two [REDACTED:de]"
    assert result.counts == {"de": 2}


def test_validate_secrets_reports_fields_never_values() -> None:
    violations = validate_secrets(
        [("ok", "longenough"), ("bad id!", "longenough"), ("short", "1234567"), ("ok", "x" * 9)]
    )
    assert [v.field for v in violations] == [
        "secrets[1].secret_id",
        "secrets[2].value",
        "secrets[3].secret_id",
    ]
    assert all("1234567" not in v.description for v in violations)
    assert validate_secrets([("a" * 64, "12345678"), ("x.y:z-_9", "12345678")]) == []
    assert [v.field for v in validate_secrets([("a" * 65, "12345678"), ("", "12345678")])] == [
        "secrets[0].secret_id",
        "secrets[1].secret_id",
    ]


def test_redact_refuses_unvalidated_secrets() -> None:
    with pytest.raises(ValueError, match="validate_secrets"):
        redact("anything", [("id", "")])


def test_redacting_twice_changes_nothing_more() -> None:
    text = f"{JWT} {STRIPE} postgres://u:pw12345678@h/db -----BEGIN PRIVATE KEY-----\nx\n"
    once = redact(text).text
    assert redact(once).text == once


letters = st.text("abcdefghijklmnopqrstuvwxyz", min_size=8, max_size=20)


@given(
    st.lists(letters, min_size=1, max_size=5, unique=True),
    st.lists(st.tuples(st.integers(0, 4), st.text("0123456789 ", max_size=10)), max_size=12),
)
def test_no_secret_value_survives(values: list[str], layout: list[tuple[int, str]]) -> None:
    # Values that contain one another are legitimately consumed by the longer one.
    values = [v for v in values if not any(v != w and v in w for w in values)]
    secrets = [(f"s{index}", value) for index, value in enumerate(values)]
    text = " ".join(values[i % len(values)] + filler for i, filler in layout)
    result = redact(text, secrets)
    for value in values:
        assert value not in result.text
    assert sum(result.counts.values()) == len(layout)
    assert set(result.counts) <= {secret_id for secret_id, _ in secrets}


def disguise(value: str, data: st.DataObject) -> str:
    """`value` with some letters full-width and invisible characters slipped in."""
    out = []
    for char in value:
        if data.draw(st.booleans()):
            char = chr(ord(char) + 0xFEE0)  # the full-width form of an ASCII letter
        out.append(char)
        out.append(data.draw(st.sampled_from(["", "", "\u200b", "\u200d", "\u00ad", "\ufeff"])))
    return "".join(out)


@given(st.lists(letters, min_size=1, max_size=3, unique=True), st.data())
def test_no_disguised_form_of_a_secret_survives(values: list[str], data: st.DataObject) -> None:
    values = [v for v in values if not any(v != w and v in w for w in values)]
    secrets = [(f"s{index}", value) for index, value in enumerate(values)]
    parts = [disguise(values[i % len(values)], data) for i in range(data.draw(st.integers(1, 6)))]
    fillers = data.draw(st.lists(st.text("0123456789 \u3042", max_size=5), min_size=len(parts)))
    text = "".join(p + f for p, f in zip(parts, fillers, strict=False))
    result = redact(text, secrets)
    for value in values:
        assert value not in view_of(result.text)
    assert sum(result.counts.values()) == len(parts)
