"""Which stored stream chunks are pieces of a longer string the store split
(``domain/streams.is_split_piece``): what an OpenAI relay joins back into one event."""

from __future__ import annotations

import random

import orjson

from skiff.domain.streams import (
    MAX_CHUNK_BYTES,
    _char_cost,
    is_split_piece,
    split_chunk,
    split_text,
)


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


def _pieces_char_by_char(text: str, budget: int) -> list[str]:
    """What ``split_text`` must return, walked a character at a time: the longest piece that
    fits, then the next."""
    pieces, start, used = [], 0, 2
    for i, ch in enumerate(text):
        cost = _char_cost(ch)
        if used + cost > budget:
            pieces.append(text[start:i])
            start, used = i, 2
        used += cost
    return [*pieces, text[start:]]


def test_text_is_cut_where_a_walk_character_by_character_would_cut_it() -> None:
    """``split_text`` prices slices with C code (a walk in Python held the event loop for
    seconds on a 64 MB chunk) and must cut exactly where the walk does: escapes, control
    characters, several-byte and lone-surrogate characters, in any mix."""
    alphabet = ["a", " ", '"', "\\", "\n", "\x01", "é", "中", "😀", "\ud800"]
    rng = random.Random(7)
    for _ in range(2000):
        weights = [rng.random() for _ in alphabet]
        text = "".join(rng.choices(alphabet, weights, k=rng.randrange(0, 300)))
        budget = rng.randrange(8, 50)
        assert split_text(text, budget) == _pieces_char_by_char(text, budget), (text, budget)
