"""The arrays of a JSON object read as a stream, in bounded memory, with ijson (its C backend, yajl2_c).

`stream_arrays(path, keys, sink)` reads the file in chunks and hands every item of each named top-level
array to `sink(key, item)` as soon as it is parsed: key after key, in the order given, each key's items in
file order, whatever the order of the arrays in the file. Values are as `json.loads` gives them (ints,
floats, str, lists, dicts), including the `NaN`, `Infinity` and `-Infinity` that Python's JSON writer emits
and yajl refuses: outside strings they are rewritten, byte for byte, into strings of as many bytes
(`"\x7f"`, DEL characters) and turned back into floats in the items (a string of nothing but 1, 6 or 7 DEL
characters is taken for one of them).

Each key is read in a pass of its own over the file, by ijson's C generator (`ijson.items` over a file
object that hands it the chunks): a pass costs about a third of a parse with ijson's coroutines, whose
every event crosses a Python call between the parser's stages, so three passes cost less than the one
parse with a coroutine per key that this replaced (docs/benchmarks.md, detection). A key given twice at the
top level (not valid COCO): `json.loads` keeps its last value, this the items of each of its arrays.
`read_arrays` gives the same items from one pass (ijson's `kvitems`), for a file small enough to hold whole.

A file that is not JSON raises `StreamError` with yajl's reason and the line and column where it
stopped (found by parsing again up to the failing chunk, byte by byte through it: only on errors).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from prep.core import storage

CHUNK = 1 << 16  # bytes a read: small enough to stay in the CPU's cache while parsed
_BOM = codecs.BOM_UTF8
_TOKEN = re.compile(rb'\\.|"|-Infinity|Infinity|NaN', re.DOTALL)
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_SAME_LENGTH = {b"NaN": b'"\x7f"', b"Infinity": b'"' + b"\x7f" * 6 + b'"', b"-Infinity": b'"' + b"\x7f" * 7 + b'"'}
_BACK = {"\x7f": float("nan"), "\x7f" * 6: float("inf"), "\x7f" * 7: float("-inf")}
_HOLD = 16  # bytes held back at a chunk's end, so that no token or escape is cut in two


class StreamError(Exception):
    """The text is not JSON: `reason` (yajl's), `line` and `column` (1-based, in characters)."""

    def __init__(self, reason: str, line: int, column: int, utf8: bool = True):
        super().__init__(f"{reason} at line {line} column {column}")
        self.reason, self.line, self.column, self.utf8 = reason, line, column, utf8


class _Literals:
    """Rewrites NaN, Infinity and -Infinity outside strings into strings of the same length (see above)."""

    def __init__(self) -> None:
        self.in_string = False
        self.rewritten = 0

    def __call__(self, data: bytes) -> bytes:
        if b"NaN" not in data and b"Infinity" not in data:  # the fast path: only track whether in a string
            quotes = _ESCAPE.sub(b"", data).count(b'"') if b"\\" in data else data.count(b'"')
            self.in_string ^= bool(quotes & 1)
            return data
        out, last = [], 0
        for m in _TOKEN.finditer(data):
            token = m.group()
            if token == b'"':
                self.in_string = not self.in_string
            elif token in _SAME_LENGTH and not self.in_string:
                out += [data[last : m.start()], _SAME_LENGTH[token]]
                last = m.end()
                self.rewritten += 1
        return b"".join(out) + data[last:] if out else data


def _cut(data: bytes) -> int:
    """Where to end a chunk that is not the file's last: before its last `_HOLD` bytes, never inside a
    literal (a run of letters up to the longest, `-Infinity`) nor just after a backslash (an escape)."""
    cut = max(0, len(data) - _HOLD)
    for _ in range(len(b"-Infinity")):
        if cut == 0 or not (data[cut - 1 : cut].isalpha() or data[cut - 1 : cut] == b"-"):
            break
        cut -= 1
    while cut > 0 and data[cut - 1 : cut] == b"\\":
        cut -= 1
    return cut


def _chunks(f: BinaryIO, literals: _Literals) -> Iterable[bytes]:
    """The file's bytes in chunks, a leading byte-order mark dropped and literals rewritten."""
    held = storage.read_exact(f, len(_BOM))
    held = b"" if held == _BOM else held
    while True:
        piece = f.read(CHUNK)
        data = held + piece
        if not piece:
            if data:
                yield literals(data)
            return
        cut = _cut(data)
        held = data[cut:]
        if cut:
            yield literals(data[:cut])


def _restore(value: Any) -> Any:
    if isinstance(value, str):
        return _BACK.get(value, value)
    if isinstance(value, list):
        return [_restore(v) for v in value]
    if isinstance(value, dict):
        return {k: _restore(v) for k, v in value.items()}
    return value


def first_byte(path: str) -> bytes:
    """The first byte of the text that is not white space (after a byte-order mark), b'' if none."""
    with storage.open_read(path) as f:
        for chunk in _chunks(f, _Literals()):
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                return stripped[:1]
    return b""


def stream_arrays(path: str, keys: tuple[str, ...], sink: Callable[[str, Any], None]) -> dict[str, int]:
    """Hands every item of the top-level arrays `keys` of the JSON file at `path` to `sink(key, item)`;
    returns the number of items of each key.

    Raises:
        StreamError: the text is not JSON (or not UTF-8 in a string).
        OSError: the file cannot be read.
    """
    counts = dict.fromkeys(keys, 0)
    for key, item in iter_arrays(path, keys, counts):
        sink(key, item)
    return counts


def iter_arrays(path: str, keys: tuple[str, ...], counts: dict[str, int]) -> Iterator[tuple[str, Any]]:
    """`stream_arrays` as a generator of (key, item), for a caller that yields what it makes of each item
    (a Beam step); `counts` gets the number of items of each key.

    Raises:
        StreamError: the text is not JSON (or not UTF-8 in a string).
        OSError: the file cannot be read.
    """
    import ijson  # lazily: the pure core imports no third-party parser at start

    counts.update(dict.fromkeys(keys, 0))
    for key in keys:
        with storage.open_read(path) as f:
            text = _Text(f)
            try:
                for item in ijson.items(text, f"{key}.item", use_float=True, buf_size=CHUNK):
                    counts[key] += 1
                    yield key, (_restore(item) if text.literals.rewritten else item)
            except ijson.JSONError as exc:
                raise _locate(path, str(exc), text.start) from None


def read_arrays(path: str, keys: tuple[str, ...]) -> tuple[list[tuple[str, Any]], dict[str, int]] | None:
    """`iter_arrays`' items and counts from one pass over the file, its top-level values held whole (for a
    file small enough to hold); in file order, not key after key. None when that pass cannot be sure to give
    what `iter_arrays` gives: the text is not JSON (`iter_arrays` says where), a literal was rewritten, or a
    value of `keys` is not an array (ijson's `key.item` would then look inside it); the caller streams then.

    Raises:
        OSError: the file cannot be read.
    """
    import ijson  # lazily: the pure core imports no third-party parser at start

    # One pass instead of a pass a key: each pass tokenizes the whole file (docs/benchmarks.md, detection).
    wanted = set(keys)
    items: list[tuple[str, Any]] = []
    counts = dict.fromkeys(keys, 0)
    with storage.open_read(path) as f:
        loaded = _loaded(f.read(), keys)
    if loaded is not None:
        return loaded
    with storage.open_read(path) as f:
        text = _Text(f)
        try:
            for key, value in ijson.kvitems(text, "", use_float=True, buf_size=CHUNK):
                if key not in wanted:
                    continue
                if not isinstance(value, list):
                    return None
                items += [(key, item) for item in value]  # a key given twice: each array's items, as a pass
                counts[key] += len(value)
        except ijson.JSONError:
            return None
    return None if text.literals.rewritten else (items, counts)


# Bytes a number yajl refuses may hold (an int past 64 bits, a float past 1e308): 19 digits in a row, an
# exponent of three digits. `_loaded` maps digits to "0" and e/E to "e", drops signs, and looks for them.
_NUMBER_SHAPES = bytes(ord("0") if chr(b).isdigit() else ord("e") if chr(b) in "eE" else ord(" ") for b in range(256))


class _Unsure(Exception):
    """`json.loads` met NaN or Infinity, which yajl reads only as rewritten (`_Literals`)."""


def _constant(name: str) -> float:
    raise _Unsure(name)


def _loaded(data: bytes, keys: tuple[str, ...]) -> tuple[list[tuple[str, Any]], dict[str, int]] | None:
    """`read_arrays`' answer from `json.loads` (C, faster than ijson's one pass), or None when the text might
    hold what yajl and `json.loads` read apart: NaN or Infinity, a backslash-u escape (a lone surrogate; a key
    spelled with escapes), one of `keys` written twice (`json.loads` keeps the last value only), a number
    yajl refuses (`_NUMBER_SHAPES`), text that is not UTF-8 or not a JSON object. Any of these in a string
    too: then ijson reads it, as before."""
    data = data[len(_BOM) :] if data.startswith(_BOM) else data
    if b"\\u" in data or any(data.count(b'"' + key.encode() + b'"') > 1 for key in keys):
        return None
    shapes = data.translate(_NUMBER_SHAPES, b"+-")
    if b"0" * 19 in shapes or b"e000" in shapes:
        return None
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_constant)
    except (ValueError, _Unsure):  # not UTF-8 (UnicodeDecodeError) or not JSON: ijson says which, and where
        return None
    if type(doc) is not dict:
        return None
    items: list[tuple[str, Any]] = []
    counts = dict.fromkeys(keys, 0)
    for key, value in doc.items():  # in file order
        if key not in counts:
            continue
        if type(value) is not list:
            return None
        items += [(key, item) for item in value]
        counts[key] = len(value)
    return items, counts


class _Text:
    """The file's text as `_chunks` gives it, as the file object ijson's C parser reads: each `read` one chunk.
    `start`: where the last chunk read starts in that text (where a parse error was met, at the latest)."""

    def __init__(self, f: BinaryIO) -> None:
        self.literals = _Literals()
        self._chunks = iter(_chunks(f, self.literals))
        self.start = self._end = 0

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        chunk = next(self._chunks, b"")
        self.start, self._end = self._end, self._end + len(chunk)
        return chunk


def value_of(path: str, key: str) -> list[Any]:
    """The values of top-level `key` (none when absent): for a key whose array gave no items, to tell an
    empty array from a missing key or another type. Parses the file again."""
    import ijson  # lazily: the pure core imports no third-party parser at start

    with storage.open_read(path) as f:
        got: list[Any] = ijson.utils.sendable_list()
        coro = ijson.items_coro(got, key, use_float=True)
        for chunk in _chunks(f, _Literals()):
            coro.send(chunk)
        coro.close()
    return [_restore(v) for v in got]


def _locate(path: str, message: str, start: int) -> StreamError:
    """The error of yajl's `message`, met in the chunk that starts at byte `start` of the parsed text,
    at the line and column of the byte where a fresh parser fed byte by byte from there stops."""
    import ijson  # lazily: the pure core imports no third-party parser at start

    reason = message.strip().strip("b'\"").split("\\n")[0].split("\n")[0].strip().rstrip(".")
    coro = ijson.basic_parse_coro(ijson.utils.sendable_list())
    where = _Position()
    with storage.open_read(path) as f:
        try:
            for chunk in _chunks(f, _Literals()):
                if where.offset + len(chunk) <= start:
                    coro.send(chunk)
                    where.advance(chunk)
                    continue
                for i in range(len(chunk)):
                    coro.send(chunk[i : i + 1])
                    where.advance(chunk[i : i + 1])
            coro.close()
        except ijson.JSONError:
            pass
    return StreamError(reason, where.line, where.column, utf8="UTF8" not in reason)


class _Position:
    """Line and column (in characters: UTF-8 continuation bytes are not counted) after the bytes seen."""

    _CONTINUATION = bytes(range(0x80, 0xC0))

    def __init__(self) -> None:
        self.offset, self.line, self.column = 0, 1, 1

    def advance(self, data: bytes) -> None:
        self.offset += len(data)
        newlines = data.count(b"\n")
        if newlines:
            self.line += newlines
            self.column = 1
            data = data[data.rfind(b"\n") + 1 :]
        self.column += len(data.translate(None, self._CONTINUATION))
