"""jitwatch.redact: home directories and user names never leave the process."""

from __future__ import annotations

import pytest

from jitwatch import redact as redact_mod
from jitwatch.redact import redact


@pytest.fixture
def alice(monkeypatch):
    """Pretend HOME=/home/alice and the user is ``alice``."""
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setattr(redact_mod.Path, "home", staticmethod(lambda: redact_mod.Path("/home/alice")))
    monkeypatch.setattr(redact_mod.getpass, "getuser", lambda: "alice")
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    yield
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/home/alice/.venv/lib/libdevice.10.bc", "~/.venv/lib/libdevice.10.bc"),
        ("('libdevice', '/home/alice/x.bc')", "('libdevice', '~/x.bc')"),
        ("/home/alice", "~"),
        ("/home/bob/proj/k.py", "~/proj/k.py"),
        ("/Users/carol/k.py", "~/k.py"),
        ("/scratch/alice/cache", "/scratch/<user>/cache"),
        ("/home/alicex/p", "~/p"),  # someone else's home: still a /home/<name> prefix
        ("/data/home/alice/p", "/data/home/<user>/p"),  # not a home prefix; the user component still goes
    ],
)
def test_paths(alice, text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "alice_kernel",  # a kernel named like the user: not a path component
        "module alice.kernels",
        "vllm.model_executor.layers",
        "[('*fp32', 'D'), ('i32', '')]{'debug': False}",
        "",
    ],
)
def test_non_paths_untouched(alice, text: str) -> None:
    assert redact(text) == text


def test_home_is_a_whole_component(monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setattr(redact_mod.Path, "home", staticmethod(lambda: redact_mod.Path("/root")))
    redact_mod._patterns.cache_clear()
    try:
        assert redact("/root/.triton/cache") == "~/.triton/cache"
        assert redact("/rootfs/x") == "/rootfs/x"
        assert redact("/root-old/x") == "/root-old/x"
        assert redact("/srv/root/x") == "/srv/root/x"
    finally:
        redact_mod._patterns.cache_clear()


def test_short_and_root_user_names_not_replaced(monkeypatch) -> None:
    for user in ("root", "ab"):
        monkeypatch.setattr(redact_mod.getpass, "getuser", lambda u=user: u)
        redact_mod._user_pattern.cache_clear()
        assert redact_mod._user_pattern() is None
    redact_mod._user_pattern.cache_clear()


def test_no_passwd_entry_never_raises(monkeypatch) -> None:
    def boom() -> str:
        raise KeyError("getpwuid(): uid not found")

    monkeypatch.setattr(redact_mod.getpass, "getuser", boom)
    redact_mod._user_pattern.cache_clear()
    try:
        assert redact("/scratch/x") == "/scratch/x"
    finally:
        redact_mod._user_pattern.cache_clear()


def test_non_string_input() -> None:
    assert redact(("/home/zed/a",)) == "('~/a',)"  # type: ignore[arg-type]


def test_a_symlinked_home_is_redacted_under_its_real_path_too(monkeypatch, tmp_path) -> None:
    """``HOME`` a symlink (``/home/alice`` → an NFS directory not named after the user): paths
    resolved through it (``os.path.realpath``, a venv's files, Triton's libdevice) name the real
    directory, which is the home directory all the same."""
    real = tmp_path / "nfs" / "u12345"
    real.mkdir(parents=True)
    link = tmp_path / "homelink"
    link.symlink_to(real)
    monkeypatch.setenv("HOME", str(link))
    monkeypatch.setattr(redact_mod.Path, "home", staticmethod(lambda: redact_mod.Path(str(link))))
    monkeypatch.setattr(redact_mod.getpass, "getuser", lambda: "alice")
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    try:
        resolved = f"{real}/.venv/lib/libdevice.10.bc"
        assert redact(f"('libdevice', '{resolved}')") == "('libdevice', '~/.venv/lib/libdevice.10.bc')"
        assert redact(f"{link}/x") == "~/x"
        assert redact(f"{real}x/y") == f"{real}x/y"  # still only as a whole component
    finally:
        redact_mod._patterns.cache_clear()
        redact_mod._user_pattern.cache_clear()


def test_a_relative_home_is_not_resolved_against_the_working_directory(monkeypatch, tmp_path) -> None:
    """``HOME=.`` names no directory: its real path would be the working directory, whose paths
    are not the home directory's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", ".")
    monkeypatch.setattr(redact_mod.Path, "home", staticmethod(lambda: redact_mod.Path(".")))
    monkeypatch.setattr(redact_mod.getpass, "getuser", lambda: "alice")
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    try:
        assert redact(f"{tmp_path}/kernels/k.py") == f"{tmp_path}/kernels/k.py"
    finally:
        redact_mod._patterns.cache_clear()
        redact_mod._user_pattern.cache_clear()
