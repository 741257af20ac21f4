"""Subprocess body for the replay tests: one worker start with warmup, optional replay, serving.

``python tests/warmup/replay_worker.py CASE JOURNAL_DIR [MANIFEST [PARALLEL]]`` runs the case's warmup calls
(and replays MANIFEST inside the warmup phase), activates, runs the serving calls and prints one
JSON line: serving/warmup compile counts and the replay report. The compile-only driver is active,
so this is a real Triton compile pipeline with nothing launched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "triton"))


def main(argv: list[str]) -> int:
    case, journal_dir = argv[0], argv[1]
    manifest = argv[2] if len(argv) > 2 and argv[2] != "-" else None
    parallel = argv[3] if len(argv) > 3 else "serial"

    from jitwatch.backends.triton.compile_only import activate

    activate()
    import kernels_fieldcases as kf

    import jitwatch
    from jitwatch.core.events import Phase
    from jitwatch.warmup.replay import replay

    spec = kf.CASES[case]
    mon = jitwatch.install(mode="warn", journal_dir=journal_dir, tracer_provider=False)
    report = None
    with mon.warmup():
        for call in spec["warmup"]:
            call()
        if manifest:
            report = replay(manifest, allow=["kernels_fieldcases"], parallel=parallel)  # type: ignore[arg-type]
    for call in spec["serving"]:
        with mon.request():
            call()
    mon.flush()
    out = {
        "serving_compiles": mon.compiles_by_phase[Phase.SERVING],
        "warmup_compiles": mon.compiles_by_phase[Phase.WARMUP],
        "replay": report.as_dict() if report is not None else None,
    }
    print("RESULT " + json.dumps(out))
    jitwatch.uninstall()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
