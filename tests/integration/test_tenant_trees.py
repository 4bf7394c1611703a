"""Trees a tenant wrote, counted and removed (tenant_trees.py): ``du`` and ``rm`` on real files,
whatever the tree's shape."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from skiff import tenant_trees
from skiff.tenant_trees import allocated_bytes, remove_tree

MIB = 1024 * 1024
#: The unprivileged user the tenant's side runs as.
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


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


#: What a worker does to hide what it wrote (it runs as the server's user outside its
#: sandbox): a directory of its home, and then the directory of all homes, made unreadable.
#: Run as that same unprivileged user, with the module copied beside it.
LOCKED_OUT = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tenant_trees import allocated_bytes, remove_tree
homes = Path(sys.argv[1]) / "homes"
(homes / "w1" / "hidden").mkdir(parents=True)
(homes / "w2").mkdir()
for name in ("w1/hidden/big.bin", "w2/big.bin"):
    fd = os.open(homes / name, os.O_CREAT | os.O_WRONLY, 0o600)
    os.posix_fallocate(fd, 0, 8 << 20)
    os.close(fd)
os.chmod(homes / "w1" / "hidden", 0)
counted = allocated_bytes(homes)
os.chmod(homes, 0)
counted_locked = allocated_bytes(homes)
remove_tree(homes / "w1")
os.chmod(homes, 0o700)
print(json.dumps([counted, counted_locked, os.path.lexists(homes / "w1")]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("setpriv") and Path("/usr/bin/python3").exists()),
    reason="needs root, to run the tenant's side as another user, and setpriv",
)
def test_what_its_owner_made_unreadable_is_counted_and_removed(tmp_path: Path) -> None:
    """Run as an unprivileged user, as a deployed server is: ``chmod 000`` hides nothing from
    the count and keeps nothing from removal (tenant_trees.py runs them as the files' owner)."""
    place = Path(tempfile.mkdtemp(prefix="skiff-trees-"))
    try:
        shutil.copy(Path(tenant_trees.__file__), place / "tenant_trees.py")
        os.chown(place, NOBODY, NOBODY)
        os.chmod(place, 0o755)
        done = subprocess.run(
            [*AS_NOBODY, "/usr/bin/python3", "-c", LOCKED_OUT, str(place)],
            capture_output=True,
            text=True,
            check=True,
        )
        counted, counted_locked, w1_left = json.loads(done.stdout)
        assert counted >= 16 * MIB and counted_locked >= 16 * MIB
        assert not w1_left
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_files_are_counted_each_once_below_the_root(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "a", 10)
    write(home / "deep" / "er" / "b", 10)
    os.link(home / "a", home / "deep" / "same-as-a")
    (home / "to-outside").symlink_to(tmp_path)
    # a, deep, er, b and the link itself; the hard link is the same file as a.
    assert tenant_trees.file_count(home) == 5
    assert tenant_trees.file_count(tmp_path / "missing") == 0
