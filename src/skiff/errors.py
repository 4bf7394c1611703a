"""The project's exception tree, mapped to HTTP in one place (``api/errors.py``).

SkiffError
├── NotFound            404: unknown id, or another user's
├── Invalid             400: a bad field or request; ``field`` names it
├── Conflict            409: a unique name already taken, a resource still in use
├── Unauthorized        401: missing or unknown key
├── Forbidden           403: a valid key without access
└── PayloadTooLarge     413: a body over the limit of its route
"""

from __future__ import annotations


class SkiffError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(SkiffError):
    status_code = 404


class Invalid(SkiffError):
    status_code = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Conflict(SkiffError):
    status_code = 409


class Unauthorized(SkiffError):
    status_code = 401


class Forbidden(SkiffError):
    status_code = 403


class PayloadTooLarge(SkiffError):
    status_code = 413
