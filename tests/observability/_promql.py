"""PromQL scanning shared by the observability tests: aggregations and the ``backend`` label.

Every compile carries a ``backend`` label (:mod:`jitwatch.views.contract`). An aggregation that
groups a backend-labelled series without ``backend`` silently merges Triton, torch.compile and DSL
compiles; the checks here find such aggregations in the Prometheus rules and the dashboard's
queries. A small scanner, like ``dashboards/grafana/generate.py``'s ``promql_refs``: enough for the
expressions in this repository (``op by (...) (body)``, ``op (body) by (...)``, ``op (body)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jitwatch.views.contract import METRICS


def _series(spec_type: str, name: str) -> set[str]:
    if spec_type == "histogram":
        return {name + "_bucket", name + "_sum", name + "_count"}
    return {name}


BACKEND_SERIES: frozenset[str] = frozenset(s for m in METRICS if "backend" in m.labels for s in _series(m.type, m.name))
"""Exposed series names whose family has a ``backend`` label."""

PER_KERNEL_SERIES: frozenset[str] = frozenset(
    s for m in METRICS if {"backend", "kernel"} <= set(m.labels) for s in _series(m.type, m.name)
)
"""Exposed series names of the per-kernel families (``backend`` and ``kernel`` labels)."""

AGGREGATORS = (
    "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values",
)  # fmt: skip
_AGG = re.compile(r"\b(" + "|".join(AGGREGATORS) + r")\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(")
_TRAILING = re.compile(r"\s*(by|without)\s*\(([^)]*)\)")
_NAME = re.compile(r"(?<![\w:$])([a-zA-Z_:][a-zA-Z0-9_:]*)")


@dataclass(frozen=True)
class Aggregation:
    op: str
    mode: str
    """``by``, ``without``, or ``""`` (no grouping: every label is dropped)."""
    labels: frozenset[str]
    body: str

    def keeps(self, label: str) -> bool:
        if self.mode == "by":
            return label in self.labels
        if self.mode == "without":
            return label not in self.labels
        return False

    def __str__(self) -> str:
        grouping = f" {self.mode} ({', '.join(sorted(self.labels))})" if self.mode else ""
        return f"{self.op}{grouping} ({self.body.strip()})"


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def aggregations(expr: str) -> list[Aggregation]:
    """Every aggregation of ``expr`` (nested ones included), with its grouping and its operand."""
    text = _strip_strings(expr)
    out: list[Aggregation] = []
    for m in _AGG.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        assert depth == 0, f"unbalanced parentheses in {expr}"
        body = text[m.end() : i - 1]
        mode, labels = m.group(2) or "", m.group(3) or ""
        trailing = _TRAILING.match(text, i)
        if not mode and trailing:
            mode, labels = trailing.group(1), trailing.group(2)
        out.append(Aggregation(m.group(1), mode, frozenset(p.strip() for p in labels.split(",") if p.strip()), body))
    return out


def series_names(expr: str) -> set[str]:
    """Identifiers of ``expr`` that look like series names (metrics and recording rules)."""
    return {n for n in _NAME.findall(_strip_strings(expr)) if n.startswith("jitwatch_")}


def selectors(expr: str) -> list[tuple[str, str]]:
    """``(series name, matchers text)`` of every ``name{...}`` selector in ``expr``."""
    return re.findall(r"(jitwatch_[a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr)


# ---------------------------------------------------------------------------- rules
def rule_backend_problems(
    rules: list[dict[str, Any]], cross_backend: set[tuple[str, frozenset[str]]] | None = None
) -> tuple[list[str], set[str]]:
    """Aggregations in ``rules`` (in file order) that drop ``backend`` from a backend-labelled series.

    A recording rule built from backend-labelled series must keep ``backend`` in every aggregation
    (it then counts as backend-labelled itself). An alert may drop it only in an aggregation listed
    in ``cross_backend`` as ``(alert, grouping labels)``: a per-rank total over every backend that
    the alert joins back onto backend-labelled series. Returns ``(problems, names of the
    backend-labelled series and rules)``.
    """
    allowed = cross_backend or set()
    backend_series = set(BACKEND_SERIES)
    problems: list[str] = []
    for rule in rules:
        name = rule.get("alert") or rule["record"]
        expr = str(rule["expr"])
        for agg in aggregations(expr):
            if not series_names(agg.body) & backend_series or agg.keeps("backend"):
                continue
            if "alert" in rule and (name, agg.labels) in allowed:
                continue
            problems.append(f"{name}: {agg} drops the backend label")
        if series_names(expr) & backend_series:
            backend_series.add(name)
    return problems, backend_series


# ---------------------------------------------------------------------------- dashboard
def panel_backend_problems(targets: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Problems with ``backend`` in dashboard targets ``(panel title, target)``.

    Every selector of a backend-labelled family filters on ``backend=~"$backend"``; every
    aggregation of a per-kernel family keeps ``backend``; a legend that names the kernel names the
    backend too.
    """
    problems: list[str] = []
    for title, target in targets:
        expr = target.get("expr", "")
        for name, matchers in selectors(expr):
            if name in BACKEND_SERIES and 'backend=~"$backend"' not in matchers:
                problems.append(f'{title}: {name} without backend=~"$backend" in: {expr}')
        for agg in aggregations(expr):
            if series_names(agg.body) & PER_KERNEL_SERIES and not agg.keeps("backend"):
                problems.append(f"{title}: {agg} drops the backend label")
        legend = target.get("legendFormat") or ""
        if "{{kernel}}" in legend and "{{backend}}" not in legend:
            problems.append(f"{title}: legend {legend!r} names the kernel but not the backend")
    return problems
