"""The parsed-YAML cache (sglops.core.yamlio): a file read back from it is the parse itself, with its lines; a
changed file is parsed afresh; what marshal cannot keep as
it is (an alias's shared object, a date) is not kept."""

from __future__ import annotations

import datetime
import marshal

import pytest

from sglops.core import paths, yamlio
from sglops.core.errors import ConfigError


@pytest.fixture
def kept(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setattr(paths, "cache", lambda rel: folder / rel)
    return folder / "yaml"


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert (a.where, list(a)) == (b.where, list(b))
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b


def test_a_kept_parse_is_the_parse_with_its_lines(tmp_path, kept):
    f = tmp_path / "p.yaml"
    f.write_text("a: 1\nb:\n  - {x: 1.5, y: null}\n  - !!binary aGk=\n  - true\nc: !!set {k: null}\n")
    fresh = yamlio.loads_yaml(f.read_text(), str(f))
    first = yamlio.load_yaml(f)
    assert len(list(kept.glob("*.marshal"))) == 1
    again = yamlio.load_yaml(f)
    _same(fresh, first)
    _same(fresh, again)
    assert again["b"][0].where == f"{f}:3" and again is not first


def test_a_changed_file_is_parsed_afresh_and_errors_are_never_kept(tmp_path, kept):
    f = tmp_path / "p.yaml"
    f.write_text("a: 1\n")
    assert yamlio.load_yaml(f) == {"a": 1}
    f.write_text("a: 2\n")
    assert yamlio.load_yaml(f) == {"a": 2}
    f.write_text("a: 1\na: 2\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="duplicate key"):
            yamlio.load_yaml(f)


def test_aliases_and_dates_are_parsed_every_time(tmp_path, kept):
    f = tmp_path / "p.yaml"
    f.write_text("base: &b {x: 1}\nuse: *b\nwhen: 2026-12-06\n")
    data = yamlio.load_yaml(f)
    assert data["base"] is data["use"] and data["when"] == datetime.date(2026, 12, 6)
    assert not list(kept.glob("*.marshal"))
    again = yamlio.load_yaml(f)
    assert again["base"] is again["use"]


def test_a_damaged_cache_file_is_parsed_again(tmp_path, kept):
    f = tmp_path / "p.yaml"
    f.write_text("a: [1, 2]\n")
    yamlio.load_yaml(f)
    (entry,) = kept.glob("*.marshal")
    for damaged in (b"\x00garbage", b"N", marshal.dumps(("other", [1]))):
        entry.write_bytes(damaged)
        assert yamlio.load_yaml(f) == {"a": [1, 2]}
