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


#: Statuses every operation may answer with an error body, and what they mean.
_ERRORS = {
    "400": "Bad request: a field is invalid (`field` names it) or the body is not JSON",
    "401": "Missing, invalid or revoked key, or one lacking the permission this operation "
    "needs (the message names it)",
    "404": "Not found, or not yours",
    "409": "Conflict: a name already taken, or a resource still in use",
    "413": "The body is larger than this operation accepts",
    "429": "Rate limit exceeded; retry after the `Retry-After` header's seconds",
}


def document_errors(schema: dict[str, Any], key: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    """Describe the one error body of an interface (``{key: message, field?}``) on every
    operation, in place of FastAPI's 422 (skiff answers validation errors with 400)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = {
        "type": "object",
        "required": [key],
        "properties": {
            key: {"type": "string", "description": "What went wrong, for a person"},
            "field": {"type": "string", "description": "The field at fault, when one is"},
        },
    }
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status in statuses:
                entry = responses.setdefault(status, {"description": _ERRORS[status]})
                entry["content"] = body
                if status == "429":
                    entry["headers"] = {
                        "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}
                    }
    return schema
