"""A manifest is data: replay compiles only what the entry's key and the current kernel define.

Real compiles (compile-only driver, sm_90), real journals, real CLI. Each tampered entry below
was replayed (and compiled, under the real key) before replay checked options and keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.config import JITWATCH_MANIFEST, JITWATCH_MANIFEST_ALLOW, JITWATCH_MANIFEST_KEY, Settings
from jitwatch.errors import ManifestEntryRefused, ManifestError
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from jitwatch.warmup.manifest import Manifest, ManifestEntry, export, load, record_from_journal, save
from jitwatch.warmup.replay import ON_DISK, replay, replay_from_env
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

ALLOW = ["kernels_fieldcases"]
KEY = b"0123456789abcdef-test-key"


@pytest.fixture
def recorded(harness: MonitorHarness) -> Manifest:
    """Serving compiles: ``scale_copy`` on an offset view (BLOCK=64) and the do-not-specialize slot
    mapping kernel with ``num_warps=2`` (an option in the key)."""
    fresh_kernel_cache(kf.scale_copy, kf.slot_mapping_dns)
    x, y = torch.zeros(64), torch.zeros(65)
    kf.scale_copy.warmup(x, y[1:], 64, BLOCK=64, grid=(1,))
    i64, i32 = torch.zeros(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int32)
    kf.slot_mapping_dns.warmup(i64, i32, i64, 16, 32, 16, BLOCK=64, grid=(1,), num_warps=2)
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        m = record_from_journal(j, phases=None)
    assert [e.qualname for e in m.entries] == ["scale_copy", "slot_mapping_dns"]
    fresh_kernel_cache(kf.scale_copy, kf.slot_mapping_dns)
    return m


def _tampered(m: Manifest, index: int, change: Callable[[dict[str, Any]], None]) -> Manifest:
    """Entry ``index`` with its ``specialization_data`` edited and the key kept (what an attacker
    who can write the manifest does)."""
    e = m.entries[index].model_dump()
    data = json.loads(e["specialization_data"])
    change(data)
    e["specialization_data"] = json.dumps(data)
    return Manifest(entries=[ManifestEntry.model_validate(e)])


def _cached(fn: Any, key: str) -> bool:
    return key in fn.device_caches[0][0]


def test_untampered_entries_compile(recorded: Manifest, compile_only: Any) -> None:
    report = replay(recorded, allow=ALLOW, parallel="serial")
    # recording compiled both into this test's Triton disk cache: replay loads them from there
    assert [(r.status, r.reason) for r in report.results] == [("cached", ON_DISK)] * 2, report.results
    assert _cached(kf.scale_copy, recorded.entries[0].key) and _cached(kf.slot_mapping_dns, recorded.entries[1].key)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("ir_override", "IR"),  # replaced by a real TTIR file of another specialization below
        ("ptx_options", "--help"),
        ("extern_libs", [["libdevice", "/x/libdevice.bc"], ["mylib", "/tmp/evil.bc"]]),
        ("not_an_option", 1),
    ],
)
def test_code_changing_options_refused_naming_the_option(
    recorded: Manifest, compile_only: Any, tmp_path: Path, option: str, value: Any
) -> None:
    """``ir_override`` (a real TTIR of BLOCK=128 planted under the BLOCK=64 key), ``ptx_options``,
    a non-libdevice ``extern_libs`` and unknown names are refused; nothing lands under the key."""
    if option == "ir_override":
        fresh_kernel_cache(kf.scale_copy)
        other = kf.scale_copy.warmup(torch.zeros(64), torch.zeros(64), 64, BLOCK=128, grid=(1,))
        ttir = tmp_path / "other.ttir"
        ttir.write_text(other.asm["ttir"])
        value = str(ttir)
        fresh_kernel_cache(kf.scale_copy)
    m = _tampered(recorded, 0, lambda d: d["options"].__setitem__(option, value))
    report = replay(m, allow=ALLOW, parallel="serial")
    (result,) = report.results
    assert result.status == "refused", result
    assert f"option {option!r}" in (result.reason or "")
    assert report.refused == 1 and "1 refused" in report.summary()
    assert not _cached(kf.scale_copy, m.entries[0].key)


@pytest.mark.parametrize(
    ("what", "change", "reason"),
    [
        ("constexpr", lambda d: d.__setitem__("constant_vals", [128]), "key does not match"),
        (
            "divisibility",  # claim the offset view (dst_ptr) is 16-byte aligned
            lambda d: d["attrs_vals"].__setitem__(1, [["tt.divisibility", 16]]),
            "key does not match",
        ),
        (
            "extra constexpr",  # make `n` a compile-time constant
            lambda d: (d["constant_keys"].append([2]), d["constant_vals"].append(64)),
            "constexprs differ",
        ),
        ("signature", lambda d: d["signature"].__setitem__("src_ptr", "*fp16"), "key does not match"),
        ("arguments", lambda d: d.__setitem__("signature", {"a": "i32"}), "not the kernel's"),
    ],
)
def test_specialization_not_matching_the_key_refused(
    recorded: Manifest, compile_only: Any, what: str, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    m = _tampered(recorded, 0, change)
    (result,) = replay(m, allow=ALLOW, parallel="serial").results
    assert result.status == "refused", (what, result)
    assert reason in (result.reason or ""), result.reason
    assert not _cached(kf.scale_copy, m.entries[0].key)


def test_do_not_specialize_argument_cannot_gain_divisibility(recorded: Manifest, compile_only: Any) -> None:
    """``num_tokens`` is ``do_not_specialize``: the key says ``('i32', None)``; a planted
    ``tt.divisibility`` for it is refused (the kernel's own binder ignores it)."""
    m = _tampered(
        recorded,
        1,
        lambda d: (d["attrs_keys"].append([3]), d["attrs_vals"].append([["tt.divisibility", 16]])),
    )
    (result,) = replay(m, allow=ALLOW, parallel="serial").results
    assert result.status == "refused" and "attributes differ" in (result.reason or ""), result


def test_option_disagreeing_with_the_key_refused(recorded: Manifest, compile_only: Any) -> None:
    m = _tampered(recorded, 1, lambda d: d["options"].__setitem__("num_warps", 8))
    (result,) = replay(m, allow=ALLOW, parallel="serial").results
    assert result.status == "refused" and "option 'num_warps'" in (result.reason or ""), result


def test_compile_uses_the_keys_options_not_the_recorded_ones(recorded: Manifest, compile_only: Any) -> None:
    """An allowed option outside the key (``num_stages``) edited in the data does not reach the
    compile: the kernel under the key is what a real launch would compile (3 stages, Triton's default)."""
    m = _tampered(recorded, 0, lambda d: d["options"].__setitem__("num_stages", 1))
    (result,) = replay(m, allow=ALLOW, parallel="serial").results
    # the key's own compile (recorded into the disk cache): num_stages=1 would have missed it
    assert (result.status, result.reason) == ("cached", ON_DISK), result
    kernel = kf.scale_copy.device_caches[0][0][m.entries[0].key]
    assert kernel.metadata.num_stages == 3


def test_refused_entry_fails_the_cli(recorded: Manifest, tmp_path: Path) -> None:
    from jitwatch.cli import app

    m = _tampered(recorded, 0, lambda d: d["options"].__setitem__("ir_override", "/tmp/x.ttir"))
    path = save(m, tmp_path / "m.json")
    res = CliRunner().invoke(app, ["warmup", "replay", str(path), "--allow", "kernels_fieldcases"])
    assert res.exit_code == 1, res.output
    assert "refused: kernels_fieldcases.scale_copy" in res.output and "'ir_override'" in res.output


# ------------------------------------------------------------------------------------ export
def test_export_leaves_out_refused_options(harness: MonitorHarness, tmp_path: Path) -> None:
    """A compile launched with ``ptx_options`` is journaled, but not exported into a manifest."""
    fresh_kernel_cache(kf.scale_copy)
    kf.scale_copy.warmup(torch.zeros(64), torch.zeros(64), 64, BLOCK=32, grid=(1,))
    kf.scale_copy.warmup(torch.zeros(64), torch.zeros(64), 64, BLOCK=32, grid=(1,), ptx_options="-O3")
    harness.monitor.flush()
    m, problems = export(harness.journal_dir, tmp_path / "m.json", all_phases=True)
    assert len(m.entries) == 1 and "ptx_options" not in m.entries[0].key
    ((name, why),) = problems.items()
    assert name.startswith("kernels_fieldcases.scale_copy ") and "option 'ptx_options'" in why
    assert load(tmp_path / "m.json").entries == m.entries


MAIN_SCRIPT = """
import sys, torch, triton, triton.language as tl
from jitwatch.backends.triton.compile_only import activate
activate()
import jitwatch

@triton.jit
def main_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

mon = jitwatch.install(mode="warn", journal_dir=sys.argv[1], tracer_provider=False)
mon.activate()
main_kernel.warmup(torch.zeros(64), BLOCK=64, grid=(1,))
mon.flush()
jitwatch.uninstall()
"""


def test_export_warns_about_and_leaves_out_main_kernels(tmp_path: Path) -> None:
    """A kernel defined in a script run as ``python script.py`` (module ``__main__``) can never be
    resolved by another process: export leaves it out and says why (CLI: on stderr)."""
    from jitwatch.cli import app

    script = tmp_path / "script.py"
    script.write_text(MAIN_SCRIPT)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_DEFAULT_FP_FUSION="1")
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "j")], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    with Journal(tmp_path / "j", readonly=True) as j:
        assert any(e.attrs.get("module") == "__main__" for e in j.events())
    args = ["manifest", "export", "--journal-dir", str(tmp_path / "j"), "-o", str(tmp_path / "m.json")]
    res = CliRunner().invoke(app, args)  # nothing left to write: exit 1, nothing written
    assert res.exit_code == 1, res.output
    assert not (tmp_path / "m.json").exists() and "__main__.main_kernel" in res.stderr
    assert (
        "__main__.main_kernel: left out (1 specialization): defined in __main__" in res.stderr
    )  # not "1 specializations"
    assert res.stderr.splitlines()[-1].startswith(f"jitwatch: nothing to write to {tmp_path / 'm.json'}: every one")
    res = CliRunner().invoke(app, [*args, "--allow-empty"])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "0 specializations" in res.output
    assert "__main__.main_kernel" in res.output and "__main__" in res.output.split("__main__.main_kernel", 1)[1]
    assert load(tmp_path / "m.json").entries == []


# ------------------------------------------------------------------------------------ integrity
def test_digest_detects_an_edit(recorded: Manifest, tmp_path: Path) -> None:
    path = save(recorded, tmp_path / "m.json")
    doc = json.loads(path.read_text())
    assert len(doc["integrity"]["sha256"]) == 64 and doc["integrity"]["hmac_sha256"] is None
    assert load(path).entries == recorded.entries
    doc["entries"][0]["constexprs"]["BLOCK"] = 128
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="digest mismatch"):
        load(path)


def test_hmac_key_signs_and_is_required(recorded: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``JITWATCH_MANIFEST_KEY``: export signs; replay refuses an unsigned manifest, one signed
    with another key, and one edited with its digest recomputed."""
    from jitwatch.cli import app
    from jitwatch.warmup.manifest import seal

    signed = save(recorded.model_copy(deep=True), tmp_path / "signed.json", key=KEY)
    unsigned = save(recorded.model_copy(deep=True), tmp_path / "unsigned.json")
    other = save(recorded.model_copy(deep=True), tmp_path / "other.json", key=b"another-key-0123456789")
    forged = load(signed)
    forged.entries[0].count = 99
    seal(forged)  # digest recomputed, no key: the HMAC is gone
    forged_path = tmp_path / "forged.json"
    forged_path.write_text(forged.model_dump_json())
    assert load(signed, key=KEY).entries == recorded.entries
    for path, msg in ((unsigned, "not signed"), (other, "HMAC mismatch"), (forged_path, "not signed")):
        with pytest.raises(ManifestError, match=msg):
            load(path, key=KEY)
    monkeypatch.setenv(JITWATCH_MANIFEST_KEY, KEY.decode())
    res = CliRunner().invoke(app, ["warmup", "replay", str(unsigned), "--allow", "kernels_fieldcases"])
    assert res.exit_code == 2 and "not signed" in res.output, res.output
    settings = Settings.from_env(
        {
            JITWATCH_MANIFEST: str(unsigned),
            JITWATCH_MANIFEST_ALLOW: "kernels_fieldcases",
            JITWATCH_MANIFEST_KEY: KEY.decode(),
        }
    )
    assert replay_from_env(settings=settings) is None  # logged, not replayed
    settings = Settings.from_env(
        {
            JITWATCH_MANIFEST: str(signed),
            JITWATCH_MANIFEST_ALLOW: "kernels_fieldcases",
            JITWATCH_MANIFEST_KEY: KEY.decode(),
        }
    )
    report = replay_from_env(settings=settings)
    assert report is not None and (report.compiled, report.on_disk) == (0, 2)  # recorded into this disk cache


def test_short_manifest_key_is_a_config_error() -> None:
    from jitwatch.errors import ConfigError

    with pytest.raises(ConfigError, match=JITWATCH_MANIFEST_KEY):
        Settings.from_env({JITWATCH_MANIFEST_KEY: "short"})


def test_entry_refused_is_a_manifest_error() -> None:
    assert issubclass(ManifestEntryRefused, ManifestError)


def test_jit_function_constexpr(harness: MonitorHarness) -> None:
    """A kernel passed as a constexpr: verified and replayed (resolved by name from the kernels
    defined in this process, as Triton 3.9's ``preload`` does)."""
    import triton

    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9):
        pytest.skip("Triton < 3.9 cannot serialize a JITFunction constexpr for its own JIT hooks (TypeError)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kernels_jitfn as kj

    fresh_kernel_cache(kj.apply)
    kj.apply.warmup(torch.zeros(64), 64, FN=kj.double, BLOCK=64, grid=(1,))
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        m = record_from_journal(j, phases=None)
    (entry,) = [e for e in m.entries if e.qualname == "apply"]
    fresh_kernel_cache(kj.apply)
    (result,) = replay(Manifest(entries=[entry]), allow=["kernels_jitfn"], parallel="serial").results
    assert (result.status, result.reason) == ("cached", ON_DISK), result  # the warmup above filled the disk cache
    assert _cached(kj.apply, entry.key)
