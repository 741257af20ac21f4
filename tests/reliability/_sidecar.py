"""Child process: the real sidecar app under uvicorn on 127.0.0.1.

Usage: ``python _sidecar.py <journal_dir> <port> [token]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

from jitwatch.sidecar import create_app


def main() -> None:
    directory, port = Path(sys.argv[1]), int(sys.argv[2])
    token = sys.argv[3] if len(sys.argv) > 3 else None
    app = create_app(journal_dir=directory, token=token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
