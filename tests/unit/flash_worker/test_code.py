"""Sent code is compiled once per source, its modules made importable, and class instances
kept by id with the state their methods leave."""

from __future__ import annotations

import sys
import traceback

import pytest

from skiff.flash_worker.code import MAX_INSTANCES, Definitions, Instance, Instances
from skiff.flash_worker.request import BadRequest


def test_the_same_source_is_defined_once() -> None:
    definitions = Definitions()
    code = "import itertools\ncounter = itertools.count()\ndef f():\n    return next(counter)\n"
    first = definitions.define("function", "f", code)
    again = definitions.define("function", "f", code)
    assert first is again and (first(), again()) == (0, 1)  # one module state


def test_a_traceback_shows_the_lines_sent() -> None:
    f = Definitions().define("function", "f", "def f():\n    return 1 / 0\n")
    with pytest.raises(ZeroDivisionError) as raised:
        f()
    text = "".join(traceback.format_exception(raised.value))
    assert 'File "<flash function f>", line 2, in f' in text and "return 1 / 0" in text


@pytest.mark.parametrize(
    ("kind", "name", "code", "says"),
    [
        ("function", "f", "def f(:\n", "does not compile"),
        ("function", "f", "def g(): pass\n", "defines no function named 'f'"),
        ("class", "C", "C = 3\n", "'C' in the code sent is not a class"),
        ("function", "f", "f = 3\n", "'f' in the code sent is not callable"),
    ],
)
def test_code_that_defines_nothing_callable_is_refused(
    kind: str, name: str, code: str, says: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        Definitions().define(kind, name, code)
    assert says in str(refused.value)


def test_local_modules_are_importable_by_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    definitions = Definitions()
    definitions.add_modules(
        {"flashhelp/__init__.py": "", "flashhelp/maths.py": "def twice(n):\n    return 2 * n\n"}
    )
    f = definitions.define(
        "function", "f", "def f(n):\n    from flashhelp.maths import twice\n    return twice(n)\n"
    )
    assert f(21) == 42
    sys.modules.pop("flashhelp.maths", None)
    sys.modules.pop("flashhelp", None)


def test_instances_are_kept_by_id_and_the_oldest_used_goes_first() -> None:
    instances = Instances()
    for n in range(MAX_INSTANCES + 1):
        instances.put(Instance(f"C_{n}", "C", object()))
        if n == 1:
            assert instances.get("C_0") is not None  # used: now the newest
    assert instances.get("C_0") is not None and instances.get("C_1") is None
    info = Instance("C_9", "C", object()).info(created=True)
    assert info["class_name"] == "C" and info["created_by_this_call"] is True
