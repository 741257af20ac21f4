"""Subprocess body for the fleet tests: one worker process with jitwatch and real compile-only
Triton compiles; Triton's cache is whatever the environment configures (a local
``TRITON_CACHE_DIR``, or ``TRITON_CACHE_MANAGER`` = Triton's ``RemoteCacheManager`` with a Redis
backend).

``python tests/fleet/fleet_worker.py record JOURNAL_DIR`` — empty warmup, then the slot-mapping
field case's serving calls (four new keys compile in serving).
``python tests/fleet/fleet_worker.py replay JOURNAL_DIR LOCATION`` — replays the manifest at
LOCATION (a file or redis://…/NAME) in warmup, nothing else.

Prints one ``RESULT {json}`` line: the compile events (kernel, phase, cache hit) and, with the
jitwatch Redis backend, its counters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "triton"))


def main(argv: list[str]) -> int:
    mode, journal_dir = argv[0], argv[1]

    from jitwatch.backends.triton.compile_only import activate

    activate()
    import kernels_fieldcases as kf

    import jitwatch
    from jitwatch.core.events import EventKind
    from jitwatch.testing import read_events

    mon = jitwatch.install(mode="warn", journal_dir=journal_dir, tracer_provider=False)
    report = None
    if mode == "record":
        with mon.warmup():
            pass
        for call in kf.CASES["slot_mapping"]["serving"]:
            with mon.request():
                call()
    else:
        from jitwatch.fleet.stores import read_one
        from jitwatch.warmup.replay import replay

        with mon.warmup():
            report = replay(read_one(argv[2]), allow=["kernels_fieldcases"], parallel="serial")
    mon.flush()
    compiles = [
        {"kernel": e.kernel, "phase": e.phase.value, "cache_hit": e.cache_hit}
        for e in read_events(journal_dir, EventKind.COMPILE)
    ]
    remote = sys.modules.get("jitwatch.backends.triton.remote_cache")
    out = {
        "compiles": compiles,
        "replay": None if report is None else report.as_dict(),
        "remote_stats": None if remote is None else dict(remote.stats),  # type: ignore[attr-defined]
    }
    print("RESULT " + json.dumps(out))
    jitwatch.uninstall()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
