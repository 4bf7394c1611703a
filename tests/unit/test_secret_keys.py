"""Where the database's secret key comes from: ``SKIFF_SECRET_KEY`` (one key or several), or
the key file, made 0600 only while nothing is sealed yet."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from skiff.secret_keys import GivenKeys, KeyFile, key_source, parse_keys
from skiff.store.sealing import Sealer, SealingKeyProblem


def test_several_keys_are_read_first_one_first() -> None:
    one, two = Fernet.generate_key(), Fernet.generate_key()
    assert parse_keys(f" {one.decode()} ,{two.decode()}\n") == [one, two]
    assert parse_keys(f"{one.decode()}\n{two.decode()}\n") == [one, two]


#: A key as Fernet writes one (32 bytes, base64): fixed, so that the tests' names are the same in
#: every process that collects them (``pytest -n``).
A_KEY = "A" * 43 + "="


@pytest.mark.parametrize("text", ["", " , ", "not-a-key", A_KEY + ",x"])
def test_text_that_is_not_keys_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Fernet keys"):
        parse_keys(text)


def test_the_key_file_is_made_private_once_and_read_after(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secret.key"
    [made] = KeyFile(path).keys(sealed_before=False)
    assert path.stat().st_mode & 0o777 == 0o600
    assert KeyFile(path).keys(sealed_before=True) == [made]


def test_a_missing_key_file_is_not_made_up_over_sealed_values(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    with pytest.raises(SealingKeyProblem, match="which is missing"):
        KeyFile(path).keys(sealed_before=True)
    assert not path.exists()


def test_a_garbled_key_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_text("garbled\n")
    with pytest.raises(SealingKeyProblem, match=r"secret\.key"):
        KeyFile(path).keys(sealed_before=True)


def test_the_setting_wins_over_the_key_file(tmp_path: Path) -> None:
    key = Fernet.generate_key()
    assert isinstance(key_source(key.decode(), tmp_path), GivenKeys)
    assert isinstance(key_source(None, tmp_path), KeyFile)


def test_a_value_sealed_by_an_old_key_opens_and_is_sealed_again_by_the_new() -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    token = Sealer([old]).seal("value")
    rotating = Sealer([new, old])
    assert rotating.rotating and rotating.open(token) == "value"
    assert Sealer([new]).open(rotating.reseal(token)) == "value"
    assert not Sealer([new]).opens(Sealer([old]).check())
