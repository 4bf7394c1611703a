"""How service and adapter classes are declared (docs/architecture.md, "Where to add"): attrs
classes whose converters run at construction only. A converter (or validator) on any field
otherwise makes attrs generate a ``__setattr__`` that runs on every assignment to every
attribute of the object, methods' own state included."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import attrs

import skiff

#: Modules that run only as programs of their own, never imported by the server.
_NOT_IMPORTED = ("skiff.__main__", "skiff.builtin_models", "skiff.providers.zygote_main")


def _attrs_classes() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(skiff.__path__, "skiff."):
        if info.name.startswith(_NOT_IMPORTED):
            continue
        module = importlib.import_module(info.name)
        found += [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and attrs.has(obj)
        ]
    return found


def test_no_service_class_runs_code_on_each_assignment() -> None:
    classes = _attrs_classes()
    assert len(classes) > 30  # the walk found them
    assert [c.__qualname__ for c in classes if "__setattr__" in vars(c)] == []
