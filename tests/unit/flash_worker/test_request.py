"""A FunctionRequest is read field by field: a well-formed one becomes a call, a malformed one
is refused saying which field is wrong and why."""

from __future__ import annotations

from typing import Any

import pytest

from skiff.flash_worker.request import BadRequest, read

FUNCTION = {"function_name": "f", "function_code": "def f(): return 1"}


def test_a_function_request_reads_with_flashs_defaults() -> None:
    call = read(dict(FUNCTION, args=["a"], kwargs={"k": "b"}, dependencies=[" numpy "]))
    assert (call.kind, call.name, call.method) == ("function", "f", "__call__")
    assert (call.args, call.kwargs, call.dependencies) == (["a"], {"k": "b"}, ("numpy",))
    assert call.new_instance and not call.json_format and call.modules == {}


def test_a_class_request_names_its_class_method_and_instance() -> None:
    call = read(
        {
            "execution_type": "class",
            "class_name": "Counter",
            "class_code": "class Counter: pass",
            "method_name": "add",
            "instance_id": "Counter_1",
            "create_new_instance": False,
            "serialization_format": "json",
        }
    )
    assert (call.kind, call.name, call.method, call.instance_id) == (
        "class",
        "Counter",
        "add",
        "Counter_1",
    )
    assert not call.new_instance and call.json_format


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("just text", "must be a runpod-flash FunctionRequest object, not str"),
        ({"function_code": "x"}, "function_name must name a function"),
        ({"function_name": "not a name", "function_code": "x"}, "an identifier"),
        ({"function_name": "f"}, "carries no function_code"),
        (dict(FUNCTION, execution_type="lambda"), "execution_type must be"),
        (dict(FUNCTION, args="nope"), "args must be a list"),
        (dict(FUNCTION, kwargs=[1]), "kwargs must be an object"),
        (dict(FUNCTION, dependencies=["-r /etc/passwd"]), "a pip option, not a package"),
        (dict(FUNCTION, dependencies=["numpy\n--index-url x"]), "is not a requirement"),
        (dict(FUNCTION, dependencies=[""]), "non-empty strings"),
        (dict(FUNCTION, dependencies=["x"] * 201), "at most 200"),
        (dict(FUNCTION, system_dependencies=[3]), "system_dependencies must hold"),
        (dict(FUNCTION, modules={"../escape.py": ""}), "not a relative path of a .py file"),
        (dict(FUNCTION, modules={"/abs.py": ""}), "not a relative path"),
        (dict(FUNCTION, modules={"notes.txt": ""}), "not a relative path of a .py file"),
        (dict(FUNCTION, modules={"ok.py": 3}), "must be a string"),
        (dict(FUNCTION, serialization_format="yaml"), "serialization_format must be"),
        (dict(FUNCTION, create_new_instance="yes"), "create_new_instance must be"),
        (
            {"execution_type": "class", "class_name": "C", "class_code": "x", "method_name": "a b"},
            "method_name must be an identifier",
        ),
    ],
)
def test_a_malformed_request_is_refused_saying_why(given: Any, says: str) -> None:
    with pytest.raises(BadRequest, match=None) as refused:
        read(given)
    assert says in str(refused.value)
