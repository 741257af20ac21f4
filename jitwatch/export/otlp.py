"""Journal events as OpenTelemetry log records, sent over OTLP/HTTP through the OTel Python SDK.

Mechanism (OpenTelemetry Python SDK >= 1.38, where ``Logger.emit`` takes the record's fields as
keyword arguments, ``event_name`` included): a private ``LoggerProvider`` (the global one is the
host's) with a ``BatchLogRecordProcessor`` and the SDK's ``OTLPLogExporter``
(``opentelemetry-exporter-otlp-proto-http``), which reads ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``…_HEADERS``, ``…_TIMEOUT`` and ``…_COMPRESSION`` itself.

* **Where it runs.** :meth:`OtlpEventExporter.export` is called by the journal writer
  (:class:`jitwatch.store.writer.JournalWriter`) on its thread with each batch of events; it only
  builds records and hands them to the SDK's queue. The SDK's processor thread does the HTTP. No
  compiling thread ever touches OpenTelemetry.
* **Bounded, dropped and counted.** At most ``max_queue`` records wait for delivery; beyond that
  new ones are dropped. A batch the collector refuses or that times out (collector down) is dropped
  too. Both are counted in :attr:`OtlpEventExporter.dropped_total`, which the writer journals
  (``jitwatch_export_dropped_events_total{exporter="otlp"}``). The SDK's own queue is sized above
  ``max_queue`` so it never drops silently.
* **What a record holds.** ``event_name`` ``jitwatch.<kind>`` (``jitwatch.compile``, …), the event's
  time, severity ``WARN`` for a serving-phase compile, a hook error or a drop (else ``INFO``), a
  one-line body, and attributes ``jitwatch.event.kind``, ``jitwatch.phase``, ``jitwatch.backend``,
  ``jitwatch.kernel``, ``jitwatch.key``, ``jitwatch.cache_hit``, ``jitwatch.duration_seconds``,
  ``jitwatch.rank``, ``jitwatch.request_id`` and ``jitwatch.attrs`` (the event's ``attrs`` as JSON,
  at most :data:`MAX_ATTRS_BYTES`, without ``specialization_data``, which manifests carry). Events
  are redacted by the journal's own sanitizer first (home paths, user names).
* **Resource.** ``service.name`` (``OTEL_SERVICE_NAME``, else ``jitwatch``; ``OTEL_RESOURCE_ATTRIBUTES``
  too, via ``Resource.create``), ``host.name``, ``process.pid``, ``jitwatch.rank`` and the TP/PP/DP
  ranks, ``jitwatch.backends`` and ``jitwatch.version``: what the worker passes.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from jitwatch._version import __version__
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import sanitized
from jitwatch.text import logger

log = logger(__name__)

DEFAULT_MAX_QUEUE = 10_000
"""Records waiting for delivery before new ones are dropped (and counted)."""
MAX_ATTRS_BYTES = 8192
"""``jitwatch.attrs`` longer than this is cut (and ``jitwatch.attrs_truncated`` set)."""
SCHEDULE_DELAY_MS = 1000
EXIT_FLUSH_S = 2.0
"""At interpreter exit without ``jitwatch.uninstall()``, wait at most this long for queued records."""
EXPORT_BATCH = 512


def _summary(ev: Event) -> str:
    parts = [ev.kind.value]
    if ev.backend:
        parts.append(ev.backend)
    if ev.kernel:
        parts.append(ev.kernel)
    parts.append(f"phase={ev.phase.value}")
    if ev.duration_s is not None:
        parts.append(f"{ev.duration_s:.3f}s")
    if ev.cache_hit:
        parts.append("cache-hit")
    return " ".join(parts)


def record_attributes(ev: Event) -> dict[str, Any]:
    """The OTel attributes of one (already sanitized) event; see the module docstring."""
    out: dict[str, Any] = {
        "jitwatch.event.kind": ev.kind.value,
        "jitwatch.phase": ev.phase.value,
        "jitwatch.rank": ev.rank,
    }
    if ev.backend:
        out["jitwatch.backend"] = ev.backend
    if ev.kernel is not None:
        out["jitwatch.kernel"] = ev.kernel
    if ev.key is not None:
        out["jitwatch.key"] = ev.key
    if ev.cache_hit is not None:
        out["jitwatch.cache_hit"] = ev.cache_hit
    if ev.duration_s is not None:
        out["jitwatch.duration_seconds"] = float(ev.duration_s)
    if ev.start_ts is not None:
        out["jitwatch.start_time_unix"] = float(ev.start_ts)
    request_id = ev.attrs.get("request_id")
    if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
        out["jitwatch.request_id"] = str(request_id)
    attrs = {k: v for k, v in ev.attrs.items() if k != "specialization_data"}
    if attrs:
        text = json.dumps(attrs, ensure_ascii=False, default=str, allow_nan=True)
        if len(text.encode("utf-8")) > MAX_ATTRS_BYTES:
            text = text.encode("utf-8")[:MAX_ATTRS_BYTES].decode("utf-8", "ignore")
            out["jitwatch.attrs_truncated"] = True
        out["jitwatch.attrs"] = text
    return out


def _severity(ev: Event) -> tuple[Any, str]:
    from opentelemetry._logs import SeverityNumber

    serving_compile = ev.phase is Phase.SERVING and ev.kind in (EventKind.COMPILE, EventKind.AUTOTUNE)
    if serving_compile or ev.kind in (EventKind.HOOK_ERROR, EventKind.DROPPED):
        return SeverityNumber.WARN, "WARN"
    return SeverityNumber.INFO, "INFO"


class _CountingExporter:
    """Wraps the SDK's log exporter (a ``LogRecordExporter``): counts delivered and failed records."""

    def __init__(self, inner: Any, owner: OtlpEventExporter) -> None:
        self._inner = inner
        self._owner = owner

    def export(self, batch: Sequence[Any]) -> Any:
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        try:
            result = self._inner.export(batch)
        except Exception as exc:  # noqa: BLE001 - the SDK thread must keep going
            log.debug("jitwatch: OTLP log export raised: %s", exc)
            result = LogRecordExportResult.FAILURE
        self._owner._delivered(len(batch), result == LogRecordExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


class OtlpEventExporter:
    """Exports journal events as OTLP log records (see the module docstring).

    Args:
        resource_attributes: added to ``Resource.create`` (host, pid, ranks, backends).
        log_exporter: an SDK ``LogRecordExporter`` (default: ``OTLPLogExporter()``, configured by
            the ``OTEL_EXPORTER_OTLP_*`` variables); tests pass one with an explicit endpoint.
        max_queue: records waiting for delivery before new ones are dropped.
        schedule_delay_ms: the batch processor's export interval, milliseconds.
        env: for ``OTEL_SERVICE_NAME`` (default ``os.environ``).
    """

    name = "otlp"

    def __init__(
        self,
        resource_attributes: Mapping[str, Any] | None = None,
        *,
        log_exporter: Any | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        schedule_delay_ms: int = SCHEDULE_DELAY_MS,
        env: Mapping[str, str] | None = None,
    ) -> None:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource

        env = os.environ if env is None else env
        if log_exporter is None:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

            log_exporter = OTLPLogExporter()
        attrs: dict[str, Any] = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "jitwatch"}
        attrs.update(resource_attributes or {})
        self.max_queue = max(1, int(max_queue))
        self._lock = threading.Lock()
        self._waiting = 0
        self.emitted_total = 0
        self.exported_total = 0
        self.failed_total = 0
        self.overflow_total = 0
        self._warned = False
        # Not the SDK's atexit shutdown: with the collector down it would hold the host's exit for
        # the export timeout. The journal writer shuts the exporter down when it closes
        # (jitwatch.uninstall); at exit without that, _flush_at_exit waits at most EXIT_FLUSH_S.
        self._provider = LoggerProvider(resource=Resource.create(attrs), shutdown_on_exit=False)
        self._processor = BatchLogRecordProcessor(
            _CountingExporter(log_exporter, self),  # type: ignore[arg-type]
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=EXPORT_BATCH,
            max_queue_size=self.max_queue + EXPORT_BATCH,
        )
        self._provider.add_log_record_processor(self._processor)
        self._logger = self._provider.get_logger("jitwatch", __version__)
        atexit.register(self._flush_at_exit)

    def _flush_at_exit(self) -> None:
        """``atexit`` (after the monitor's own flush, registered later): send what is queued, in a
        daemon thread waited for at most :data:`EXIT_FLUSH_S` seconds."""
        t = threading.Thread(target=self._provider.force_flush, name="jitwatch-otlp-exit-flush", daemon=True)
        t.start()
        t.join(EXIT_FLUSH_S)

    @property
    def dropped_total(self) -> int:
        """Records not delivered: refused or timed out at the collector, or over ``max_queue``."""
        with self._lock:
            return self.failed_total + self.overflow_total

    def _delivered(self, n: int, ok: bool) -> None:
        with self._lock:
            self._waiting -= n
            if ok:
                self.exported_total += n
                self._warned = False
                return
            self.failed_total += n
            warn = not self._warned
            self._warned = True
        if warn:
            log.warning("jitwatch: the OTLP collector did not take %d events; dropping (and counting) until it does", n)

    def export(self, events: Sequence[Event]) -> None:
        """Queue ``events`` as log records (writer thread; never blocks on the network)."""
        for ev in events:
            with self._lock:
                if self._waiting >= self.max_queue:
                    self.overflow_total += 1
                    continue
                self._waiting += 1
                self.emitted_total += 1
            clean = sanitized(ev)
            number, text = _severity(clean)
            self._logger.emit(
                timestamp=int(clean.ts * 1e9),
                observed_timestamp=time.time_ns(),
                severity_number=number,
                severity_text=text,
                body=_summary(clean),
                attributes=record_attributes(clean),
                event_name=f"jitwatch.{clean.kind.value}",
            )

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Deliver what is queued (bounded); ``False`` on timeout."""
        return bool(self._provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        """Flush (bounded by the exporter's timeout) and stop the SDK's thread."""
        atexit.unregister(self._flush_at_exit)
        self._provider.shutdown()


def build_event_exporters(
    choice: str,
    resource_attributes: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> list[OtlpEventExporter]:
    """The exporters ``JITWATCH_EVENTS_EXPORTER`` (``choice``: ``otlp`` or ``none``) selects; never
    raises. ``OTEL_SDK_DISABLED=true`` turns export off. A missing SDK or a bad OTLP setting logs one
    warning and exports nothing.
    """
    env = os.environ if env is None else env
    if choice != "otlp" or (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return []
    try:
        return [OtlpEventExporter(resource_attributes, env=env)]
    except Exception as exc:  # noqa: BLE001 - exporting must never stop a worker
        log.warning("jitwatch: event export disabled (%s: %s)", type(exc).__name__, exc)
        return []


__all__ = ["DEFAULT_MAX_QUEUE", "OtlpEventExporter", "build_event_exporters", "record_attributes"]
