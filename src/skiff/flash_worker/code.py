"""The code a request sends, made callable: its local modules written where it can import them,
its source compiled once per text (the second call of a function finds it defined), and class
instances kept by id so that method calls share one object's state.

The source is compiled under a name of its own (``<flash function describe>``) whose lines are
put in ``linecache``, so that a traceback from it shows the user's lines."""

from __future__ import annotations

import builtins
import hashlib
import importlib
import linecache
import sys
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .request import BadRequest

#: The most class instances one worker keeps; the one used longest ago goes first.
MAX_INSTANCES = 256
#: The most distinct sources one worker keeps compiled.
MAX_DEFINITIONS = 256


def _digest(*parts: str) -> str:
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode("utf-8", "surrogatepass"))
        hashed.update(b"\0")
    return hashed.hexdigest()[:20]


class Definitions:
    """Sources compiled into objects, by kind, name and text."""

    def __init__(self) -> None:
        self._defined: OrderedDict[str, Any] = OrderedDict()
        self._module_dirs: dict[str, Path] = {}

    def add_modules(self, modules: dict[str, str]) -> None:
        """Write the request's local modules into a directory of their own (one per set of
        files) and put it first on the import path."""
        if not modules:
            return
        key = _digest(*(f"{p}\0{s}" for p, s in sorted(modules.items())))
        directory = self._module_dirs.get(key)
        if directory is None:
            directory = Path(tempfile.mkdtemp(prefix=f"flash-modules-{key}-"))
            for relative, source in modules.items():
                path = directory / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(source, encoding="utf-8")
            self._module_dirs[key] = directory
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
            importlib.invalidate_caches()

    def define(self, kind: str, name: str, code: str) -> Any:
        """The object named ``name`` that ``code`` defines. Raises ``BadRequest`` when the code
        does not compile or defines no such name; an exception while it runs goes up as is."""
        key = _digest(kind, name, code)
        found = self._defined.get(key)
        if found is not None:
            self._defined.move_to_end(key)
            return found
        filename = f"<flash {kind} {name}>"
        try:
            compiled = compile(code, filename, "exec")
        except SyntaxError as exc:
            raise BadRequest(f"the {kind} {name}'s code does not compile: {exc}") from exc
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        exec(compiled, namespace)
        defined = namespace.get(name)
        if defined is None:
            raise BadRequest(f"the code sent defines no {kind} named {name!r}")
        if kind == "class" and not isinstance(defined, type):
            raise BadRequest(f"{name!r} in the code sent is not a class")
        if kind == "function" and not callable(defined):
            raise BadRequest(f"{name!r} in the code sent is not callable")
        self._defined[key] = defined
        while len(self._defined) > MAX_DEFINITIONS:
            self._defined.popitem(last=False)
        return defined


@dataclass(slots=True)
class Instance:
    """One class instance and what the client is told of it."""

    instance_id: str
    class_name: str
    obj: Any
    created_at: float = field(default_factory=time.time)
    method_calls: int = 0

    def info(self, created: bool) -> dict[str, Any]:
        return {
            "class_name": self.class_name,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created_at)),
            "method_calls": self.method_calls,
            "created_by_this_call": created,
        }


class Instances:
    """Class instances by id. State lives in one worker: a method call that lands on another
    worker of the endpoint (or after a restart) finds no instance and makes a new one."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, Instance] = OrderedDict()

    def get(self, instance_id: str) -> Instance | None:
        found = self._by_id.get(instance_id)
        if found is not None:
            self._by_id.move_to_end(instance_id)
        return found

    def put(self, instance: Instance) -> None:
        self._by_id[instance.instance_id] = instance
        self._by_id.move_to_end(instance.instance_id)
        while len(self._by_id) > MAX_INSTANCES:
            self._by_id.popitem(last=False)
