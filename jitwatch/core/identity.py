"""Who a worker process is: its ranks (global, TP, PP, DP, local) and free-form labels."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from jitwatch.config import Settings


@dataclass
class WorkerIdentity:
    """Who this process is: global ``rank`` plus optional TP/PP/DP ranks and free-form labels.

    ``labels`` (e.g. ``vllm_model``) go on the ``worker_start`` event and every compile event; keep
    them few and bounded (they are not metric labels). Fixed once handed to a monitor: the
    monitor reads :meth:`attrs` once for its compile events (replace ``Monitor.identity`` to
    change it, do not change one in place).
    """

    rank: int
    tp_rank: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    local_rank: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    @classmethod
    def from_settings(cls, settings: Settings, *, rank: int | None = None) -> WorkerIdentity:
        """Identity from :class:`~jitwatch.config.Settings`: ``rank`` as given, else
        :meth:`Settings.rank` (``JITWATCH_RANK`` offset + ``RANK``/``LOCAL_RANK``); TP/PP/DP ranks
        from ``JITWATCH_TP_RANK``/``JITWATCH_PP_RANK``/``JITWATCH_DP_RANK``; ``local_rank`` from
        ``LOCAL_RANK``. Raises :class:`jitwatch.errors.ConfigError` for a rank out of range."""
        return cls(
            rank=settings.rank() if rank is None else rank,
            tp_rank=settings.tp_rank,
            pp_rank=settings.pp_rank,
            dp_rank=settings.dp_rank,
            local_rank=settings.local_rank,
        )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, rank: int | None = None) -> WorkerIdentity:
        """:meth:`from_settings` of :meth:`Settings.from_env` (``env`` default ``os.environ``)."""
        return cls.from_settings(Settings.from_env(env), rank=rank)

    def attrs(self) -> dict[str, Any]:
        """TP/PP/DP/local ranks that are known, plus the labels (stored on every event)."""
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("tp_rank", self.tp_rank),
                ("pp_rank", self.pp_rank),
                ("dp_rank", self.dp_rank),
                ("local_rank", self.local_rank),
            )
            if v is not None
        }
        out.update(self.labels)
        return out
