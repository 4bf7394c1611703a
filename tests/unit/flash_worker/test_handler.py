"""The handler answers every job with a FunctionResponse: the result, the function's printed
output, or an error the client shows with its type, message and traceback."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import cloudpickle

from skiff.flash_worker.handler import handle


def _pickled(value: object) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode()


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(handle({"id": "job-1", "input": request}))


def _result(answer: dict[str, Any]) -> Any:
    assert answer["success"], answer
    return cloudpickle.loads(base64.b64decode(answer["result"]))


def test_an_async_function_runs_and_its_prints_come_back() -> None:
    answer = _answer(
        {
            "function_name": "greet",
            "function_code": (
                "async def greet(name):\n    print('hello', name)\n    return name.upper()\n"
            ),
            "args": [_pickled("ada")],
        }
    )
    assert _result(answer) == "ADA" and answer["stdout"] == "hello ada\n"


def test_a_sync_function_takes_keyword_arguments_as_json() -> None:
    answer = _answer(
        {
            "function_name": "add",
            "function_code": "def add(a, b=0):\n    return a + b\n",
            "args": [2],
            "kwargs": {"b": 3},
            "serialization_format": "json",
        }
    )
    assert answer == {"success": True, "json_result": 5, "stdout": None}


def test_an_exception_comes_back_with_its_type_message_and_lines() -> None:
    answer = _answer(
        {
            "function_name": "fails",
            "function_code": "def fails():\n    raise KeyError('missing')\n",
        }
    )
    assert answer["success"] is False
    assert "KeyError: 'missing'" in answer["error"]
    assert 'File "<flash function fails>", line 2, in fails' in answer["error"]
    assert "handler.py" not in answer["error"]  # the worker's own frames are left out


def test_a_function_that_exits_is_an_error_not_the_end_of_the_worker() -> None:
    answer = _answer(
        {"function_name": "bye", "function_code": "import sys\ndef bye():\n    sys.exit(3)\n"}
    )
    assert answer["success"] is False and "SystemExit: 3" in answer["error"]


def test_a_bad_request_and_an_unpicklable_result_are_errors_saying_so() -> None:
    bad = _answer({"function_name": "f"})
    assert bad["success"] is False and bad["error"].startswith("BadRequest: ")
    unpicklable = _answer(
        {"function_name": "g", "function_code": "def g():\n    return (n for n in [1])\n"}
    )
    assert "cannot be pickled" in unpicklable["error"]


def test_a_class_instance_keeps_its_state_between_method_calls() -> None:
    code = (
        "class Tally:\n    def __init__(self, start):\n        self.n = start\n"
        "    def add(self, k):\n        self.n += k\n        return self.n\n"
    )

    def call(k: int, new: bool, instance: str = "Tally_a") -> dict[str, Any]:
        return _answer(
            {
                "execution_type": "class",
                "class_name": "Tally",
                "class_code": code,
                "method_name": "add",
                "args": [_pickled(k)],
                "constructor_args": [_pickled(10)],
                "instance_id": instance,
                "create_new_instance": new,
            }
        )

    first, second = call(1, new=True), call(5, new=False)
    assert (_result(first), _result(second)) == (11, 16)
    assert second["instance_id"] == "Tally_a"
    assert second["instance_info"]["method_calls"] == 2
    assert second["instance_info"]["created_by_this_call"] is False
    # An instance this worker never saw (another worker made it) starts afresh here.
    elsewhere = call(1, new=False, instance="Tally_b")
    assert _result(elsewhere) == 11 and elsewhere["instance_info"]["created_by_this_call"]
    missing = _answer(
        {
            "execution_type": "class",
            "class_name": "Tally",
            "class_code": code,
            "method_name": "nothing",
            "constructor_args": [_pickled(0)],
        }
    )
    assert "Tally has no method 'nothing'" in missing["error"]
