"""prep.core.listing: the relative paths `walk` yields and the hidden inputs `entry_of` rejects."""

import posixpath

from prep.core.listing import InputRef, Reject, entry_of, walk


def test_hidden_means_a_part_of_the_path_starts_with_a_dot():
    for rel in (".a/b.jpg", "a/.b.jpg", "a/.b/c.jpg", "s/a/.c", "./a/b.jpg"):
        assert isinstance(entry_of(rel, None, "classes"), Reject) and entry_of(rel, None, "classes").reason == "hidden"
    for rel in ("a.b/c.jpg", "a/b..jpg", "a/b.", "cat/x.jpg"):
        assert isinstance(entry_of(rel, None, "classes"), InputRef), rel


def test_walk_yields_the_paths_posixpath_join_makes(tmp_path):
    for name in ("cat/a.jpg", "cat/sub/b.jpg", "dog/c.jpg", "top.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert sorted(rel for rel, _ in walk(str(tmp_path))) == ["cat/a.jpg", "cat/sub/b.jpg", "dog/c.jpg", "top.jpg"]
    for start in ("cat", "cat/"):  # a start with its trailing slash kept, as posixpath.join keeps it
        expected = sorted(posixpath.join(start, n) for n in ("a.jpg", "sub/b.jpg"))
        assert sorted(rel for rel, _ in walk(str(tmp_path), start)) == expected
