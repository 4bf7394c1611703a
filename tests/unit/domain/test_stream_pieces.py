"""Which stored stream chunks are pieces of a longer string the store split
(``domain/streams.is_split_piece``): what an OpenAI relay joins back into one event."""

from __future__ import annotations

import orjson

from skiff.domain.streams import MAX_CHUNK_BYTES, is_split_piece, split_chunk


def test_the_pieces_of_a_split_event_but_the_last_are_split_pieces() -> None:
    event = "data: " + "é" * (MAX_CHUNK_BYTES // 2) + "x" * MAX_CHUNK_BYTES + "\n\n"
    pieces = [out for out, _ in split_chunk(orjson.dumps(event).decode(), None)]
    assert len(pieces) >= 3
    assert [is_split_piece(p) for p in pieces] == [True] * (len(pieces) - 1) + [False]
    assert "".join(orjson.loads(p) for p in pieces) == event


def test_a_whole_event_or_a_small_chunk_is_no_piece() -> None:
    assert not is_split_piece(orjson.dumps("data: {}\n\n").decode())
    assert not is_split_piece(orjson.dumps({"a": 1}).decode())
    whole = "x" * (MAX_CHUNK_BYTES - 10) + "\n\n"
    assert not is_split_piece(orjson.dumps(whole).decode())
