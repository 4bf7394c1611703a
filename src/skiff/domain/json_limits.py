"""How deep a JSON document skiff takes: one limit for every body it reads and stores.

orjson reads up to 1,023 levels but writes at most 255, so a body nested between the two was
accepted and then failed (a 500) when skiff wrote it back out, wrapped in a few more levels
(``{"input": ...}``, ``{"openai_input": ...}``). One lower limit, checked where a body is
parsed, keeps every stored document writable with room for those wrappers.
"""

from __future__ import annotations

from typing import Any

import orjson

#: Containers (objects and arrays) inside one another, counting the outermost as 1.
MAX_JSON_DEPTH = 128

#: What orjson says of a document past its own reading limit, and past its writing limit.
ORJSON_DEPTH_MESSAGE = "depth limit exceeded"
ORJSON_WRITE_MESSAGE = "Recursion limit reached"

TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels (skiff's limit for JSON)"


#: The most containers inside one another that ``orjson.dumps`` writes ("Recursion limit
#: reached" past it).
ORJSON_WRITE_DEPTH = 254


def nesting_exceeds(doc: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``doc`` holds containers more than ``limit`` (at most 254) levels deep.

    orjson does the counting, in C: inside ``254 - limit`` more lists, ``doc`` can be written
    exactly when it is at most ``limit`` deep. That costs less than the ``orjson.loads`` that
    made ``doc``, where a walk in Python cost more than the parse for a body of many objects
    (docs/performance.md).
    """
    wrapped = doc
    for _ in range(ORJSON_WRITE_DEPTH - limit):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError as exc:
        if str(exc) != ORJSON_WRITE_MESSAGE:
            raise
        return True
    return False


def too_deep(raw: bytes, doc: Any) -> bool:
    """Whether the parsed ``doc`` of body ``raw`` is nested past the limit.

    A document cannot be deeper than its count of opening brackets, and two ``bytes.count``
    calls cost next to nothing, so ``nesting_exceeds`` only runs for a body with more brackets
    than the limit: the request path stays as fast as before for ordinary bodies.
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return False
    return nesting_exceeds(doc)


def loads(raw: bytes) -> tuple[Any, bool]:
    """``orjson.loads(raw)`` and whether the result is too deep (then the document is None);
    ``orjson.JSONDecodeError`` for text that is not JSON."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if exc.msg == ORJSON_DEPTH_MESSAGE:  # past orjson's own 1,023 levels
            return None, True
        raise
    return doc, too_deep(raw, doc)
