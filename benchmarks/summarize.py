"""Print a short table of benchmark results from a folder of result JSON files.

``python benchmarks/summarize.py DIR [--pytest-log FILE]`` reads ``recompiles.json``,
``hot_path.json``, ``compile_cost.json``, ``first_request.json``, ``sidecar.json`` and
``memory.json`` (whichever exist) and prints one line per figure with its baseline. Used as the
last step of ``scripts/gpu-tier.sh``; the full numbers stay in the JSON files.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any


def _load(d: Path, name: str) -> dict[str, Any] | None:
    p = d / f"{name}.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError:
        return None


def lines(d: Path, pytest_log: Path | None = None) -> list[str]:
    out: list[str] = []
    machine = None
    if pytest_log is not None and pytest_log.exists():
        text = pytest_log.read_text(errors="replace")
        m = re.findall(r"=+ (.*(?:passed|failed|error|skipped).*) in [\d.]+s", text)
        out.append(f"GPU tier pytest: {m[-1] if m else 'no summary line (see log)'}")
    rc = _load(d, "recompiles")
    if rc:
        machine = rc["machine"]
        v = rc["variants"]
        out.append(
            f"recompiles over {len(rc['sizes'])} sizes ({rc['device']}): specialized "
            f"{v['specialized']['compiles_journaled']} vs do_not_specialize "
            f"{v['do_not_specialize']['compiles_journaled']}"
            f" (Triton keys {v['specialized']['triton_cache_keys']}/{v['do_not_specialize']['triton_cache_keys']})"
        )
    hp = _load(d, "hot_path")
    if hp:
        machine = machine or hp["machine"]
        for name, e in hp["paths"].items():
            n = statistics.median(e["none"]["rep_medians_us"])
            m = statistics.median(e["monitor"]["rep_medians_us"])
            spread = max(e["none"]["rep_median_spread_us"], e["monitor"]["rep_median_spread_us"])
            out.append(
                f"hot path {name} ({hp['device']}): {m:.2f} µs with monitor vs {n:.2f} µs without "
                f"(Δ {m - n:+.2f}, rep spread {spread:.2f}) {'OK' if e['within_spread'] else 'BEYOND SPREAD'}"
            )
    cc = _load(d, "compile_cost")
    if cc:
        machine = machine or cc["machine"]
        for label, s in (
            ("cold", cc["single"]["cold"]),
            ("disk-hit", cc["single"]["disk_hit"]),
            (f"{cc['multi']['procs']}proc cold", cc["multi"]),
        ):
            frac = s["hooks_plus_write_fraction_of_compile_pct"]["median"]
            out.append(
                f"compile cost {label} ({cc['device']}): hooks {s['hooks_us']['median']:.0f} µs + write "
                f"{s['journal_write_wall_us_per_event']['median']:.0f} µs per compile of "
                f"{s['compile_ms']['median']:.2f} ms = {frac:.2f}% {'(<1% met)' if frac < 1 else '(>=1% MISSED)'}"
            )
        for label, b in cc.get("burst", {}).items():
            out.append(
                f"journal burst {label}: {b['write_wall_us_per_txn']['median']:.0f} µs/txn median, "
                f"p99 {b['write_wall_us_per_txn']['p99']:.0f} µs, {b['events_per_s_all_procs']:.0f} events/s"
            )
    fr = _load(d, "first_request")
    if fr and "scenarios" in fr:
        machine = machine or fr["machine"]
        for label, s in fr["scenarios"].items():
            tgt = s["target_met"]
            out.append(
                f"first request {label}: {s['first_request_ms']['median']:.3f} ms vs steady "
                f"{s['steady_state_us']['median']:.1f} µs = {s['ratio_first_to_steady']['median']:.2f}x "
                f"(max {s['ratio_first_to_steady']['max']:.2f}x); after 20 ms idle "
                f"{s['request_after_20ms_idle_us']['median']:.0f} µs"
                + ("" if tgt is None else (" target ≤1.5x met" if tgt else " target ≤1.5x MISSED"))
            )
    elif fr:
        out.append(f"first request: {fr.get('skipped')}")
    sc = _load(d, "sidecar")
    if sc:
        machine = machine or sc["machine"]
        for r in sc["runs"]:
            out.append(
                f"sidecar {r['server']:<7} {r['path']:<23} c={r['concurrency']}: "
                f"p50 {r['latency_ms']['median']:.2f} ms "
                f"p99 {r['latency_ms']['p99']:.2f} ms, {r['req_per_s']:.0f} req/s, {r['response_bytes']} B"
            )
    mem = _load(d, "memory")
    if mem:
        machine = machine or mem["machine"]
        for phase, r in mem["worker"].items():
            out.append(
                f"memory worker ({phase}): {r['rss_growth_mib']:+.1f} MiB RSS after {mem['events']} events / "
                f"{mem['kernels']} kernels (warned pairs kept: {r['warned_pairs']})"
            )
        side = mem["sidecar"]
        out.append(
            f"memory sidecar: {side['rss_idle_mib']:.1f} MiB idle, {side['rss_final_mib']:.1f} MiB after requests"
        )
    if machine:
        out.insert(
            0,
            f"machine: {machine.get('gpu') or machine.get('cpu')} | triton {machine.get('triton')} torch "
            f"{machine.get('torch')} python {machine.get('python')} | {machine.get('date_utc')} UTC",
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--pytest-log", type=Path)
    args = ap.parse_args()
    print("\n".join(lines(args.dir, args.pytest_log)))


if __name__ == "__main__":
    main()
