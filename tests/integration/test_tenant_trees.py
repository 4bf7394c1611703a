"""Trees a tenant wrote, counted and removed (tenant_trees.py): ``du`` and ``rm`` on real files,
whatever the tree's shape."""

from __future__ import annotations

import os
from pathlib import Path

from skiff.tenant_trees import allocated_bytes, remove_tree

MIB = 1024 * 1024


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def test_files_in_nested_directories_count_what_they_hold(tmp_path: Path) -> None:
    write(tmp_path / "home" / "a", 3 * MIB)
    write(tmp_path / "home" / "deep" / "er" / "b", 2 * MIB)
    used = allocated_bytes(tmp_path / "home")
    # The directories' own blocks come on top of the files' 5 MiB.
    assert 5 * MIB <= used < 5 * MIB + 256 * 1024


def test_a_sparse_file_counts_what_it_holds_not_its_length(tmp_path: Path) -> None:
    with open(tmp_path / "sparse", "wb") as sparse:
        sparse.truncate(10 * 1024 * MIB)
    assert allocated_bytes(tmp_path) < MIB


def test_space_reserved_without_a_write_counts(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "reserved", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, 64 * MIB)
    finally:
        os.close(fd)
    assert allocated_bytes(tmp_path) >= 64 * MIB


def test_a_link_out_of_the_home_is_not_followed(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "big", 4 * MIB)
    home = tmp_path / "home"
    home.mkdir()
    (home / "to-file").symlink_to(outside)
    (home / "to-dir").symlink_to(outside.parent, target_is_directory=True)
    assert allocated_bytes(home) < MIB


def test_a_file_with_several_names_counts_once(tmp_path: Path) -> None:
    first = write(tmp_path / "first", 4 * MIB)
    for n in range(5):
        os.link(first, tmp_path / f"again-{n}")
    assert allocated_bytes(tmp_path) < 5 * MIB


def test_an_empty_directory_or_none_holds_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert allocated_bytes(tmp_path / "empty") == 0
    assert allocated_bytes(tmp_path / "gone") == 0


def nest(root: Path, levels: int, payload: int) -> None:
    """``levels`` directories one in the other below ``root``, ``payload`` bytes at the bottom:
    made a level at a time from the one above, so no path grows past the system's limit."""
    root.mkdir()
    here = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=here)
            deeper = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = deeper
        with open(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=here), "wb") as f:
            f.write(os.urandom(payload))
    finally:
        os.close(here)


#: Deeper than Python's recursion limit, and than the longest path the system takes.
DEEP = 2_500


def test_a_tree_nested_past_the_longest_path_is_counted(tmp_path: Path) -> None:
    nest(tmp_path / "home", DEEP, 2 * MIB)
    try:
        assert allocated_bytes(tmp_path / "home") >= 2 * MIB
    finally:
        remove_tree(tmp_path / "home")  # pytest's own clean-up would raise RecursionError


def test_a_tree_nested_past_the_interpreter_s_stack_is_removed(tmp_path: Path) -> None:
    """``shutil.rmtree`` raises ``RecursionError`` on it and leaves it all on the disk."""
    nest(tmp_path / "home", DEEP, MIB)
    remove_tree(tmp_path / "home")
    assert not (tmp_path / "home").exists()


def test_removing_a_tree_leaves_what_its_links_point_to(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "keep", MIB)
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    (home / "sub" / "to-dir").symlink_to(outside.parent, target_is_directory=True)
    (home / "to-file").symlink_to(outside)
    remove_tree(home)
    assert not home.exists() and outside.read_bytes()
    remove_tree(home)  # gone already: nothing to do


def test_a_link_in_place_of_the_tree_is_removed_not_followed(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "keep", MIB)
    (tmp_path / "home").symlink_to(outside.parent, target_is_directory=True)
    remove_tree(tmp_path / "home")
    assert not os.path.lexists(tmp_path / "home") and outside.exists()
