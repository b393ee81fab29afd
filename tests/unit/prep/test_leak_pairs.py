"""Pure parts of `prep leakage`: cross-dataset pairs (prep.core.leak_pairs), the sidecar (prep.core.keys_sidecar)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prep.core import keys_sidecar
from prep.core.keys_sidecar import RecordKeys
from prep.core.leak_pairs import LeakPair, leak_pairs


def rec(
    name: str,
    sha: str,
    hashes=(0x0F0F0F0F0F0F0F0F,),
    split="train",
    shard="train-00000-of-00001.tfrecord",
    record=0,
    digest="d" * 64,
) -> RecordKeys:
    return RecordKeys(split, shard, digest, record, name, sha * 64, hashes, None if hashes else "Error: x")


def test_exact_pairs_are_every_cross_pair_and_pairs_inside_a_dataset_are_not_listed():
    a = [rec("a1", "1"), rec("a2", "1", split="test"), rec("a3", "2", hashes=(0xFF,))]
    b = [rec("b1", "1"), rec("b2", "1"), rec("b3", "3", hashes=(0xFF00,))]
    found = leak_pairs(a, b)
    assert found.pairs == tuple(
        sorted(
            [
                LeakPair("a1", "b1", "train", "train", "exact", 0),
                LeakPair("a1", "b2", "train", "train", "exact", 0),
                LeakPair("a2", "b1", "test", "train", "exact", 0),
                LeakPair("a2", "b2", "test", "train", "exact", 0),
            ]
        )
    )


def test_near_pairs_need_a_close_hash_and_other_bytes():
    base = 0x0123456789ABCDEF  # 32 one bits, as every pHash of a picture with structure; so are the others
    a = [rec("a1", "1", (base,)), rec("a2", "2", (base ^ 0x1C000700000011,))]
    b = [rec("b1", "3", (base ^ 0x11,)), rec("b2", "4", (base ^ 0x298742BCC00,))]
    assert [(p.a, p.b, p.kind, p.distance) for p in leak_pairs(a, b).pairs] == [
        ("a1", "b1", "near", 2),
        ("a2", "b1", "near", 6),
    ]


def test_flat_pictures_are_exact_duplicates_only():
    """A flat or symmetric picture's hash has fewer than 32 one bits (its frequencies tie with their median):
    blank frames of any colour would all look alike, so such records pair by sha256 alone."""
    flat = (1 << 63,)  # only the mean above the median: what every flat picture hashes to
    a = [rec("blank", "1", flat), rec("grey", "2", flat)]
    b = [rec("black", "3", flat), rec("blank again", "1", flat), rec("photo", "4", (0x0123456789ABCDEF,))]
    assert [(p.a, p.b, p.kind) for p in leak_pairs(a, b).pairs] == [("blank", "blank again", "exact")]


def test_a_record_without_hashes_still_pairs_by_sha256():
    a = [rec("a1", "1", None)]
    b = [rec("b1", "1", None), rec("b2", "2")]
    assert [(p.a, p.b, p.kind) for p in leak_pairs(a, b).pairs] == [("a1", "b1", "exact")]


def test_leak_pair_checks_its_fields():
    with pytest.raises(ValueError, match="kind must be 'exact' or 'near', got 'same'"):
        LeakPair("a", "b", "train", "test", "same", 0)
    with pytest.raises(ValueError, match=r"distance must be in \[0, 64\], got 65"):
        LeakPair("a", "b", "train", "test", "near", 65)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["train", "test"]), st.text(min_size=1), st.booleans(), st.integers(0, (1 << 64) - 1)
        ),
        max_size=6,
    )
)
def test_the_sidecar_round_trips(rows):
    records = [
        RecordKeys(
            split, "s.tfrecord", "d" * 64, i, name, "a" * 64, (h, h) if ok else None, None if ok else "OSError: bad"
        )
        for i, (split, name, ok, h) in enumerate(rows)
    ]
    loaded = keys_sidecar.loads(keys_sidecar.dumps(records), {"s.tfrecord": "d" * 64})
    assert loaded.get("s.tfrecord", []) == records


@given(
    st.text(),
    st.text(),
    st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(["\udcff", '"', "\\"])),
    st.integers(0, 10**9),
    st.one_of(st.none(), st.lists(st.integers(0, (1 << 64) - 1), max_size=5)),
    st.text(),
)
def test_a_record_line_is_the_json_of_its_record_with_sorted_keys(split, shard, filename, record, hashes, error):
    """The converter writes lines field by field (record_line); a reader parses them as JSON: the two agree
    byte for byte, undecodable path bytes (surrogates), quotes and non-ASCII included."""
    r = RecordKeys(
        split,
        shard,
        "d" * 64,
        record,
        filename,
        "a" * 64,
        None if hashes is None else tuple(hashes),
        error if hashes is None else None,
    )
    assert keys_sidecar.record_lines([r]) == (json.dumps(r.to_json(), sort_keys=True) + "\n").encode()


@given(
    st.text(),
    st.text(),
    st.lists(
        st.tuples(
            st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(["\udcff", '"', "\\"])),
            st.integers(0, 2**32 - 1),
            st.binary(min_size=32, max_size=32),
            st.lists(st.integers(0, (1 << 64) - 1), min_size=5, max_size=5),
        ),
        max_size=5,
    ),
)
def test_a_shard_s_lines_at_once_are_its_record_lines(split, shard, rows):
    """The converter formats a shard's lines at once (shard_lines): the same bytes as one record_line each,
    hashes with leading zeros, quotes, surrogates and non-ASCII included."""
    import numpy as np

    hashes = np.array([h for *_, h in rows], np.uint64).reshape(len(rows), 5)
    got = keys_sidecar.shard_lines(
        split,
        shard,
        "d" * 64,
        [r for _, r, _, _ in rows],
        [f for f, *_ in rows],
        b"".join(d for _, _, d, _ in rows).hex(),
        hashes,
    )
    assert got == "".join(keys_sidecar.record_line(split, shard, "d" * 64, r, f, d.hex(), h) for f, r, d, h in rows)


def test_the_sidecar_keeps_only_shards_whose_digest_still_matches():
    records = [
        rec("x", "1", shard="one", digest="1" * 64),
        rec("y", "2", shard="two", digest="2" * 64),
        rec("z", "3", shard="two", digest="2" * 64, record=1),
    ]
    data = keys_sidecar.dumps(records)
    assert keys_sidecar.loads(data, {"one": "1" * 64, "two": "2" * 64}) == {"one": records[:1], "two": records[1:]}
    assert keys_sidecar.loads(data, {"one": "9" * 64, "two": "2" * 64}) == {"two": records[1:]}
    assert keys_sidecar.loads(data, {"two": "2" * 64}) == {"two": records[1:]}  # a shard no longer listed
    lines = data.decode().splitlines()
    other = json.dumps({**json.loads(lines[0]), "grid": 16}, sort_keys=True)
    assert keys_sidecar.loads("\n".join([other] + lines[1:]).encode(), {"one": "1" * 64}) == {}
    assert keys_sidecar.loads(b"\xff\xfe", {"one": "1" * 64}) == {}
    gap = "\n".join([lines[0], lines[1], lines[3]]).encode()  # record 1 of "two" without record 0
    assert keys_sidecar.loads(gap, {"one": "1" * 64, "two": "2" * 64}) == {"one": records[:1]}


def test_record_keys_hold_hashes_or_an_error():
    with pytest.raises(ValueError, match="exactly one of hashes and error must be set"):
        RecordKeys("train", "s", "d" * 64, 0, "x", "a" * 64, None, None)
    with pytest.raises(ValueError, match="exactly one of hashes and error must be set"):
        RecordKeys("train", "s", "d" * 64, 0, "x", "a" * 64, (1,), "Error")


def test_self_pairs_lists_each_pair_of_two_different_records_once():
    from prep.core.leak_pairs import self_pairs

    base = 0x0123456789ABCDEF
    records = [
        rec("x", "1", (base,)),
        rec("y", "1", (base,), split="test"),
        rec("z", "2", (base ^ 0x11,)),
        rec("w", "3", (~base & (1 << 64) - 1,)),
    ]
    assert [(p.a, p.b, p.split_a, p.split_b, p.kind, p.distance) for p in self_pairs(records).pairs] == [
        ("x", "y", "train", "test", "exact", 0),
        ("x", "z", "train", "train", "near", 2),
        ("y", "z", "test", "train", "near", 2),
    ]
