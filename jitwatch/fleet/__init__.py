"""Fleet: jitwatch across many hosts, on engines a fleet already runs.

* :mod:`.merge` — ``jitwatch warmup merge``: many hosts' manifests into one, counted per key,
  refusing kernels whose source differs between hosts;
* :mod:`.stores` — manifests in shared storage: a plain (NFS-style) directory or a Redis server
  (redis-py), addressed by one location string;
* :mod:`.cache_check` — ``jitwatch cache check``: a manifest's keys against a Triton cache (a local
  ``TRITON_CACHE_DIR`` or Triton's Redis remote cache): missing, corrupt, on a network filesystem.

Events leave the host through :mod:`jitwatch.export` (OTLP), metrics through Prometheus
(``docs/fleet.md``). Nothing read from a manifest, a directory or Redis is ever executed: manifests
are parsed by :func:`jitwatch.warmup.manifest.loads` (validated data), cache entries only read.
"""
