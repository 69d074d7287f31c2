"""SR-1's built-in secret detectors: what people leak, as a table of named patterns.

The patterns run on the *matching view* of a text (servicekit/redaction.py): its compatibility
decomposition with invisible characters removed, so full-width letters, ligatures and zero-width
characters cannot split or disguise a key. Every quantifier that can backtrack is bounded and token
patterns are anchored by lookbehinds at the start of a run, so each detector is linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Detector:
    """A built-in detector: a stable lowercase name and a pattern.

    When the pattern has a group named `secret`, only that group is replaced, which keeps the
    surrounding context (a key name, a URL's scheme, user and host) readable.
    """

    name: str
    pattern: re.Pattern[str]
    # Lower-case literals of which a match holds at least one: a text holding none is skipped
    # without running the pattern (empty: always run).
    hints: tuple[str, ...] = ()


# A marker already in the text (a caller pasting back what a read returned) is not a value.
_NOT_MARKER = r"(?!\[REDACTED:)"
_B64URL = r"[A-Za-z0-9_-]"
_B64 = r"[A-Za-z0-9/+]"
# An assignment's separator: env and ini (=), YAML and headers (:), Ruby (=>), quoted keys.
_SEP = r"[\"']?[ \t]{0,16}(?:=>|=|:)[ \t]{0,16}"
_ASSIGN = _SEP + r"[\"']?"
# A quoted value (single or double quotes, backslash escapes) or a run up to a delimiter.
_VALUE = (
    rf"{_NOT_MARKER}(?:\"(?P<dq>(?:[^\"\\\n]|\\.){{1,512}})\"|'(?P<sq>(?:[^'\\\n]|\\.){{1,512}})'"
    r"|(?P<bare>[^\s&;\"'<>]{1,512}))"
)
_HOST = r"(?:\[[0-9A-Fa-f:.]{2,64}\]|[A-Za-z0-9._~%-]{1,253})(?::[0-9]{1,5})?"

DETECTORS: tuple[Detector, ...] = (
    # First: a key block would otherwise be shredded by the token detectors below. Any case,
    # four or five dashes. A BEGIN line without its END redacts to the end of the text, since a
    # truncated key still leaks.
    Detector(
        "private_key",
        re.compile(
            r"(?i)-{4,5}[ \t]{0,8}BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?[ \t]{0,8}-{4,5}"
            r"(?:.*?-{4,5}[ \t]{0,8}END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?[ \t]{0,8}-{4,5}|.*\Z)",
            re.DOTALL,
        ),
        hints=("private key",),
    ),
    # scheme://user:password@host -> scheme://user:[REDACTED:...]@host. Inside the authority the
    # greedy password backs off to its last `@` (an unencoded `@` in a password is covered);
    # otherwise the password may hold `/`, `?` or `#`, up to an `@` that a host follows, unless
    # what follows the colon is a port (http://host:8080/@user is a path, not a password).
    Detector(
        "connection_string_password",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/?#@\[\]]{0,256}:"
            # Either way an `@` follows within the token: checked first, in one linear scan.
            r"(?=[^\s@]{0,512}@)"
            r"(?P<secret>[^\s/?#]{1,512}(?=@)"
            r"|(?![0-9]{1,5}(?:[/?#\s]|\Z))\S{1,512}?(?=@" + _HOST + r"(?:[/?#\s,;'\")\]]|\Z)))"
        ),
        hints=("://",),
    ),
    # Slack incoming webhooks and workflow triggers: the path is the credential.
    Detector(
        "slack_webhook",
        re.compile(
            r"(?i:hooks\.slack\.com)/(?P<secret>(?:services|workflows|triggers)/[A-Za-z0-9_/-]{16,256})"
        ),
        hints=("hooks.slack.com",),
    ),
    Detector(
        "jwt",
        re.compile(rf"(?<!{_B64URL})eyJ{_B64URL}{{10,}}\.{_B64URL}{{2,}}\.{_B64URL}*"),
        hints=("eyj",),
    ),
    # Provider keys must contain a digit: real keys always do in practice, while hyphenated
    # words such as "sk-learn-compatible-estimators" do not. Any case: "SK-PROJ-..." leaks too.
    Detector(
        "anthropic_api_key",
        re.compile(rf"(?<!{_B64URL})(?i:sk-ant-)(?=[A-Za-z_-]{{0,256}}[0-9]){_B64URL}{{20,}}"),
        hints=("sk-ant-",),
    ),
    Detector(
        "openai_api_key",
        re.compile(rf"(?<!{_B64URL})(?i:sk-)(?=[A-Za-z_-]{{0,256}}[0-9]){_B64URL}{{20,}}"),
        hints=("sk-",),
    ),
    Detector(
        "google_api_key",
        re.compile(rf"(?<!{_B64URL})AIza{_B64URL}{{35}}(?!{_B64URL})"),
        hints=("aiza",),
    ),
    Detector(
        "huggingface_token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"), hints=("hf_",)
    ),
    Detector("groq_api_key", re.compile(r"(?<![A-Za-z0-9_])gsk_[A-Za-z0-9]{40,}"), hints=("gsk_",)),
    Detector("xai_api_key", re.compile(r"(?<![A-Za-z0-9_-])xai-[A-Za-z0-9]{40,}"), hints=("xai-",)),
    Detector(
        "stripe_key",
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        hints=("_live_", "_test_"),
    ),
    Detector(
        "github_token",
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Detector(
        "slack_token", re.compile(r"(?<![A-Za-z0-9_-])xox[abprs]-[A-Za-z0-9-]{10,}"), hints=("xox",)
    ),
    Detector(
        "aws_access_key_id",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        hints=("akia", "asia"),
    ),
    Detector(
        "aws_session_token",
        re.compile(
            r"(?i:(?:aws[_-]?)?session[_-]?token)" + _ASSIGN + r"(?P<secret>[A-Za-z0-9/+=]{16,})"
        ),
        hints=("token",),
    ),
    # A secret key is 40 base64 characters: the value of an assignment to a recognisable name
    # (env, ini, JSON, YAML, Ruby hash), or a bare run of exactly 40 that mixes upper case,
    # lower case and digits (a hex digest never does; a random key almost always does).
    Detector(
        "aws_secret_access_key",
        re.compile(
            r"(?i:(?:aws[_-]?)?secret[_-]?access[_-]?key)"
            + _ASSIGN
            + rf"(?P<secret>{_B64}{{40}})(?!{_B64})"
            + rf"|(?<![A-Za-z0-9/+=])(?={_B64}{{0,39}}[A-Z])(?={_B64}{{0,39}}[a-z])"
            + rf"(?={_B64}{{0,39}}[0-9]){_B64}{{40}}(?![A-Za-z0-9/+=])"
        ),
    ),
    # Azure OpenAI / Cognitive Services: `api-key: <32 hex>` (header, env or JSON).
    Detector(
        "azure_api_key",
        re.compile(
            r"(?i:(?<![A-Za-z0-9])(?:api[_-]?key|ocp-apim-subscription-key))"
            + _ASSIGN
            + r"(?P<secret>[0-9A-Fa-f]{32})(?![0-9A-Za-z])"
        ),
        hints=("key",),
    ),
    # GitLab personal, deploy, runner and project/group access tokens.
    Detector(
        "gitlab_token",
        re.compile(r"(?<![A-Za-z0-9_-])gl(?:pat|dt|rt|ptt|soat)-[A-Za-z0-9_-]{20,}"),
        hints=("gl",),
    ),
    Detector(
        "npm_token",
        re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36,}"),
        hints=("npm_",),
    ),
    Detector(
        "sendgrid_api_key",
        re.compile(rf"(?<![A-Za-z0-9_.-])SG\.{_B64URL}{{22}}\.{_B64URL}{{43}}"),
        hints=("sg.",),
    ),
    # A Twilio API key's SID is SK and 32 hex digits (its secret travels beside it).
    Detector(
        "twilio_api_key",
        re.compile(r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        hints=("sk",),
    ),
    # A Google service account file: `"private_key_id": "<40 hex>"` names the key.
    Detector(
        "private_key_id",
        re.compile(
            r"(?i:private[_-]?key[_-]?id)"
            + _ASSIGN
            + r"(?P<secret>[0-9A-Fa-f]{32,64})(?![0-9A-Za-z])"
        ),
        hints=("private",),
    ),
    # `Authorization: Bearer <token>` / `Basic <base64>` (also Proxy-Authorization).
    Detector(
        "authorization_header",
        re.compile(
            r"(?i:authorization)" + _ASSIGN + r"(?i:bearer|basic|token)[ \t]{1,16}"
            rf"{_NOT_MARKER}(?P<secret>[A-Za-z0-9._~+/=:-]{{4,}})"
        ),
        hints=("authorization",),
    ),
    # password=… (libpq keyword strings, JDBC and URL query strings, .NET connection strings,
    # env files), password: … (YAML, prose). `pwd` only with `=`: `pwd: /home/me` is a path.
    Detector(
        "password",
        re.compile(
            r"(?i:(?<![A-Za-z0-9])[A-Za-z0-9_.-]{0,64}?(?:password|passwd|passphrase)"
            + _SEP
            + r"|(?<![A-Za-z0-9_.-])pwd[ \t]{0,16}=[ \t]{0,16})"
            + _VALUE
        ),
        hints=("pass", "pwd"),
    ),
)

# The value of an assignment to a credential's name, when it looks like one: 12 or more
# token characters holding a letter and a digit. Words (`token=expired`), short values
# (`secret=abc1`) and numbers (`token_count=12345678901234`) are left alone.
_CREDENTIAL_CHAR = r"[A-Za-z0-9._~+/=-]"
_CREDENTIAL = (
    _NOT_MARKER
    + r"(?=[A-Za-z._~+/=-]{0,1024}[0-9])(?=[0-9._~+/=-]{0,1024}[A-Za-z])"
    + rf"(?P<secret>{_CREDENTIAL_CHAR}{{12,1024}})(?!{_CREDENTIAL_CHAR})"
)


def _assignment(name: str, key: str, hints: tuple[str, ...]) -> Detector:
    """`<prefix><key> = value` (env, ini, JSON, YAML, headers) of a credential-like value."""
    return Detector(
        name,
        re.compile(
            r"(?i:(?<![A-Za-z0-9])[A-Za-z0-9_.-]{0,64}?" + key + ")" + _ASSIGN + _CREDENTIAL
        ),
        hints=hints,
    )


# After the named shapes above, so a recognised key keeps its own detector's name.
DETECTORS += (
    _assignment("secret_assignment", r"secret(?:[_-]?key)?", ("secret",)),
    _assignment("api_key_assignment", r"api[_-]?key", ("key",)),
    _assignment("token_assignment", r"token", ("token",)),
)

DETECTOR_NAMES: tuple[str, ...] = tuple(d.name for d in DETECTORS)


def secret_span(match: re.Match[str]) -> tuple[int, int]:
    """The part of a match to replace: its `secret` group (or quoted/bare value), else all."""
    for group in ("secret", "dq", "sq", "bare"):
        if group in match.re.groupindex and match.group(group) is not None:
            return match.span(group)
    return match.span()
