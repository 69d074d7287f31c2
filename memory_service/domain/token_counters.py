"""The units a token_budget is denominated in; the tokenizer adapter counts in each."""

from __future__ import annotations

import enum


class TokenCounter(enum.StrEnum):
    """The unit a token_budget is denominated in (the RFC 0113 tokenCounter values)."""

    O200K_BASE = "o200k_base"
    CL100K_BASE = "cl100k_base"
    CHARS = "chars"  # Unicode code points of the content (Python len)
