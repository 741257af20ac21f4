"""Tables for a terminal of any width (``jitwatch status``, ``coverage``, the demo's summary):
:class:`Grid` sizes a rich table's columns for the console, :func:`cell` makes journal text a
literal cell. Below every layer that prints (``jitwatch.cli``, ``jitwatch.demo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jitwatch.text import plain

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text


WHOLE_MAX = 13
"""The widest cell (characters) a ``jitwatch coverage`` backend column keeps whole: ``torch_compile``,
the longest built-in backend's name. A longer name (a third-party backend's) folds over several
lines at this width: a wider column cropped the table's last column at 80 columns."""


def cell(text: object) -> Text:
    """A table cell holding ``text`` literally: no rich markup (``[num_warps]``, ``[/]`` stay
    text), no terminal control characters (:func:`plain`)."""
    from rich.text import Text

    return Text(plain(text))


BREAK_AFTER = "._:,/-<>([)]"
"""Characters after which a name or token too wide for its column is broken (an identifier's own
boundaries: ``make_sampler.<locals>.`` / ``sample_probs``, ``zero_kv_blocks_`` / ``kernel``); a
segment wider than the column is folded."""

_BREAK_GROUPS = (".:,/)]", "_-<>([")

ROOMY = 24
"""Flexible columns (names, text) share the width up to this many characters each, then names get
their whole width, then text what is left; unless every name can be whole while each text column
keeps :data:`TEXT_FLOOR` characters: then names first (else names as wide as the widest of their
cells that leaves the text that much)."""

TEXT_FLOOR = 12
"""See :data:`ROOMY`: a text column's width before names are whole (a time's date, ``2026-12-03``)."""


def clip(text: str, limit: int) -> str:
    """``text`` whole up to ``limit`` characters, else its first ``limit - 1`` and ``…`` (a cut is
    always shown)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _breaks(line: str, width: int) -> list[int]:
    """Offsets at which to break ``line`` into pieces of at most ``width`` characters: at the last
    space that fits, else after the last :data:`BREAK_AFTER` character, else at ``width``."""
    offsets: list[int] = []
    start = 0
    while len(line) - start > width:
        window = line[start : start + width + 1]
        cut = window.rfind(" ")
        for group in _BREAK_GROUPS:  # after a "." before after a "_", unless that leaves a short line
            if cut > 0:
                break
            cut = max(window[:-1].rfind(c) for c in group) + 1
            cut = cut if cut > width // 3 else 0
        if cut <= 0:
            cut = width
        offsets.append(start + cut)
        start += cut
        while start < len(line) and line[start] == " ":
            start += 1
            offsets[-1] = start
    return offsets


def _wrapped(text: Text, width: int) -> Text:
    """``text`` (styles kept) with a newline at each of :func:`_breaks`'s offsets (spaces at a break
    dropped), so rich prints it as is in a column ``width`` wide."""
    from rich.text import Text

    offsets = _breaks(text.plain, width)
    if not offsets:
        return text
    pieces = text.divide(offsets)
    for piece in pieces:
        piece.rstrip()
    return Text("\n").join(pieces)


class Grid:
    """A rich table for a terminal of any width. Column names carry a prefix:

    - ``"*name"``: secondary, left out when ``narrow`` (:meth:`add` drops its cell);
    - ``"~name"``: left out when ``tight`` (a narrower terminal still);
    - ``"=name"``: a backend's name, as wide as its widest cell up to :data:`WHOLE_MAX` characters
      (it tells rows of one kernel name apart); a longer one is broken;
    - ``"#name"``: a number, exactly as wide as its widest cell or its header's longest word (the
      header wraps over lines instead: ``warmup`` / ``compiles``);
    - ``"@name"``: a kernel's or function's name, whole when the width allows;
    - no prefix: text, wrapped at spaces.

    :meth:`fit` sets the widths for a console ``width`` characters wide: numbers and backends take
    what they need (a number's header on one line when all of them fit so with each text column at
    its :data:`TEXT_FLOOR`); the names and text share
    the rest (each up to :data:`ROOMY`, then names whole,
    then text). A name or token wider than its column is broken after ``.``, ``_``, ``:`` and the
    like (:data:`BREAK_AFTER`), never cut; a value cut before it reaches the table ends with ``…``
    (:func:`clip`). :attr:`left_out` says whether a column was left out of a table with rows."""

    def __init__(self, title: str, columns: list[str], narrow: bool, tight: bool = False) -> None:
        self.title = title
        self.keep = [not ((col.startswith("*") and narrow) or (col.startswith("~") and tight)) for col in columns]
        self.kinds = []
        for col in columns:
            body = col.lstrip("*~")
            self.kinds.append(body[0] if body[:1] in ("=", "#", "@") else "")
        self.names = [col.lstrip("*~=#@") for col in columns]
        self.narrow_out = any(c.startswith("*") for c in columns) and narrow
        self.tight_out = any(c.startswith("~") for c in columns) and tight
        self.rows: list[list[Text]] = []

    @property
    def left_out(self) -> bool:
        """Whether this table has rows and left a column out (narrow or tight)."""
        return bool(self.rows) and (self.narrow_out or self.tight_out)

    def add(self, *row: Any) -> None:
        from rich.text import Text

        self.rows.append(
            [
                value if isinstance(value, Text) else Text(str(value))
                for value, keep in zip(row, self.keep, strict=True)
                if keep
            ]
        )

    def fit(self, width: int) -> Table:
        """The table, its columns sized for a console ``width`` characters wide (see the class)."""
        from rich.table import Table
        from rich.text import Text

        kept = [(name, kind) for name, kind, keep in zip(self.names, self.kinds, self.keep, strict=True) if keep]
        widest = [
            max([len(line) for row in self.rows for line in row[i].plain.split("\n")] or [0]) for i in range(len(kept))
        ]
        word = [max(len(w) for w in (name.split() or [""])) for name, _ in kept]
        cells_wide = [{len(row[i].plain) for row in self.rows} for i in range(len(kept))]
        want = [max(word[i], widest[i]) for i in range(len(kept))]
        fixed: dict[int, int] = {}
        for i, (_, kind) in enumerate(kept):
            if kind == "#":
                fixed[i] = want[i]
            elif kind == "=":
                fixed[i] = max(word[i], min(widest[i], WHOLE_MAX))
        flex = [i for i in range(len(kept)) if i not in fixed]
        room = width - (3 * len(kept) + 1) - sum(fixed.values())
        widths = dict(fixed)
        for i in flex:
            widths[i] = min(want[i], max(word[i], 4))
        spare = room - sum(widths[i] for i in flex)
        for head in (4, 1):  # too narrow for the headers' words: values before headers (a header
            # folds mid-word; rich cut the values instead: coverage's keys "1/3" read "1/" at 50 columns)
            if spare >= 0:
                break
            for i, (_, kind) in enumerate(kept):
                if kind == "#":
                    fixed[i] = max(widest[i], min(word[i], head), 1)
                elif kind == "=":
                    fixed[i] = max(min(widest[i], WHOLE_MAX), min(word[i], head), 1)
            room = width - (3 * len(kept) + 1) - sum(fixed.values())
            widths = dict(fixed)
            for i in flex:
                widths[i] = min(want[i], head)
            spare = room - sum(widths[i] for i in flex)

        def fill(columns: list[int], cap: dict[int, int]) -> None:
            nonlocal spare
            while spare > 0:
                open_ = [i for i in columns if widths[i] < cap[i]]
                if not open_:
                    return
                i = min(open_, key=lambda c: widths[c])
                widths[i] += 1
                spare -= 1

        names = [i for i in flex if kept[i][1] == "@"]
        texts = [i for i in flex if kept[i][1] != "@"]
        floor = {i: min(want[i], TEXT_FLOOR) for i in texts}
        if sum(want[i] - widths[i] for i in names) + sum(floor[i] - widths[i] for i in texts) <= spare:
            fill(names, {i: want[i] for i in names})  # every name whole, the text at its floor or wider
        else:  # names as wide as the widest of their cells that fits beside the text's floors
            for i in names:
                spare_names = spare - sum(floor[t] - widths[t] for t in texts)
                fits = [n for n in cells_wide[i] if widths[i] < n <= widths[i] + spare_names]
                fill([i], {i: max(fits, default=widths[i])})
            fill(flex, {i: min(want[i], ROOMY) for i in flex})
            fill(names, {i: want[i] for i in names})
        numbers = [i for i, (_, kind) in enumerate(kept) if kind == "#"]
        widen = sum(max(len(kept[i][0]) - widths[i], 0) for i in numbers)
        below_floor = sum(max(min(want[i], TEXT_FLOOR) - widths[i], 0) for i in texts)
        if widen <= spare - below_floor:  # room left once the names are whole: the numbers' headers on one line
            for i in numbers:
                widths[i] = max(widths[i], len(kept[i][0]))
            spare -= widen
        fill(flex, {i: want[i] for i in flex})
        table = Table(title=self.title)
        for i, (name, _) in enumerate(kept):
            header = _wrapped(Text(name), max(widths[i], 1))  # over lines at its spaces: "warmup" / "compiles"
            table.add_column(header, width=max(widths[i], 1), no_wrap=True, overflow="fold")
        for row in self.rows:
            table.add_row(*(_wrapped(value, max(widths[i], 1)) for i, value in enumerate(row)))
        return table
