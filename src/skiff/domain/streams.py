"""Stream chunks are at most 1 MB each; a larger one from a worker is split, reversibly.

- A chunk whose output is a **string** becomes several string chunks whose concatenation is
  the original string (what a client that streams text does anyway).
- Any other output becomes several chunks of the form
  ``{"skiffPart": {"part": i, "parts": n, "json": "<piece>"}}`` (``part`` counts from 1);
  joining the ``json`` pieces in order and parsing the result gives the original output.

The chunk's ``metrics`` (if any) ride on the last piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One stored chunk of a job's stream, its JSON kept as text."""

    seq: int
    output_json: str
    metrics_json: str | None


def chunk_view(chunk: StreamChunk) -> dict[str, Any]:
    """A chunk as ``/stream`` answers it (and the console shows it)."""
    view: dict[str, Any] = {"output": orjson.Fragment(chunk.output_json)}
    if chunk.metrics_json is not None:
        view["metrics"] = orjson.Fragment(chunk.metrics_json)
    return view


MAX_CHUNK_BYTES = 1024 * 1024
#: Room for ``{"skiffPart":{"part":...,"parts":...,"json":...}}`` around a piece.
_ENVELOPE_BYTES = 96


def _char_cost(ch: str) -> int:
    """An upper bound of the bytes ``ch`` takes inside a JSON string."""
    code = ord(ch)
    if code < 0x20:
        return 6
    if ch in ('"', "\\"):
        return 2
    if code < 0x80:
        return 1
    return len(ch.encode("utf-8", "surrogatepass"))


#: A string piece ``split_text`` cut fills its budget to within one character's cost.
_MAX_CHAR_COST = 6


#: The control characters' bytes (each 6 bytes, ``\\u00XX``, at most, in a JSON string; in
#: UTF-8 no other character holds such a byte).
_CONTROL_BYTES = bytes(range(0x20))


def _cost(text: str) -> int:
    """``_char_cost`` summed over ``text``, counted on its bytes by C code: a 64 MB string must
    not hold the event loop for a walk in Python (it would hold every tenant's requests)."""
    raw = text.encode("utf-8", "surrogatepass")
    controls = len(raw) - len(raw.translate(None, _CONTROL_BYTES))
    return len(raw) + raw.count(b'"') + raw.count(b"\\") + 5 * controls


def split_text(text: str, budget: int) -> list[str]:
    """Pieces of ``text`` whose JSON string encodings (quotes included) fit in ``budget``,
    each as long as fits (the last excepted)."""
    room = budget - 2
    pieces: list[str] = []
    start, size = 0, len(text)
    guess = room  # every character costs at least 1: no piece is longer
    while True:
        end = min(size, start + guess)
        used = _cost(text[start:end])
        # The cost adds up character by character, so a piece is found by pricing only what
        # it gains or loses: while there is room, at most that many characters more...
        while used < room and end < size:
            ahead = min(size - end, room - used)
            used += _cost(text[end : end + ahead])
            end += ahead
        # ... and while over, back by at least a sixth of the excess (none costs more than 6).
        while used > room:
            back = max(1, -(-(used - room) // _MAX_CHAR_COST))
            used -= _cost(text[end - back : end])
            end -= back
        while end < size and used + _char_cost(text[end]) <= room:
            used += _char_cost(text[end])  # the last step back may have gone a little too far
            end += 1
        if end < size:
            end = max(end, start + 1)
        pieces.append(text[start:end])
        if end >= size:
            return pieces
        # Text is mostly alike along its length: the next piece is about as long as this one.
        guess = max(1, end - start)
        start = end


def is_split_piece(output_json: str) -> bool:
    """Whether a stored string chunk is a piece of a longer string the store split, not the
    last: such a piece fills the 1 MB budget (to within a character) and, for server-sent
    events, does not end one. An OpenAI relay joins it with what follows into one event."""
    # A character takes at most 4 bytes: most chunks are told apart without encoding them.
    if 4 * len(output_json) < MAX_CHUNK_BYTES - _MAX_CHAR_COST or not output_json.startswith('"'):
        return False
    size = len(output_json.encode())
    if size < MAX_CHUNK_BYTES - _MAX_CHAR_COST:
        return False
    return not orjson.loads(output_json).endswith("\n\n")


def split_chunk(output_json: str, metrics_json: str | None) -> list[tuple[str, str | None]]:
    """(output JSON, metrics JSON) pieces, each output at most 1 MB serialized."""
    if len(output_json) <= MAX_CHUNK_BYTES and len(output_json.encode()) <= MAX_CHUNK_BYTES:
        return [(output_json, metrics_json)]
    value = orjson.loads(output_json)
    if isinstance(value, str):
        outputs = [orjson.dumps(p).decode() for p in split_text(value, MAX_CHUNK_BYTES)]
    else:
        parts = split_text(output_json, MAX_CHUNK_BYTES - _ENVELOPE_BYTES)
        outputs = [
            orjson.dumps({"skiffPart": {"part": i, "parts": len(parts), "json": piece}}).decode()
            for i, piece in enumerate(parts, start=1)
        ]
    return [(out, metrics_json if i == len(outputs) - 1 else None) for i, out in enumerate(outputs)]
