"""Events off-host: every journal event as an OpenTelemetry log record (:mod:`.otlp`).

Exporters follow :class:`jitwatch.store.writer.EventExporter` and run on the journal writer's
thread; ``jitwatch.worker`` wires them from :class:`~jitwatch.config.Settings`
(``JITWATCH_EVENTS_EXPORTER``). See docs/fleet.md for the Collector side.
"""
