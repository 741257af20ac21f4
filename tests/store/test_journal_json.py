"""The journal's one JSON encoder (``journal._compact_json``): orjson first, the stdlib's encoder
where orjson refuses a value or its text could mean something else (issue 15, journal CPU per
event). What an event means when read back is what it meant with the stdlib encoder alone: each
guarded difference has its test here (real ``Journal``, real SQLite); the differences accepted
(an ``Enum`` member's value, a ``UUID``'s text) are pinned as documented."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import json
import math
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitwatch.core.events import EventKind
from jitwatch.store import journal as journal_mod
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import make_event

orjson = pytest.importorskip("orjson")

T0 = 1_700_000_000.0


def stored(tmp_path: Path, attrs: dict[str, Any], kind: EventKind = EventKind.COMPILE) -> tuple[str, dict[str, Any]]:
    """(the attrs text in the ``events`` row, the attrs read back) of one event written alone."""
    ev = make_event(kind, T0, kernel="k", key="[16]", duration_s=0.01, attrs=attrs)
    with Journal(tmp_path) as j:
        assert len(j.write([ev])) == 1
        back = j.events(limit=1)
    con = sqlite3.connect(tmp_path / JOURNAL_FILE)
    try:
        (text,) = con.execute("SELECT attrs FROM events").fetchone()
    finally:
        con.close()
    return text, back[0].attrs


def test_the_encoder_is_orjson_backed() -> None:
    """With orjson importable the journal's encoder writes orjson's float text (the stdlib writes
    ``1e-05``): the checks below test that encoder, not the stdlib's alone."""
    assert journal_mod._compact_json is not journal_mod._stdlib_json
    assert journal_mod._compact_json({"t": 1e-05}) == '{"t":0.00001}'
    assert journal_mod._stdlib_json({"t": 1e-05}) == '{"t":1e-05}'


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (-float("inf"), "-inf"),
        ({"ttir": 0.5, "cubin": float("nan")}, {"ttir": 0.5, "cubin": "nan"}),
        ([1.0, [float("inf")]], [1.0, ["inf"]]),
    ],
)
def test_non_finite_floats_are_stored_as_their_names_not_null(tmp_path: Path, value: Any, want: Any) -> None:
    """orjson writes NaN/±inf as ``null``; the journal stores their names (the careful path's
    :func:`_clean`), as it did with the stdlib encoder, which refuses them."""
    text, attrs = stored(tmp_path, {"stages": value, "rank": 0})
    assert attrs["stages"] == want
    assert "null" not in text


class Color(enum.Enum):
    RED = 1


class Shade(enum.Flag):
    DARK = 1


class Level(enum.IntEnum):
    HIGH = 3


class Mode(str, enum.Enum):
    FAST = "fast"


class Text(str):
    pass


class Count(int):
    pass


class Seconds(float):
    pass


Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Options:
    num_warps: int = 4


_WHEN = datetime.datetime(2026, 12, 2, 21, 0, 0, 123456, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (Options(), str(Options())),
        (_WHEN, str(_WHEN)),
        (_WHEN.date(), str(_WHEN.date())),
        (_WHEN.time(), str(_WHEN.time())),
        (Text("x"), "x"),
        (Count(7), 7),
        (Seconds(0.25), 0.25),
        (collections.OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
        (Pair(1, 2), [1, 2]),
        (Level.HIGH, 3),
        (Mode.FAST, "fast"),
        ({1: "one", 1.5: "x", None: "n", False: "f"}, {"1": "one", "1.5": "x", "null": "n", "false": "f"}),
        ({Text("k"): 1}, {"k": 1}),
        (2**70, 2**70),
        (-(2**64), -(2**64)),
        ("a\ud800b", "a?b"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_values_orjson_would_write_otherwise_are_stored_as_before(tmp_path: Path, value: Any, want: Any) -> None:
    """Each alone beside an ordinary attr: types orjson serializes natively but the stdlib refuses
    (dataclass, ``datetime``/``date``/``time``) are stored as their ``str``, as before; subclasses of
    ``str``/``int``/``float``/``dict``/``tuple`` as the stdlib writes them (their plain value);
    non-``str`` keys as the stdlib names them; ints past 64 bits whole; a lone surrogate as ``?``."""
    _, back = stored(tmp_path, {"value": value, "rank": 0})
    assert back == {"value": want, "rank": 0}
    assert type(back["value"]) is type(want)


@pytest.mark.parametrize(
    "attrs",
    [
        {"huge": 2**64, "stages": {"ttir": 1e-05}},
        {"keys": {7: 1}, "stages": {"ttir": 1e-05}},
        {"deep": json.loads("[" * 300 + "]" * 300), "stages": {"ttir": 1e-05}},
        {"text": Text("y"), "stages": {"ttir": 1e-05}},
        {"none": None, "stages": {"ttir": 1e-05}},
    ],
    ids=["int-past-64-bits", "int-key", "300-levels", "str-subclass", "null"],
)
def test_what_orjson_refuses_or_writes_as_null_is_the_stdlib_text(attrs: dict[str, Any]) -> None:
    """Where orjson refuses a value (ints past 64 bits, non-``str`` keys, nesting past its 254
    levels, subclasses) or its text holds ``null``, the stored text is the stdlib's, character for
    character (``1e-05`` marks it)."""
    text = journal_mod._compact_json(attrs)
    assert text == journal_mod._stdlib_json(attrs)
    assert "1e-05" in text


def test_circular_values_are_refused_and_cut_as_before(tmp_path: Path) -> None:
    """A value holding itself is refused by both encoders (``RecursionError``, as the stdlib's alone
    raised); the event takes the careful path, whose size cap cuts that value, as before."""
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(RecursionError):
        journal_mod._stdlib_json({"loop": loop})
    with pytest.raises(RecursionError):
        journal_mod._compact_json({"loop": loop})
    _, back = stored(tmp_path, {"loop": loop, "n": 1})
    assert back == {"loop": "…[truncated]", "n": 1, "_truncated": True}


def test_redaction_sees_the_text_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home path in the attrs is redacted (the careful path, whose cleaned value is encoded by the
    same encoder); the same attrs without it are stored as orjson wrote them."""
    monkeypatch.setenv("HOME", "/home/alice")
    from jitwatch import redact as redact_mod

    redact_mod._patterns.cache_clear()
    try:
        text, back = stored(tmp_path / "a", {"file": "/home/alice/k.py", "stages": {"ttir": 1e-05}})
        assert back == {"file": "~/k.py", "stages": {"ttir": 1e-05}}
        assert text == '{"file":"~/k.py","stages":{"ttir":0.00001}}'  # the careful path's text: orjson's too
        plain, _ = stored(tmp_path / "b", {"file": "/opt/k.py", "stages": {"ttir": 1e-05}})
        assert plain == '{"file":"/opt/k.py","stages":{"ttir":0.00001}}'
    finally:
        redact_mod._patterns.cache_clear()


def test_accepted_differences_enum_member_value_and_uuid_text(tmp_path: Path) -> None:
    """Documented, not guarded (orjson cannot be told to refuse them): a plain ``Enum``/``Flag``
    member is stored as its value (the stdlib refused it and ``str(member)`` was stored); a
    ``UUID`` as the same text as before (its ``str``)."""
    ident = uuid.UUID(int=0x1234)
    with pytest.raises(TypeError):
        journal_mod._stdlib_json({"color": Color.RED})
    _, back = stored(tmp_path, {"color": Color.RED, "shade": Shade.DARK, "id": ident})
    assert back == {"color": 1, "shade": 1, "id": str(ident)}


def test_without_orjson_the_stdlib_encoder_stores_the_same_values(tmp_path: Path) -> None:
    """jitwatch without orjson (not importable, in a fresh interpreter): the encoder is the stdlib's
    and an event's attrs read back the same."""
    attrs = {"stages": {"ttir": 1e-05, "cubin": -0.0}, "note": "é", "rank": 0}
    script = (
        "import sys, json; sys.modules['orjson'] = None\n"
        "from jitwatch.store import journal as jm\n"
        "from jitwatch.core.events import EventKind\n"
        "from jitwatch.testing import make_event\n"
        "assert jm._compact_json is jm._stdlib_json\n"
        "with jm.Journal(sys.argv[1]) as j:\n"
        f"    j.write([make_event(EventKind.COMPILE, {T0}, kernel='k', attrs=json.loads(sys.argv[2]))])\n"
    )
    env_path = str(Path(journal_mod.__file__).resolve().parents[2])
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "plain"), json.dumps(attrs)],
        check=True,
        env={"PYTHONPATH": env_path, "OTEL_SDK_DISABLED": "true", "HOME": "/nonexistent"},
        timeout=120,
    )
    with Journal(tmp_path / "plain", readonly=True) as r:
        back = r.events(limit=1)[0].attrs
    _, ours = stored(tmp_path / "orjson", attrs)
    assert back == ours == attrs
    assert math.copysign(1.0, back["stages"]["cubin"]) == -1.0


# --------------------------------------------------------------------------- property test
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-05, 1e16, 5e-324, -0.0, 1e-7, 123456789.125, 1e22, 1e21]),
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)),  # lone surrogates too
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)


def canonical(text: str) -> str:
    """The stdlib's text of what ``json.loads`` reads from ``text``: equal for equal values, floats
    compared by ``repr`` (so ``-0.0`` is not ``0.0``)."""
    return journal_mod._stdlib_json(json.loads(text))


@settings(max_examples=400, deadline=None)
@given(value=_VALUE)
def test_orjson_text_parses_to_what_the_stdlib_text_parses_to(value: Any) -> None:
    """For any JSON-shaped value: the encoder raises exactly when the stdlib encoder raises (the same
    type), and otherwise its text parses with ``json.loads`` to the same value as the stdlib's text
    (what every reader, old jitwatch included, does with it); strings are the same characters."""
    try:
        want = journal_mod._stdlib_json(value)
    except (ValueError, TypeError, RecursionError) as exc:
        with pytest.raises(type(exc)):
            journal_mod._compact_json(value)
        return
    got = journal_mod._compact_json(value)
    assert canonical(got) == canonical(want) == want


def test_every_code_point_is_escaped_as_the_stdlib_escapes_it() -> None:
    """Strings are the same characters in either encoder's text (escapes included), so the
    redaction checks that run on the text (``may_need_redaction``) see what they saw before; a lone
    surrogate (orjson refuses it) gets the stdlib's text."""
    points = [*range(0xD800), *range(0xE000, 0x110000)]
    for start in range(0, len(points), 8192):
        text = "".join(map(chr, points[start : start + 8192]))
        assert journal_mod._compact_json({text: [text]}) == journal_mod._stdlib_json({text: [text]})
    assert journal_mod._compact_json(["\udfff"]) == journal_mod._stdlib_json(["\udfff"])


def test_a_triton_record_an_older_writer_stored_is_found_on_the_fast_path_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal written with the stdlib's text (what jitwatch stored before orjson), then the same
    Triton compiles written with orjson's: a record holding a float the two write differently
    (``EPS = 1e-06``) is found by its identity on the fast path (no new row), but a compile taken
    on the careful path (its own attrs hold a home path to redact) has its record found by its
    text, so that record is stored once more beside the older one: same values read back."""
    monkeypatch.setenv("HOME", "/home/alice")
    from jitwatch import redact as redact_mod
    from jitwatch.core.events import Phase

    def compile_event(i: int, block: int, cache_dir: str) -> Any:
        data = json.dumps({"name": "ln", "constant_vals": [block, 1e-06], "key": f"[{block}, 1e-06]"})
        attrs = {
            "module": "pkg.kernels",
            "cache_dir": cache_dir,
            "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr", "EPS": "constexpr"},
            "constexprs": {"BLOCK": block, "EPS": 1e-06},
            "options": {"num_warps": 4},
            "specialization_data": data,
            "source_hash": "ab" * 32,
        }
        return make_event(
            EventKind.COMPILE, T0 + i, phase=Phase.WARMUP, kernel="ln", key=f"[{block}, 1e-06]", attrs=attrs
        )

    def spec_rows() -> int:
        con = sqlite3.connect(tmp_path / JOURNAL_FILE)
        try:
            return int(con.execute("SELECT COUNT(*) FROM specializations").fetchone()[0])
        finally:
            con.close()

    redact_mod._patterns.cache_clear()
    try:
        batch = [compile_event(0, 16, "/opt/cache"), compile_event(1, 32, "/home/alice/.triton/cache")]
        with monkeypatch.context() as older:
            older.setattr(journal_mod, "_compact_json", journal_mod._stdlib_json)
            with Journal(tmp_path) as j:
                j.write(batch)
        assert spec_rows() == 2
        with Journal(tmp_path) as j:
            j.write([ev.model_copy(update={"ts": ev.ts + 10}) for ev in batch])
            back = j.events(limit=10)
        assert spec_rows() == 3  # BLOCK=16 found by its identity; BLOCK=32 (careful) stored again
        by_block: dict[int, list[dict[str, Any]]] = {}
        for ev in back:
            by_block.setdefault(ev.attrs["constexprs"]["BLOCK"], []).append(ev.attrs)
        assert {b: len(a) for b, a in by_block.items()} == {16: 2, 32: 2}
        assert all(a[0] == a[1] and a[0]["constexprs"]["EPS"] == 1e-06 for a in by_block.values())
        assert by_block[32][0]["cache_dir"] == "~/.triton/cache"
    finally:
        redact_mod._patterns.cache_clear()


class _Dtype(int, enum.Enum):
    """An ``int`` mix-in whose ``value`` is not its ``int`` (``_value_`` set in ``__new__``)."""

    def __new__(cls, code: int, label: str) -> _Dtype:
        member = int.__new__(cls, code)
        member._value_ = label
        return member

    FP16 = (1, "fp16")


def test_accepted_difference_a_mix_in_enum_member_whose_value_is_not_its_data(tmp_path: Path) -> None:
    """Documented, not guarded: orjson writes an ``Enum`` member's ``value``; for ``IntEnum`` and
    ``StrEnum`` that is the stdlib's text (the mix-in's data), but a mix-in member whose ``_value_``
    differs from its data is stored as its value (``"fp16"``) where the stdlib wrote its data
    (``1``)."""
    assert journal_mod._stdlib_json({"dtype": _Dtype.FP16}) == '{"dtype":1}'
    _, back = stored(tmp_path, {"dtype": _Dtype.FP16})
    assert back == {"dtype": "fp16"}


def test_what_exporters_send_is_what_the_journal_stores(tmp_path: Path) -> None:
    """``sanitized`` (what the OTLP exporter sends) is the event "as the journal stores it": an
    ``Enum`` member that orjson writes as its value is that value in the exported attrs too, not
    the exporter's own ``str(member)`` (``"Color.RED"``) beside the journal's ``1``."""
    from jitwatch.export.otlp import record_attributes
    from jitwatch.store.journal import sanitized

    attrs = {"color": Color.RED, "dtype": _Dtype.FP16, "id": uuid.UUID(int=7), "t": 1e-05, "n": [1, (2, 3)]}
    _, back = stored(tmp_path, attrs)
    ev = make_event(EventKind.COMPILE, T0, kernel="k", key="[16]", duration_s=0.01, attrs=attrs)
    assert sanitized(ev).attrs == back
    assert json.loads(record_attributes(sanitized(ev))["jitwatch.attrs"]) == back
    assert ev.attrs["color"] is Color.RED  # the caller's event is left as it was
