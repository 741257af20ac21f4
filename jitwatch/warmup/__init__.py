"""Warmup: compile before serving what serving will need.

* :mod:`.manifest` — warmup manifests: what compiled (recorded from the journal), as data;
* :mod:`.replay` — precompile a manifest's entries through their backend (Triton: ``preload``);
* :mod:`.slot_mapping` — the slot-mapping kernel's warmup (block id 1; state restored in ``finally``).

Nothing is re-exported here, so that importing one submodule does not import Triton.
"""
