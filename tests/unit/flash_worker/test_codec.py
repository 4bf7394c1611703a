"""Arguments and results travel as runpod-flash encodes them; what cannot be read or sent back
is named in the error."""

from __future__ import annotations

import base64
import threading

import cloudpickle
import pytest

from skiff.flash_worker.codec import EncodingError, decode, decode_all, encode_result


def _pickled(value: object) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode()


def test_pickled_arguments_and_results_round_trip() -> None:
    args, kwargs = decode_all([_pickled({1, 2})], {"k": _pickled(b"x")}, "f", json_format=False)
    assert args == [{1, 2}] and kwargs == {"k": b"x"}
    encoded = encode_result(lambda n: n + 1, "f", json_format=False)
    assert cloudpickle.loads(base64.b64decode(encoded["result"]))(1) == 2


def test_json_values_pass_as_they_are() -> None:
    assert decode({"a": [1]}, "f argument 0", json_format=True) == {"a": [1]}
    assert encode_result({"a": [1]}, "f", json_format=True) == {"json_result": {"a": [1]}}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (3, "must be base64 cloudpickle (a string), not int"),
        ("not base64!", "is not base64"),
        (base64.b64encode(b"not a pickle").decode(), "could not be unpickled"),
    ],
)
def test_an_unreadable_argument_is_named(value: object, says: str) -> None:
    with pytest.raises(EncodingError) as refused:
        decode(value, "f argument 0", json_format=False)
    assert "f argument 0" in str(refused.value) and says in str(refused.value)


def test_a_result_that_cannot_be_pickled_says_so() -> None:
    with pytest.raises(EncodingError) as refused:
        encode_result(threading.Lock(), "f", json_format=False)
    assert "the result of f (lock) cannot be pickled" in str(refused.value)


def test_a_result_that_is_not_json_says_so_under_json_serialization() -> None:
    with pytest.raises(EncodingError) as refused:
        encode_result({1, 2}, "f", json_format=True)
    assert "the result of f (set) is not JSON" in str(refused.value)
