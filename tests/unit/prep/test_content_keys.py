"""Content keys (prep.core.content_keys): the pHash itself, the displayed picture, and detection quality."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from prep.core import content_keys as ck
from tests.support.dedupe_eval import score
from tests.support.imagegen import encode, oriented
from tests.support.photos import photo, planted_set


@pytest.fixture(scope="module")
def planted():
    """100 photos, 40 of them with one copy of each edit: small enough for the fast loop."""
    return planted_set(100, 40, seed=7, size=(192, 144))


def test_planted_copies_are_found_and_unrelated_photos_are_not(planted):
    images, pairs = planted
    quality = score({name: ck.image_keys(data) for name, data in images}, pairs)
    for kind in ("copy", "reencode_q60", "resize_75", "brightness_12"):
        assert quality.recall(kind) == 1.0, (kind, quality)
    assert quality.recall("crop_5") >= 0.9, quality
    assert quality.false_pairs == 0, quality  # of 43,860 unrelated pairs
    assert quality.skipped == 0


def test_crops_beat_the_plain_phash(planted):
    """The crop hashes are what finds the crops: pHash alone misses some on the same set."""
    images, pairs = planted
    crops = [p for p in pairs if p[0] == "crop_5"]
    data = dict(images)
    plain = score({n: ck.image_keys(data[n], scales=()) for n in {x for _, *ab in crops for x in ab}}, crops)
    ours = score({n: ck.image_keys(data[n]) for n in {x for _, *ab in crops for x in ab}}, crops)
    assert ours.recall("crop_5") > plain.recall("crop_5")


def test_the_dct_is_scipys_orthonormal_dct_ii():
    fft = pytest.importorskip("scipy.fft")
    x = np.random.default_rng(0).random((ck.GRID, ck.GRID))
    want = fft.dctn(x, type=2, norm="ortho")[: ck.HASH_SIDE, : ck.HASH_SIDE]
    np.testing.assert_allclose(ck._DCT @ x @ ck._DCT.T, want, atol=1e-9)


def test_phash_has_as_many_ones_as_zeros_so_distances_are_even():
    keys = [ck.image_keys(encode(photo(s, (96, 72)), "PNG")) for s in range(6)]
    for k in keys:
        assert all(h.bit_count() == 32 for h in k.hashes)
    assert all(ck.distance(a, b) % 2 == 0 for a in keys for b in keys)


def test_a_flat_picture_hashes_alike_at_any_gray_level_and_size():
    """A blank frame's frequencies are all zero but its mean: float noise in them once made its hash
    depend on the gray level (and could on the BLAS summing them); now only the mean is above the median."""
    for level in (1, 128, 255):
        for shape in ((64, 64), (47, 63), (300, 7)):
            assert ck.gray_hashes([np.full(shape, level, np.uint8)])[0] == (1 << 63,) * (1 + len(ck.CROP_SCALES))
    assert ck.gray_hashes([np.zeros((40, 40), np.uint8)])[0] == (0,) * (1 + len(ck.CROP_SCALES))
    # ... and takes no part in the near-duplicate search: every blank frame would pair with every other
    assert not ck.comparable(ck.image_keys(encode(Image.new("RGB", (64, 48), (200, 30, 30)), "PNG")))
    assert ck.comparable(ck.image_keys(encode(photo(4, (96, 72)), "PNG")))
    assert ck.comparable_rows(np.array([[(1 << 32) - 1, 1 << 63], [(1 << 32) - 1] * 2], np.uint64)).tolist() == [
        False,
        True,
    ]


def test_a_colour_jpeg_is_hashed_from_its_luma():
    """The keys decode a colour JPEG straight to gray (libjpeg's luma, no colour conversion): within a
    gray level of Pillow's RGB-to-L conversion, so the hashes barely move, and the check's decode serves them."""
    data = encode(photo(3, (400, 300)), "JPEG", quality=90)
    with Image.open(io.BytesIO(data)) as img:
        ck.decode_for_keys(img)
        assert img.mode == "L" and img.size == (50, 38)  # 1/8 scale, straight to gray
        luma = np.asarray(img, dtype=np.int16)
    with Image.open(io.BytesIO(data)) as img:
        img.draft("RGB", (50, 37))
        via_rgb = np.asarray(img.convert("L"), dtype=np.int16)
    assert np.abs(luma - via_rgb).max() <= 1
    assert (
        ck.distance(
            ck.image_keys(data),
            ck.ContentKeys(ck.image_keys(data).sha256, ck.gray_hashes([via_rgb.astype(np.uint8)])[0]),
        )
        <= 2
    )


def test_sha256_is_of_the_bytes_and_the_keys_have_one_hash_per_scale():
    data = encode(photo(1, (96, 72)), "JPEG", quality=90)
    keys = ck.image_keys(data)
    assert keys.sha256 == hashlib.sha256(data).hexdigest()
    assert len(keys.hashes) == 1 + len(ck.CROP_SCALES)


def test_exif_orientation_is_applied_before_hashing():
    upright = np.asarray(photo(3, (96, 64)))
    plain = ck.image_keys(encode(Image.fromarray(upright), "JPEG", quality=95))
    for orientation in (3, 6, 8):
        turned = ck.image_keys(oriented(upright, orientation))
        assert ck.distance(plain, turned) <= 4, orientation
    # the stored (unrotated) pixels of orientation 6 are not the same picture
    stored = ck.image_keys(encode(Image.fromarray(np.rot90(upright).copy()), "JPEG", quality=95))
    assert ck.distance(plain, stored) > ck.NEAR_DISTANCE


def test_transparency_is_composited_on_white():
    rgb = np.asarray(photo(4, (96, 72))).copy()
    alpha = np.full(rgb.shape[:2], 255, np.uint8)
    alpha[:, :40] = 0  # the left part transparent: shown white, whatever the hidden colour
    rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    on_white = rgb.copy()
    on_white[:, :40] = 255
    assert ck.distance(ck.image_keys(encode(rgba, "PNG")), ck.image_keys(encode(Image.fromarray(on_white), "PNG"))) == 0


def test_sixteen_bit_gray_is_the_same_picture_as_eight_bit():
    gray8 = np.asarray(photo(5, (96, 72)).convert("L"))
    img16 = Image.fromarray(gray8.astype(np.uint16) * 257)
    assert ck.distance(ck.image_keys(encode(img16, "PNG")), ck.image_keys(encode(Image.fromarray(gray8), "PNG"))) <= 2


def test_undecodable_bytes_raise_what_pillow_raises():
    with pytest.raises(OSError):
        ck.image_keys(b"not an image")


def test_keys_round_trip_through_json_and_are_checked():
    keys = ck.ContentKeys("ab" * 32, (0, 1 << 63, (1 << 64) - 1))
    assert ck.ContentKeys.from_json(keys.to_json()) == keys
    with pytest.raises(ValueError, match="sha256 must be 64 lowercase hex digits, got 'AB'"):
        ck.ContentKeys("AB", (1,))
    with pytest.raises(ValueError, match="64-bit unsigned integer, got 18446744073709551616"):
        ck.ContentKeys("ab" * 32, (1 << 64,))
    with pytest.raises(ValueError, match="at least the whole picture"):
        ck.ContentKeys("ab" * 32, ())


def test_keys_of_other_scales_are_not_compared():
    with pytest.raises(ValueError, match="keys of 2 and 3 hashes cannot be compared"):
        ck.distance(ck.ContentKeys("ab" * 32, (1, 2)), ck.ContentKeys("ab" * 32, (1, 2, 3)))


def test_jpeg_draft_decoding_keeps_the_hash():
    """Decoding JPEGs at a reduced DCT scale barely moves the bits (the hash looks at 32x32 pixels)."""
    for seed in range(4):
        data = encode(photo(seed, (640, 480)), "JPEG", quality=90)
        assert ck.distance(ck.image_keys(data), ck.image_keys(data, draft=None)) <= 4
        with Image.open(io.BytesIO(data)) as img:
            img.draft("L", (ck.DRAFT, ck.DRAFT))
            assert img.size[0] < 640  # the draft did take a smaller scale


def test_the_lanczos_weights_are_pillows():
    """Resizing with lanczos.weights gives Pillow's LANCZOS pixels before its rounding: within the
    rounding of its two passes, on smooth pictures (as photos are) that no pass clips."""
    from prep.core import lanczos

    rng = np.random.default_rng(0)
    for _ in range(150):
        w, h = (int(v) for v in rng.integers(3, 260, 2))
        coarse = rng.integers(40, 216, (max(1, h // 8), max(1, w // 8)), dtype=np.uint8)
        pixels = np.asarray(Image.fromarray(coarse, "L").resize((w, h), Image.Resampling.BILINEAR))
        want = np.asarray(Image.fromarray(pixels, "L").resize((32, 32), Image.Resampling.LANCZOS))
        assert np.abs(lanczos.resize(pixels, 32) - want).max() <= 1.2, (w, h)
    square = rng.integers(0, 256, (32, 32), dtype=np.uint8)
    assert np.array_equal(lanczos.resize(square, 32), square)  # a pass of one size is skipped, as Pillow does


def _pillow_phashes(gray: np.ndarray, scales=ck.CROP_SCALES) -> list[int]:
    """imagehash.phash's way, one crop at a time: Pillow's LANCZOS resize to 32x32, its DCT, the median split."""
    out = []
    for left, top, w, h in ck.crop_boxes(gray.shape[1], gray.shape[0], scales):
        grid = np.asarray(
            Image.fromarray(gray[top : top + h, left : left + w], "L").resize(
                (ck.GRID, ck.GRID), Image.Resampling.LANCZOS
            ),
            dtype=np.float64,
        )
        low = (ck._DCT @ grid @ ck._DCT.T).ravel()
        out.append(int("".join("1" if v > np.median(low) else "0" for v in low), 2))
    return out


def test_the_hashes_are_imagehashs_phash_of_each_crop_but_near_the_median():
    """The folded resize and DCT (no rounding of the resized pixels) moves at most a few bits next to
    the median from the pHash of each crop resized by Pillow, and leaves most hashes as they are."""
    moved = []
    for seed in range(24):
        with Image.open(io.BytesIO(encode(photo(seed, (500, 375)), "JPEG", quality=90))) as img:
            ck.decode_for_keys(img)
            gray = ck.gray_pixels(img)
        ours = ck.gray_hashes([gray])[0]
        moved += [(a ^ b).bit_count() for a, b in zip(ours, _pillow_phashes(gray))]
    assert max(moved) <= 4, moved
    assert sum(m == 0 for m in moved) >= 0.75 * len(moved), moved


def test_all_crops_of_a_stack_have_the_frequencies_of_each_crop_alone():
    """_low_frequencies (two products for every crop of every image of one size) gives the DCT of each
    crop cut out and resized alone: sizes where a crop is exactly GRID wide or tall (that pass is the
    identity), stacks of several images, and an image large enough to be multiplied in row blocks."""
    from prep.core import lanczos

    rng = np.random.default_rng(1)
    sizes = [(32, 32), (33, 34), (38, 40), (7, 300), (64, 64), (47, 63), (1100, 1000)]
    sizes += [tuple(int(v) for v in rng.integers(3, 200, 2)) for _ in range(40)]
    for h, w in sizes:
        stack = rng.integers(0, 256, (1 if h * w > 10**5 else 3, h, w), dtype=np.uint8)
        boxes = ck.crop_boxes(w, h)
        got = ck._low_frequencies(stack, boxes).reshape(len(stack), len(boxes), ck.HASH_SIDE, ck.HASH_SIDE)
        for b, gray in enumerate(stack):
            for i, (left, top, cw, ch) in enumerate(boxes):
                want = ck._DCT @ lanczos.resize(gray[top : top + ch, left : left + cw], ck.GRID) @ ck._DCT.T
                np.testing.assert_allclose(got[b, i], want, atol=1e-6, err_msg=str((h, w, i)))


def test_a_batch_gives_each_image_the_keys_it_has_alone():
    """KeyBatch hashes images of one size together and large ones on arrival; each gets image_keys'
    answer, in order, and bytes that do not decode get None (never an error)."""
    datas = [
        encode(photo(s, size), fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        for s, (size, fmt) in enumerate(
            [
                ((96, 72), "JPEG"),
                ((96, 72), "JPEG"),
                ((80, 80), "PNG"),
                ((96, 72), "PNG"),
                ((600, 400), "PNG"),
                ((640, 480), "JPEG"),
            ]
        )
    ]
    datas.insert(3, b"not an image")
    batch = ck.KeyBatch()
    for d in datas:
        batch.add(d)
    got = batch.keys()
    assert got[3] is None
    assert [k for i, k in enumerate(got) if i != 3] == [ck.image_keys(d) for i, d in enumerate(datas) if i != 3]


def test_batches_taken_and_hashed_together_give_each_image_its_own_keys(monkeypatch):
    """PrepareChunk takes each batch's waiting pixels and hashes a chunk's at once (hash_waiting), several
    products a size when they pass _STACK_PIXELS: every image still gets image_keys' answer in its own
    row of its own batch; a large image was hashed on arrival, and bytes that do not decode have none."""
    monkeypatch.setattr(ck, "_STACK_PIXELS", 3 * 96 * 72)  # 3 images of 96x72 a product
    sizes = [(96, 72), (96, 72), (80, 60), (96, 72), (900, 700), (96, 72), (80, 60), (96, 72), (96, 72)]
    datas = [encode(photo(s, size), "PNG") for s, size in enumerate(sizes)]
    datas.insert(4, b"not an image")
    parts, taken = [], []
    for start in range(0, len(datas), 4):
        batch = ck.KeyBatch()
        for d in datas[start : start + 4]:
            batch.add(d)
        digests, hashes, has, waiting = batch.take()
        assert all(image.shape in ((72, 96), (60, 80)) for _, images in waiting for image in images)  # not 900x700
        parts.append((hashes, waiting))
        taken.append((digests, hashes, has))
    ck.hash_waiting(parts)
    got = [
        ck.ContentKeys(d, tuple(h)) if ok else None
        for digests, hashes, has in taken
        for d, h, ok in zip(digests, hashes.tolist(), has)
    ]
    assert got[4] is None
    assert [k for i, k in enumerate(got) if i != 4] == [ck.image_keys(d) for i, d in enumerate(datas) if i != 4]


def test_pictures_of_many_sizes_hashed_together_get_the_hashes_each_has_alone(monkeypatch):
    """hash_waiting passes across once per width and down once per height, whatever sizes share them: every
    picture, of sizes that share widths and heights in all combinations (one pixel a side included), in
    blocks cut in the middle of a width, gets exactly the hashes it has hashed alone, in its own row."""
    monkeypatch.setattr(ck, "_STACK_PIXELS", 5000)  # blocks of a few pictures: cut within widths
    rng = np.random.default_rng(3)
    sides = [1, 2, 31, 32, 33, 47, 63, 90]
    grays = [rng.integers(0, 256, (int(rng.choice(sides)), int(rng.choice(sides))), dtype=np.uint8) for _ in range(150)]
    grays += [
        np.asarray(photo(s, (int(w), int(h))).convert("L")) for s, (w, h) in enumerate(rng.integers(20, 128, (40, 2)))
    ]
    hashes = [np.zeros((len(grays), 1 + len(ck.CROP_SCALES)), np.uint64) for _ in range(2)]
    half = len(grays) // 2  # two batches' parts, their pictures in no order of size
    parts = [
        (hashes[0], [([i], g[None]) for i, g in enumerate(grays[:half])]),
        (hashes[1], [([i], g[None]) for i, g in enumerate(grays[half:])]),
    ]
    ck.hash_waiting(parts)
    got = np.concatenate([hashes[0][:half], hashes[1][: len(grays) - half]])
    want = np.array([ck.stack_hashes(g[None])[0] for g in grays], np.uint64)
    assert len({g.shape for g in grays}) > 60
    np.testing.assert_array_equal(got, want)
