"""SR-1 detectors, one row per leak shape: a positive the detector redacts and a near miss it
leaves alone; matching sees through case, full-width and zero-width disguises."""

from __future__ import annotations

import pytest

from servicekit.redaction import marker, redact

# Fake credentials are assembled at runtime so that secret scanners do not flag this file.
HEX32 = "0123456789abcdef" * 2
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
OPENAI = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5q_Rs8tUv1wXy4z"
PEM_BODY = "MIIEowIBAAKCAQEA7bq0" + "x9Yz/+AbCdEf==\n"

# (detector, text, the secret part that must disappear, near-miss text left alone)
CASES = [
    (
        "password",
        "host=db.internal port=5432 user=app password=Pg-s3cret dbname=app",
        "Pg-s3cret",
        "host=db.internal port=5432 user=app passwordless=true dbname=app",
    ),
    (
        "password",
        "jdbc:postgresql://db:5432/app?user=app&password=Jd-s3cret&ssl=true",
        "Jd-s3cret",
        "jdbc:postgresql://db:5432/app?user=app&password_hint=pet&ssl=true",
    ),
    (
        "password",
        "https://api.example.com/login?user=bob&password=Qu3ry-pw",
        "Qu3ry-pw",
        "https://api.example.com/login?user=bob&new_password_policy=strict",
    ),
    ("password", "password: Yaml-s3cr3t", "Yaml-s3cr3t", "password:\n"),
    ("password", '{"password": "two words"}', "two words", '{"password_rules": "two words"}'),
    (
        "connection_string_password",
        "postgresql://app:pa/ss#w?rd@db.internal:5432/app",
        "pa/ss#w?rd",
        "http://example.com:8080/users/@alice",
    ),
    (
        "connection_string_password",
        "redis://:p?q#r@cache:6379/0",
        "p?q#r",
        "https://example.com/a:b/c@d e",
    ),
    (
        "private_key",
        f"-----begin rsa private key-----\n{PEM_BODY}-----end rsa private key-----",
        PEM_BODY.strip(),
        f"-----begin public key-----\n{PEM_BODY}-----end public key-----",
    ),
    (
        "private_key",
        f"----BEGIN PRIVATE KEY----\n{PEM_BODY}----END PRIVATE KEY----",
        PEM_BODY.strip(),
        f"----BEGIN CERTIFICATE----\n{PEM_BODY}----END CERTIFICATE----",
    ),
    ("openai_api_key", OPENAI.upper(), OPENAI.upper()[8:], "SK-LEARN-COMPATIBLE-ESTIMATORS-ONLY"),
    (
        "openai_api_key",
        "\uff53\uff4b\uff0d" + OPENAI[3:],  # full-width "sk-"
        OPENAI[8:],
        "\uff53\uff4b\uff0dlearn\uff0dcompatible\uff0destimators",
    ),
    (
        "openai_api_key",
        OPENAI[:10] + "\u200b" + OPENAI[10:20] + "\u2060" + OPENAI[20:],
        OPENAI[20:],
        "sk-\u200bshort1",
    ),
    (
        "google_api_key",
        "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "SyA1b2C3d4E5f6G7h8I9",
        "AIzaShort123",
    ),
    (
        "huggingface_token",
        "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        "AbCdEfGhIjKlMnOpQrStUvWxYz",
        "hf_model_weights_v2",
    ),
    (
        "groq_api_key",
        "gsk_" + "a1B2c3D4e5F6g7H8i9J0" * 3,
        "a1B2c3D4e5F6g7H8i9J0",
        "gsk_short123",
    ),
    (
        "xai_api_key",
        "xai-" + "Z9y8X7w6V5u4T3s2R1q0" * 4,
        "Z9y8X7w6V5u4T3s2R1q0",
        "xai-sdk-python-2",
    ),
    # (A shorter hex value is still an api key's value: the near miss is a short one.)
    ("azure_api_key", f"api-key: {HEX32}", HEX32, f"api-key: {HEX32[:10]}"),
    ("aws_secret_access_key", f"key {AWS_SECRET} ok", AWS_SECRET, f"sha1 {'a1b2c3d4e5' * 4} ok"),
    (
        "aws_session_token",
        "aws_session_token=" + "IQoJb3JpZ2luX2VjEJr" * 4 + "==",
        "IQoJb3JpZ2luX2VjEJr",
        "aws_session_token_ttl=3600",
    ),
    (
        "slack_webhook",
        "https://hooks.slack.com/services/" + "T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX",
        "aBcDeFgHiJkLmNoPqRsTuVwX",
        "https://hooks.slack.com/ is where webhooks live",
    ),
    (
        "authorization_header",
        "Authorization: Bearer " + "tok.AbC123-xyz_987",
        "tok.AbC123-xyz_987",
        "Authorization: required for this endpoint",
    ),
    (
        "authorization_header",
        "-H 'authorization: basic " + "dXNlcjpwYXNzd29yZA==" + "'",
        "dXNlcjpwYXNzd29yZA==",
        "authorization: basically anyone",
    ),
    # Issue 24: shapes that were stored as written.
    (
        "secret_assignment",
        "CLIENT_SECRET=" + "q8Zt2Lm4Xv7Pn1Rk",
        "q8Zt2Lm4Xv7Pn1Rk",
        "secret=top-secret-project",
    ),
    (
        "api_key_assignment",
        '{"api_key": "' + "Ak7Hq2Wm9Zp4Lx8N" + '"}',
        "Ak7Hq2Wm9Zp4Lx8N",
        '{"api_key": "<your key here>"}',
    ),
    (
        "token_assignment",
        "refresh_token=" + "Tk4.eWq8Zr1-Mn6Lp3",
        "Tk4.eWq8Zr1-Mn6Lp3",
        "token=expired token_count=12345678901234",
    ),
    (
        "api_key_assignment",
        "curl -H 'x-api-key: " + "Xk2Yv8Qm5Rt1Wn7Z" + "'",
        "Xk2Yv8Qm5Rt1Wn7Z",
        "curl -H 'x-api-key: $API_KEY'",
    ),
    (
        "gitlab_token",
        "glpat-" + "Gl4bPat8Xy2Zq6Wv0Ab1",
        "Gl4bPat8Xy2Zq6Wv0Ab1",
        "glpat-short1",
    ),
    (
        "npm_token",
        "//registry.npmjs.org/:_authToken=npm_" + "Np1mT0ken2Abcdefghijklmnopqrstuvwxyz",
        "Np1mT0ken2Abcdefghijklmnopqrstuvwxyz",
        "npm_config_registry=https://registry.npmjs.org/",
    ),
    (
        "sendgrid_api_key",
        "SG." + "Sg1Abcdefghijklmnopqrs" + "." + "Sg2Abcdefghijklmnopqrstuvwxyz0123456789ABCD",
        "Sg2Abcdefghijklmnopqrstuvwxyz0123456789ABCD",
        "SG.objects.filter(active=True)",
    ),
    (
        "twilio_api_key",
        "TWILIO_KEY SK" + "0123456789abcdef" * 2,
        "0123456789abcdef" * 2,
        "SKU " + "SK" + "0123456789abcdef" * 2 + "9",  # 33 hex digits: some other id
    ),
    (
        "private_key_id",
        '{"type": "service_account", "private_key_id": "' + "a1b2c3d4e5" * 4 + '"}',
        "a1b2c3d4e5" * 4,
        '{"private_key_id": ""}',
    ),
    (
        "openai_api_key",
        "\u0455k-" + OPENAI[3:],  # a Cyrillic s
        OPENAI[8:],
        "\u0455k-learn-compatible-estimators",
    ),
    (
        "openai_api_key",
        OPENAI[:18] + "\n" + OPENAI[18:],  # wrapped across two lines
        OPENAI[18:],
        "sk-learn-compatible-estimators\nare listed",
    ),
]


@pytest.mark.parametrize(("detector", "text", "secret", "near_miss"), CASES)
def test_each_leak_shape_is_redacted_and_its_near_miss_is_not(
    detector: str, text: str, secret: str, near_miss: str
) -> None:
    result = redact(text)
    assert secret not in result.text
    assert marker(detector) in result.text
    assert result.counts == {detector: 1}
    assert redact(near_miss).text == near_miss


def test_text_around_a_disguised_key_is_kept_exactly_as_written() -> None:
    # Full-width Japanese, an emoji joined by U+200D and a soft hyphen are content, not secrets.
    prose = "\u4f1a\u8b70\uff08\uff11\uff10\u6642\uff09\U0001f469\u200d\U0001f4bb co\u00adop"
    disguised = "\uff53\uff4b\uff0d" + OPENAI[3:12] + "\u200b" + OPENAI[12:]
    result = redact(f"{prose} {disguised} {prose}")
    assert result.text == f"{prose} {marker('openai_api_key')} {prose}"


def test_a_request_secret_is_found_through_zero_width_and_full_width_forms() -> None:
    value = "Hunter2-Correct"
    disguised = "\uff28unter\u200b2-Correct"  # full-width H, zero-width space
    result = redact(f"a {disguised} b", [("db", value)])
    assert result.text == "a [REDACTED:db] b"


def test_a_request_secrets_first_half_is_redacted_and_less_is_not() -> None:
    value = "Hunter2-Correct-Horse"  # 21 characters: 11 leading ones are redacted alone
    result = redact(f"a {value[:13]}… b", [("db", value)])
    assert result.text == "a [REDACTED:db]… b"
    assert result.counts == {"db": 1}
    near_miss = f"a {value[:10]} b"
    assert redact(near_miss, [("db", value)]).text == near_miss


def test_the_text_around_a_wrapped_key_and_a_lookalike_letter_is_kept() -> None:
    wrapped = "before\n" + OPENAI[:18] + "\r\n" + OPENAI[18:] + "\nafter 2 lines"
    assert redact(wrapped).text == f"before\n{marker('openai_api_key')}\nafter 2 lines"
    russian = "\u041f\u0440\u0438\u0432\u0435\u0442 \u0455k-" + OPENAI[3:] + " \u043c\u0438\u0440"
    expected = (
        "\u041f\u0440\u0438\u0432\u0435\u0442 " + marker("openai_api_key") + " \u043c\u0438\u0440"
    )
    assert redact(russian).text == expected
