"""The error answers the /v1 resource routers declare alike in their OpenAPI description: one
text each, so the routers cannot drift apart."""

from typing import Any

Responses = dict[int | str, dict[str, Any]]

NOT_FOUND: Responses = {404: {"description": "Not found (or not yours)"}}
BAD: Responses = {400: {"description": "A field is invalid; `field` names it"}}
#: Where the specification answers 400 "invalid ID supplied" for an id of the wrong shape.
BAD_ID: Responses = {
    400: {"description": "invalid ID supplied: not the shape of an id (`field` is `id`)"}
}
NAME_TAKEN: Responses = {409: {"description": "Name taken"}}
IN_USE: Responses = {409: {"description": "In use"}}
