"""Child process: the real sidecar, served the way ``jitwatch serve`` serves it
(:func:`jitwatch.sidecar.run`: uvicorn with jitwatch's guarded h11 protocol, connection cap,
host check) on 127.0.0.1. ``JITWATCH_*`` variables in the environment apply (timeouts, limits).

Usage: ``python _sidecar.py <journal_dir> <port> [token]``
"""

from __future__ import annotations

import sys
from pathlib import Path

from jitwatch.sidecar import run


def main() -> None:
    directory, port = Path(sys.argv[1]), int(sys.argv[2])
    token = sys.argv[3] if len(sys.argv) > 3 else None
    run(host="127.0.0.1", port=port, journal_dir=directory, token=token, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
