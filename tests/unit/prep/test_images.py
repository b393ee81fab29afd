"""Image rule: valid JPEG/PNG in L or RGB keep their bytes; everything else is converted as documented."""

import collections
import io
import random
import struct
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from prep.core.errors import OptionsError
from prep.core.image_rules import EncodeBuffer, ImageOptions, ImageRejected, prepare_image, target_size
from tests.support.imagegen import bomb_png, encode, huge_j2k, icns, ico, image_bytes, truncated_exif_jpeg

KEEP = ImageOptions()


def decoded(prepared):
    img = Image.open(io.BytesIO(prepared.encoded))
    assert img.format.lower() == prepared.format
    assert img.size == (prepared.width, prepared.height)
    assert len(img.getbands()) == prepared.channels
    return img


@pytest.mark.parametrize("fmt, mode", [("JPEG", "RGB"), ("JPEG", "L"), ("PNG", "RGB"), ("PNG", "L")])
def test_valid_jpeg_and_png_keep_their_bytes(fmt, mode):
    data = image_bytes(fmt, size=(30, 20), mode=mode)
    prepared = prepare_image(data, KEEP)
    assert prepared.encoded == data and not prepared.converted
    assert (prepared.width, prepared.height, prepared.channels) == (30, 20, 1 if mode == "L" else 3)
    assert prepared.format == fmt.lower()


@pytest.mark.parametrize(
    "fmt, mode, save, out_format, channels",
    [
        ("JPEG", "CMYK", {}, "jpeg", 3),
        ("PNG", "RGBA", {}, "png", 3),
        ("PNG", "LA", {}, "png", 3),
        ("PNG", "P", {"transparency": 0}, "png", 3),
        ("PNG", "P", {}, "png", 3),
        ("PNG", "I;16", {}, "png", 1),
        ("GIF", "P", {}, "png", 3),
        ("BMP", "RGB", {}, "png", 3),
        ("TIFF", "RGB", {}, "png", 3),
        ("WEBP", "RGB", {"lossless": True}, "png", 3),
    ],
)
def test_other_images_are_converted(fmt, mode, save, out_format, channels):
    prepared = prepare_image(image_bytes(fmt, size=(30, 20), mode=mode, **save), KEEP)
    assert prepared.converted
    assert prepared.format == out_format and prepared.channels == channels
    img = decoded(prepared)
    assert img.mode == ("L" if channels == 1 else "RGB")


def test_alpha_is_composited_onto_white():
    img = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    out = decoded(prepare_image(buf.getvalue(), KEEP))
    assert out.getpixel((0, 0)) == (255, 255, 255)


def test_sixteen_bit_is_scaled_not_clipped():
    arr = np.full((4, 4), 65535, dtype=np.uint16)
    arr[0, 0] = 256
    buf = io.BytesIO()
    Image.fromarray(arr, "I;16").save(buf, "PNG")
    out = np.asarray(decoded(prepare_image(buf.getvalue(), KEEP)))
    assert out[1, 1] == 255 and out[0, 0] == 1


@pytest.mark.parametrize("orientation, upright", [(1, (40, 20)), (3, (40, 20)), (6, (20, 40)), (8, (20, 40))])
def test_exif_orientation_is_applied(orientation, upright):
    img = Image.fromarray(np.zeros((20, 40, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif)
    prepared = prepare_image(buf.getvalue(), KEEP)
    assert (prepared.width, prepared.height) == upright
    assert prepared.converted == (orientation != 1)


def test_animated_gif_keeps_first_frame():
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    out = decoded(prepare_image(buf.getvalue(), KEEP)).convert("RGB")
    assert out.getpixel((4, 4))[0] > 200


def test_resize_and_max_side():
    data = image_bytes("JPEG", size=(500, 375))
    prepared = prepare_image(data, ImageOptions(resize=256))
    assert (prepared.width, prepared.height) == (341, 256) and prepared.format == "jpeg"
    decoded(prepared)
    prepared = prepare_image(data, ImageOptions(max_side=100))
    assert (prepared.width, prepared.height) == (100, 75)
    small = image_bytes("JPEG", size=(100, 80))
    assert prepare_image(small, ImageOptions(resize=256)).encoded == small  # never upscales


@pytest.mark.parametrize(
    "size, opts, expected",
    [
        ((500, 375), ImageOptions(resize=256), (341, 256)),
        ((375, 500), ImageOptions(resize=256), (256, 341)),
        ((500, 375), ImageOptions(resize=256, max_side=300), (300, 225)),
        ((100, 50), ImageOptions(resize=256), (100, 50)),
        ((4000, 10), ImageOptions(max_side=100), (100, 1)),
    ],
)
def test_target_size_table(size, opts, expected):
    assert target_size(*size, opts) == expected


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "temporary-file"])
def test_encode_buffer_gives_the_same_bytes_as_encoding_in_memory(memfd, monkeypatch):
    # Pool threads encode through a reused scratch file so that Pillow releases
    # the GIL; the stored bytes must not change, also when a smaller image
    # follows a larger one in the same buffer.
    cases = [
        (image_bytes("JPEG", size=(400, 300), mode="RGB"), ImageOptions(resize=120)),
        (image_bytes("PNG", size=(300, 200), mode="RGBA"), KEEP),
        (image_bytes("JPEG", size=(60, 40), mode="L"), ImageOptions(image_format="png")),
        (image_bytes("PNG", size=(50, 30), mode="RGB"), ImageOptions(image_format="jpeg", quality=70)),
        (image_bytes("JPEG", size=(40, 30), mode="RGB"), ImageOptions(max_side=20)),
    ]
    if not memfd:  # as on macOS and Windows
        monkeypatch.delattr("os.memfd_create", raising=False)
    with EncodeBuffer() as buffer:
        for data, options in cases:
            through_buffer = prepare_image(data, options, buffer)
            assert through_buffer.converted
            assert through_buffer == prepare_image(data, options)


@pytest.mark.filterwarnings("ignore:Truncated File Read")
def test_preparing_on_many_threads_leaves_the_warning_filters_alone():
    # warnings.catch_warnings() around each image, as this once did, is not
    # thread-safe: threads entering and leaving it together can leave an
    # "ignore everything" filter behind in the caller's process.
    data = truncated_exif_jpeg()  # Pillow warns while reading it
    before = list(warnings.filters)
    with ThreadPoolExecutor(4) as pool:
        prepared = list(pool.map(lambda _: prepare_image(data, ImageOptions(resize=4)), range(400)))
    assert warnings.filters == before
    assert {p.height for p in prepared} == {4}


def test_image_format_forces_one_format():
    png = image_bytes("PNG", size=(20, 20))
    jpeg = image_bytes("JPEG", size=(20, 20))
    assert prepare_image(png, ImageOptions(image_format="jpeg")).format == "jpeg"
    assert prepare_image(jpeg, ImageOptions(image_format="png")).format == "png"
    assert prepare_image(jpeg, ImageOptions(image_format="jpeg")).encoded == jpeg


def test_format_comes_from_content_not_name():
    png = image_bytes("PNG", size=(20, 20))
    assert prepare_image(png, KEEP).format == "png"


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty"),
        (b"\x00\x01 random bytes that are not an image" * 10, "undecodable"),
        (image_bytes("JPEG", size=(200, 200))[:600], "undecodable"),
        (image_bytes("PNG", size=(200, 200))[:300], "undecodable"),
    ],
)
def test_bad_bytes_are_rejected_with_reason(data, reason):
    with pytest.raises(ImageRejected) as info:
        prepare_image(data, KEEP)
    assert info.value.reason == reason


def _noisy_png() -> bytes:
    rng = np.random.default_rng(5)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB").save(out, "PNG")
    return out.getvalue()


def _damage_idat(png: bytes, fix_crc: bool) -> bytes:
    """Flips a byte inside the first IDAT chunk's data; with `fix_crc`, rewrites the chunk's CRC to match."""
    at = png.index(b"IDAT")
    (length,) = struct.unpack(">I", png[at - 4 : at])
    data = bytearray(png)
    data[at + 4 + length // 2] ^= 0xFF
    if fix_crc:
        data[at + 4 + length : at + 8 + length] = struct.pack(">I", zlib.crc32(bytes(data[at : at + 4 + length])))
    return bytes(data)


@pytest.mark.parametrize("options", [KEEP, ImageOptions(image_format="jpeg")])
def test_a_png_whose_pixels_do_not_decode_is_rejected_not_half_written(options):
    # Its CRCs hold, so only decoding finds the damage: Pillow's getexif() decodes
    # a PNG, and that error once passed for a bad EXIF block.
    with pytest.raises(ImageRejected) as info:
        prepare_image(_damage_idat(_noisy_png(), fix_crc=True), options)
    assert info.value.reason == "undecodable"


@pytest.mark.parametrize(
    "damage, detail",
    [
        (lambda png: png[:-12], "PNG file ends before its IEND chunk (truncated)"),
        (lambda png: png[:-2], "PNG file ends before its IEND chunk (truncated)"),
        (
            lambda png: _damage_idat(png, fix_crc=False),
            "PNG chunk 'IDAT' at byte 33 fails its CRC (the file is damaged)",
        ),
        (lambda png: png[:-1] + bytes([png[-1] ^ 1]), "PNG chunk 'IEND' at byte"),
    ],
)
def test_a_png_that_libpng_would_refuse_is_rejected(damage, detail):
    # Pillow reads these; TensorFlow's decoder (libpng) does not, so keeping
    # their bytes would fail training at read time.
    with pytest.raises(ImageRejected) as info:
        prepare_image(damage(_noisy_png()), KEEP)
    assert info.value.reason == "undecodable"
    assert info.value.detail.startswith(detail)


def test_bytes_after_a_png_end_do_not_reject_it():
    png = _noisy_png()
    assert prepare_image(png + b"trailing bytes", KEEP).encoded == png + b"trailing bytes"


def test_a_kept_jpeg_is_rejected_exactly_when_a_full_decode_fails():
    # A kept JPEG is checked by decoding it at 1/8 scale (draft): every entropy-coded
    # block is still decoded. Damage of every kind must be caught as a full decode would.
    rng, noise = random.Random(0), np.random.default_rng(1)

    def full_decode_ok(data):
        try:
            Image.open(io.BytesIO(data)).load()
            return True
        except Exception:
            return False

    outcomes = collections.Counter()
    for i in range(400):
        out = io.BytesIO()
        Image.fromarray(noise.integers(0, 256, (48, 72, 3), dtype=np.uint8)).convert("L" if i % 3 == 0 else "RGB").save(
            out, "JPEG", quality=90, progressive=i % 2 == 1
        )
        data = bytearray(out.getvalue())
        at = rng.randrange(len(data))
        kind = ("truncate", "flip a bit", "overwrite", "insert")[i % 4]
        if kind == "truncate":
            del data[at:]
        elif kind == "flip a bit":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "overwrite":
            data[at : at + 40] = bytes(40)
        else:
            data[at:at] = rng.randbytes(rng.randrange(1, 20))
        try:
            kept = not prepare_image(bytes(data), KEEP).converted
        except ImageRejected:
            kept = False
        else:
            if not kept:
                continue  # the damage made it an image that is converted, not kept
        assert kept == full_decode_ok(bytes(data)), (i, kind, at)
        outcomes[kept] += 1
    assert outcomes[True] > 50 and outcomes[False] > 50


def test_pixel_limit_is_an_option():
    data = image_bytes("PNG", size=(100, 100))
    with pytest.raises(ImageRejected, match="too_large: 100x100 = 10000 pixels exceeds --max-pixels 9999"):
        prepare_image(data, ImageOptions(max_pixels=9999))
    assert prepare_image(data, ImageOptions(max_pixels=10000)).encoded == data


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"resize": 0}, "--resize must be in"),
        ({"quality": 101}, "--quality must be in"),
        ({"image_format": "gif"}, "--image-format must be one of"),
        ({"max_pixels": 0}, "--max-pixels must be"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(OptionsError, match=message):
        ImageOptions(**kwargs)


def test_sixteen_bit_gray_png_transparent_colour_goes_onto_white():
    values = np.full((4, 6), 40_000, np.uint16)
    values[:, :3] = 1234  # the tRNS colour, a 16-bit gray level
    data = encode(Image.fromarray(values, "I;16"), "PNG", transparency=1234)
    image = prepare_image(data, ImageOptions())
    pixels = np.asarray(Image.open(io.BytesIO(image.encoded)))
    assert (image.format, image.channels) == ("png", 3)  # as for 8-bit gray with a transparent colour
    assert (pixels[:, :3] == 255).all() and (pixels[:, 3:] == 40_000 // 256).all()


@pytest.mark.parametrize(
    "make, detail",
    [
        # Pillow reads an icon's PNG entry's own size when it opens the icon.
        (lambda: ico(16, 16, bomb_png(12_000)), "144000000 pixels exceeds --max-pixels 89478485"),
        (
            lambda: icns([(b"ic08", huge_j2k())]),
            "an inner image or frame of 260100000000 pixels exceeds --max-pixels 89478485",
        ),
        (lambda: ico(16, 16, image_bytes("PNG", size=(300, 200))), "60000 pixels exceeds --max-pixels 50000"),
    ],
)
def test_sizes_inside_containers_are_checked_against_max_pixels(make, detail):
    limit = 50_000 if "50000" in detail else 89_478_485
    with pytest.raises(ImageRejected) as info:
        prepare_image(make(), ImageOptions(max_pixels=limit))
    assert (info.value.reason, info.value.detail) == ("too_large", detail)


@pytest.mark.parametrize(
    "fmt,size", [("JPEG", (96, 72)), ("JPEG", (700, 500)), ("PNG", (90, 60)), ("JPEG_CMYK", (96, 72))]
)
def test_the_checks_decode_gives_the_content_keys_pixels(fmt, size):
    """With keys=True an image kept as it is comes with the gray pixels content_keys would decode, so one
    decode serves both; a converted one comes without, and its stored bytes are hashed instead."""
    from prep.core import content_keys as ck
    from tests.support.photos import photo

    img = photo(7, size)
    buf = io.BytesIO()
    if fmt == "JPEG_CMYK":
        img.convert("CMYK").save(buf, "JPEG", quality=90)
    else:
        img.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    data = buf.getvalue()
    prepared = prepare_image(data, ImageOptions(), keys=True)
    assert (prepared.gray is None) == prepared.converted == (fmt == "JPEG_CMYK")
    batch = ck.KeyBatch()
    batch.add(prepared.encoded, prepared.gray)
    assert batch.keys() == [ck.image_keys(prepared.encoded)]
    assert prepare_image(data, ImageOptions()) == prepared  # the keys change nothing that is stored


@pytest.mark.parametrize(
    "fmt, options",
    [
        ("JPEG", ImageOptions(resize=16)),
        ("JPEG", ImageOptions(image_format="png")),
        ("PNG", ImageOptions(image_format="jpeg", quality=80)),
        ("PNG", ImageOptions(max_side=20)),
    ],
)
def test_an_rgb_image_is_converted_as_its_rgb_copy_would_be(fmt, options):
    # The RGB picture goes to resize and save as it is, where it was once copied by convert("RGB"):
    # the same bytes as that copy's, photo-like pixels and the source's info (a JPEG comment, say) included.
    rng = np.random.default_rng(3)
    pixels = np.clip(rng.normal(128, 60, (40, 52, 3)).cumsum(axis=1) / 8, 0, 255).astype(np.uint8)
    data = encode(Image.fromarray(pixels, "RGB"), fmt, **({"comment": b"kept"} if fmt == "JPEG" else {}))
    prepared = prepare_image(data, options)
    assert prepared.converted
    img = Image.open(io.BytesIO(data))
    size = target_size(*img.size, options)
    if fmt == "JPEG" and size != img.size:
        img.draft("RGB", size)  # as prepare_image decodes it
    copy = img.convert("RGB")
    if copy.size != size:
        copy = copy.resize(size, Image.Resampling.BICUBIC)
    out = options.image_format if options.image_format != "keep" else fmt.lower()
    expected = io.BytesIO()
    copy.save(expected, out.upper(), **({"quality": options.quality} if out == "jpeg" else {}))
    assert prepared.encoded == expected.getvalue()
