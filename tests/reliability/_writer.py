"""Child worker process for the reliability tests: writes events through ``JournalWriter``.

Usage: ``python _writer.py <journal_dir> <worker> <count> [chunk] [pause_s]``

Submits ``count`` compile events (``attrs.uid = "<worker>-<i>"``, rank ``<worker>``, durations
from :data:`DURATIONS`, exact binary fractions so sums are exact), plus one ``worker_start``.
After every ``chunk`` events it flushes and prints ``committed <n>`` (the first ``n`` events are
in the journal: ``flush`` returns only once the writer thread committed them). Finally prints
``done <written> <dropped>``. The queue is large enough that nothing is dropped for lack of room.
``pause_s`` (default 0) sleeps after each chunk, to write at a steady rate during a load test.

``chunk`` 0: *steady* mode: submit one event every ``pause_s`` seconds (``attrs.submit_ts``, Unix
seconds), never flush, until killed — what a worker looks like to a ``kill -9`` between writer
wake-ups. Prints ``started`` after the first event.
"""

from __future__ import annotations

import sys
import time

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.writer import JournalWriter

DURATIONS = (2.0**-10, 2.0**-6, 0.5, 2.0)
KERNELS = 50


def main() -> None:
    directory, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chunk = int(sys.argv[4]) if len(sys.argv) > 4 else count
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    writer = JournalWriter(directory, queue_size=count + 16, rank=worker)
    writer.submit(Event.now(EventKind.WORKER_START, rank=worker, attrs={"mode": "warn"}))
    if chunk == 0:
        for i in range(count):
            now = time.time()
            writer.submit(Event(kind=EventKind.COMPILE, ts=now, rank=worker, kernel="k", attrs={"submit_ts": now}))
            if i == 0:
                print("started", flush=True)
            time.sleep(pause)
        return
    for i in range(count):
        writer.submit(
            Event.now(
                EventKind.COMPILE,
                rank=worker,
                phase=Phase.SERVING if i % 2 else Phase.WARMUP,
                kernel=f"kernel_{i % KERNELS}",
                key=f"key-{i}",
                duration_s=DURATIONS[i % len(DURATIONS)],
                cache_hit=i % 3 == 0,
                attrs={"uid": f"{worker}-{i}"},
            )
        )
        if (i + 1) % chunk == 0:
            if not writer.flush(120):
                print("flush-timeout", flush=True)
                sys.exit(3)
            print(f"committed {i + 1}", flush=True)
            if pause:
                time.sleep(pause)
    writer.close(120)
    print(f"done {writer.written_total} {writer.dropped_total}", flush=True)
    if writer.dropped_total:
        sys.exit(2)


if __name__ == "__main__":
    main()
