"""Records of the tasks beyond single-label classification: multi-label, detection, segmentation.

`TaskRecord` is built by the writer and parsed by `verify`, `inspect` and the tests; the
loaders parse the same keys with TensorFlow (`prep.core.schema` names them all and says
what each holds). A record is one of `schema.TASKS`; the fields of other tasks stay empty
and are not written. Detection masks are written for every object or for none.

Detection boxes are written twice: as Model Garden's four lists and as one yxyx list
(`schema.OBJECT_BBOX`) for tensorflow-datasets. The objects are made from the four lists;
`from_bytes` keeps the yxyx list as read in `TaskRecord.bbox` so that `verify` can compare
the two (`prep.task_checks`), and `features` always writes it afresh from the objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast, overload

from prep.core import schema as s
from prep.core.errors import RecordError
from prep.core.wire import (
    ByteList,
    Ints,
    Value,
    decode_example,
    encode_example,
    float_entries,
    int_entries,
    list_entry,
)

_COMMON_BYTES = (s.ENCODED, s.FORMAT, s.FILENAME, s.SHA256)
_COMMON_INTS = (s.HEIGHT, s.WIDTH, s.CHANNELS)


@dataclasses.dataclass(frozen=True)
class BoxObject:
    """One object of a detection record: class id (from 1), name, normalised box, area in pixels."""

    label: int
    text: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    area: float
    crowd: int = 0
    difficult: int = 0
    mask: bytes | None = None  # single-channel 0/1 PNG at the image's size


class ObjectColumns(Sequence[BoxObject]):
    """A detection record's objects as columns (no masks), as a conversion builds them: no object per box.
    Read as a sequence, it gives the same `BoxObject`s as the tuple it stands for, and equals that tuple."""

    __slots__ = ("label", "text", "xmin", "ymin", "xmax", "ymax", "area", "crowd", "difficult")

    def __init__(
        self,
        label: list[int],
        text: list[str],
        box: tuple[list[float], ...],
        area: list[float],
        flags: tuple[list[int], list[int]],
    ):
        self.label, self.text, self.area = label, text, area
        self.xmin, self.ymin, self.xmax, self.ymax = box
        self.crowd, self.difficult = flags

    def __len__(self) -> int:
        return len(self.label)

    @overload
    def __getitem__(self, i: int) -> BoxObject: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[BoxObject, ...]: ...

    def __getitem__(self, i: int | slice) -> BoxObject | tuple[BoxObject, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        return BoxObject(
            self.label[i],
            self.text[i],
            self.xmin[i],
            self.ymin[i],
            self.xmax[i],
            self.ymax[i],
            self.area[i],
            self.crowd[i],
            self.difficult[i],
        )

    def __iter__(self) -> Iterator[BoxObject]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    task: str
    encoded: bytes
    format: str
    height: int
    width: int
    channels: int
    filename: str
    sha256: str
    source_id: str | None = None
    labels: tuple[int, ...] = ()  # multilabel: ids from 0
    texts: tuple[str, ...] = ()  # multilabel: names, as labels
    objects: tuple[BoxObject, ...] | ObjectColumns = ()  # detection
    masks: bool = False  # detection: whether image/object/mask is written
    segmentation: bytes | None = None  # segmentation: the class map, PNG
    # detection: image/object/bbox/yxyx as read by `from_bytes` (None: built, or a record without it). Not part
    # of the record's value: `features` writes `yxyx()` instead, so equality and round trips ignore it.
    bbox: tuple[float, ...] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.task not in s.TASKS or self.task == "classification":
            raise ValueError(f"TaskRecord is for {', '.join(s.TASKS[1:])}, not {self.task!r}")
        if self.masks and any(o.mask is None for o in self.objects):
            raise ValueError("masks are written for every object or for none")

    @classmethod
    def build(cls, task: str, encoded: bytes, **fields: Any) -> TaskRecord:
        """A record with `sha256` computed from `encoded`."""
        return cls(task=task, encoded=encoded, sha256=hashlib.sha256(encoded).hexdigest(), **fields)

    def yxyx(self) -> tuple[float, ...]:
        """The boxes as tfds' BBoxFeature sequence holds them: [ymin, xmin, ymax, xmax] per object."""
        o = self.objects
        return tuple(_yxyx([b.xmin for b in o], [b.ymin for b in o], [b.xmax for b in o], [b.ymax for b in o]))

    def features(self) -> dict[str, Value]:
        out: dict[str, Value] = {
            s.ENCODED: self.encoded,
            s.FORMAT: self.format.encode(),
            s.HEIGHT: self.height,
            s.WIDTH: self.width,
            s.CHANNELS: self.channels,
            s.FILENAME: self.filename.encode("utf-8", "surrogateescape"),
            s.SHA256: self.sha256.encode(),
        }
        if self.source_id is not None:
            out[s.SOURCE_ID] = self.source_id.encode()
        if self.task == "multilabel":
            out[s.LABEL] = Ints(self.labels)
            out[s.TEXT] = ByteList(t.encode("utf-8") for t in self.texts)
        elif self.task == "detection":
            out |= _object_features(self.objects)
            if self.masks:
                # every object has one (__post_init__)
                out[s.OBJECT_MASK] = ByteList(o.mask for o in self.objects if o.mask is not None)
        elif self.task == "segmentation":
            out[s.SEGMENTATION] = cast(bytes, self.segmentation)  # None fails in encode_example, as it always did
            out[s.SEGMENTATION_FORMAT] = b"png"
        return out

    def to_bytes(self) -> bytes:
        return encode_example(self.features())

    @classmethod
    def from_bytes(cls, data: bytes, task: str) -> TaskRecord:
        """Parses a record of `task`.

        Raises:
            RecordError: not an Example, or a key of the task missing or of the wrong kind or length.
        """
        f = decode_example(data)

        def get(key: str, kind: str, one: bool = True) -> Any:  # a value or the list, of `kind`'s type
            if key not in f:
                raise RecordError(f"record lacks feature {key}")
            got, items = f[key]
            if got != kind and not (got == "empty" and not one):
                raise RecordError(f"feature {key} must hold {kind} values, has {got}")
            if one and len(items) != 1:
                raise RecordError(f"feature {key} must hold one {kind} value, has {len(items)}")
            return items[0] if one else items

        try:
            common = dict(
                encoded=get(s.ENCODED, "bytes"),
                format=get(s.FORMAT, "bytes").decode(),
                height=get(s.HEIGHT, "int64"),
                width=get(s.WIDTH, "int64"),
                channels=get(s.CHANNELS, "int64"),
                filename=get(s.FILENAME, "bytes").decode("utf-8", "surrogateescape"),
                sha256=get(s.SHA256, "bytes").decode(),
                source_id=get(s.SOURCE_ID, "bytes").decode() if s.SOURCE_ID in f else None,
            )
            if task == "multilabel":
                labels, texts = get(s.LABEL, "int64", False), get(s.TEXT, "bytes", False)
                if len(labels) != len(texts):
                    raise RecordError(f"{s.LABEL} has {len(labels)} ids but {s.TEXT} {len(texts)} names")
                return cls(task, **common, labels=tuple(labels), texts=tuple(t.decode() for t in texts))
            if task == "detection":
                bbox = tuple(get(s.OBJECT_BBOX, "float", False)) if s.OBJECT_BBOX in f else None
                return cls(task, **common, **_objects(get, s.OBJECT_MASK in f), bbox=bbox)
            if task == "segmentation":
                return cls(task, **common, segmentation=get(s.SEGMENTATION, "bytes"))
        except UnicodeDecodeError as exc:
            raise RecordError(f"record holds a text feature that is not UTF-8: {exc}") from None
        raise ValueError(f"TaskRecord is for {', '.join(s.TASKS[1:])}, not {task!r}")


def _object_features(objs: Sequence[BoxObject]) -> dict[str, Value]:
    """The per-object features but masks, from columns as they are or from each object, as their map entries
    encoded a kind at a time (`wire.float_entries`: one pack of the six float lists): per record written."""
    if isinstance(objs, ObjectColumns):
        c = objs
    else:
        c = ObjectColumns(
            [o.label for o in objs],
            [o.text for o in objs],
            ([o.xmin for o in objs], [o.ymin for o in objs], [o.xmax for o in objs], [o.ymax for o in objs]),
            [o.area for o in objs],
            ([o.crowd for o in objs], [o.difficult for o in objs]),
        )
    floats = {
        s.OBJECT_AREA: c.area,
        s.OBJECT_XMAX: c.xmax,
        s.OBJECT_XMIN: c.xmin,
        s.OBJECT_YMAX: c.ymax,
        s.OBJECT_YMIN: c.ymin,
        s.OBJECT_BBOX: _yxyx(c.xmin, c.ymin, c.xmax, c.ymax),
    }
    ints = {s.OBJECT_LABEL: c.label, s.OBJECT_CROWD: c.crowd, s.OBJECT_DIFFICULT: c.difficult}
    out: dict[str, Value] = {**float_entries(floats), **int_entries(ints)}
    out[s.OBJECT_TEXT] = list_entry(s.OBJECT_TEXT, ByteList([t.encode("utf-8") for t in c.text]))
    return out


def _yxyx(xmin: list[float], ymin: list[float], xmax: list[float], ymax: list[float]) -> list[float]:
    """[ymin, xmin, ymax, xmax] of each object, one after the other (`TaskRecord.yxyx`)."""
    out: list[float] = [0.0] * (4 * len(xmin))
    out[0::4], out[1::4], out[2::4], out[3::4] = ymin, xmin, ymax, xmax
    return out


def _objects(get: Callable[[str, str, bool], Any], masks: bool) -> dict[str, Any]:
    columns = {
        key: get(key, kind, False)
        for key, kind in (
            (s.OBJECT_XMIN, "float"),
            (s.OBJECT_YMIN, "float"),
            (s.OBJECT_XMAX, "float"),
            (s.OBJECT_YMAX, "float"),
            (s.OBJECT_LABEL, "int64"),
            (s.OBJECT_TEXT, "bytes"),
            (s.OBJECT_AREA, "float"),
            (s.OBJECT_CROWD, "int64"),
            (s.OBJECT_DIFFICULT, "int64"),
        )
    }
    if masks:
        columns[s.OBJECT_MASK] = get(s.OBJECT_MASK, "bytes", False)
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise RecordError(
            "the per-object features of a record differ in length: "
            + ", ".join(f"{k} {len(v)}" for k, v in columns.items())
        )
    n = lengths.pop() if lengths else 0
    c = columns
    objects = tuple(
        BoxObject(
            c[s.OBJECT_LABEL][i],
            c[s.OBJECT_TEXT][i].decode(),
            c[s.OBJECT_XMIN][i],
            c[s.OBJECT_YMIN][i],
            c[s.OBJECT_XMAX][i],
            c[s.OBJECT_YMAX][i],
            c[s.OBJECT_AREA][i],
            c[s.OBJECT_CROWD][i],
            c[s.OBJECT_DIFFICULT][i],
            c[s.OBJECT_MASK][i] if masks else None,
        )
        for i in range(n)
    )
    return {"objects": objects, "masks": masks}
