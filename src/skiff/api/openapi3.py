"""FastAPI writes OpenAPI 3.1 schemas; the interface is published as 3.0.3, as the reference is.

The differences that matter here: 3.0 has no ``type: "null"`` (it has ``nullable``), no
``const``, and ``examples`` inside a schema is 3.1-only.
"""

from __future__ import annotations

from typing import Any


def _fix(node: Any) -> Any:
    if isinstance(node, list):
        return [_fix(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: _fix(v) for k, v in node.items()}
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and any(o == {"type": "null"} for o in options):
            rest = [o for o in options if o != {"type": "null"}]
            del node[key]
            if len(rest) == 1:
                inner = rest[0]
                if "$ref" in inner:
                    node["allOf"] = [inner]
                else:
                    node.update(inner)
            else:
                node[key] = rest
            node["nullable"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "examples" in node and isinstance(node["examples"], list):
        examples = node.pop("examples")
        if examples:
            node["example"] = examples[0]
    return node


def downgrade_to_3_0(schema: dict[str, Any]) -> dict[str, Any]:
    fixed: dict[str, Any] = _fix(schema)
    fixed["openapi"] = "3.0.3"
    return fixed
