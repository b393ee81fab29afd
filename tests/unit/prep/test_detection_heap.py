"""The detection listing freezes the heap while it runs (prep/core/detection_inputs.py, `prep.core.frozen_heap`) and
leaves it as it found it: unfrozen when it was, and a caller's frozen heap still frozen, raising or not."""

from __future__ import annotations

import gc
import json

import pytest
from PIL import Image

from prep.core.config import TaskOptions
from prep.core.detection_inputs import list_detection
from prep.core.errors import SourceError


def _source(tmp_path, categories=True):
    (tmp_path / "ds").mkdir()
    Image.new("RGB", (16, 12), (200, 40, 40)).save(tmp_path / "ds" / "a.png")
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": 16, "height": 12}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4]}],
        "categories": [{"id": 1, "name": "a"}] if categories else [],
    }
    (tmp_path / "instances.json").write_text(json.dumps(doc))
    return str(tmp_path / "ds"), TaskOptions(str(tmp_path / "instances.json"))


def _list(source, options):
    return list_detection(source, options, None, "auto", 0)


def _seen_while_listing(monkeypatch, probe) -> list:
    """What `probe()` gives each time the listing proper (`_listing`) starts, from then on."""
    import prep.core.detection_inputs as inputs

    seen: list = []
    listing = inputs._listing

    def spy(*args, **kwargs):
        seen.append(probe())
        return listing(*args, **kwargs)

    monkeypatch.setattr(inputs, "_listing", spy)
    return seen


def test_frozen_while_listing_and_unfrozen_after(tmp_path, monkeypatch):
    source, options = _source(tmp_path)
    seen = _seen_while_listing(monkeypatch, gc.get_freeze_count)
    assert gc.get_freeze_count() == 0
    got = _list(source, options)
    assert [r.path for r in got.refs] == ["a.png"]
    assert seen and seen[0] > 0  # the objects alive before the listing were frozen while it ran
    assert gc.get_freeze_count() == 0


def test_unfrozen_after_an_error(tmp_path):
    source, options = _source(tmp_path, categories=False)
    with pytest.raises(SourceError, match="names no class"):
        _list(source, options)
    assert gc.get_freeze_count() == 0


def test_a_callers_frozen_heap_stays_frozen(tmp_path):
    source, options = _source(tmp_path)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        _list(source, options)
        # not unfrozen under the caller (unfreezing empties it; a frozen object freed meanwhile leaves it)
        assert gc.get_freeze_count() > frozen * 0.9
    finally:
        gc.unfreeze()


def test_the_collector_is_off_while_listing_and_on_after_even_on_an_error(tmp_path, monkeypatch):
    source, options = _source(tmp_path)
    seen = _seen_while_listing(monkeypatch, gc.isenabled)
    assert gc.isenabled()
    _list(source, options)
    assert seen == [False] and gc.isenabled()
    (tmp_path / "bad").mkdir()
    bad_source, bad_options = _source(tmp_path / "bad", categories=False)
    with pytest.raises(SourceError, match="names no class"):
        _list(bad_source, bad_options)
    assert gc.isenabled()


def test_a_callers_disabled_collector_stays_disabled(tmp_path):
    source, options = _source(tmp_path)
    gc.disable()
    try:
        _list(source, options)
        assert not gc.isenabled()
    finally:
        gc.enable()
