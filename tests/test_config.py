"""jitwatch.config: every JITWATCH_* variable, defaults and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitwatch import config
from jitwatch.config import (
    ALL_VARIABLES,
    ConfigError,
    Mode,
    Settings,
    default_journal_dir,
    parse_backends,
    parse_mode,
)


def test_defaults_from_empty_env(monkeypatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    s = Settings.from_env({})
    assert s.mode is Mode.WARN
    assert (s.host, s.port, s.token) == ("127.0.0.1", 9400, None)
    assert s.retention_events == 100_000 and s.retention_seconds == 7 * 24 * 3600
    assert (s.max_kernels, s.queue_size, s.target_arch) == (500, 10_000, 90)
    assert s.journal_dir == Path.home() / ".local" / "state" / "jitwatch"


def test_every_variable_is_read() -> None:
    env = {
        "JITWATCH_DIR": "/tmp/jw-x",
        "JITWATCH_MODE": " ERROR ",
        "JITWATCH_HOST": "0.0.0.0",
        "JITWATCH_PORT": "0",
        "JITWATCH_TOKEN": "s3cret",
        "JITWATCH_RETENTION_EVENTS": "10",
        "JITWATCH_RETENTION_SECONDS": "60",
        "JITWATCH_MAX_KERNELS": "3",
        "JITWATCH_QUEUE_SIZE": "7",
        "JITWATCH_TARGET_ARCH": "80",
        "JITWATCH_HEARTBEAT_SECONDS": "2.5",
        "JITWATCH_STALE_SECONDS": "30",
        "JITWATCH_BACKENDS": "triton, my_dsl",
        "JITWATCH_RANK": "4",
        "JITWATCH_TP_RANK": "1",
        "JITWATCH_PP_RANK": "0",
        "JITWATCH_DP_RANK": "2",
        "JITWATCH_MANIFEST": "/tmp/m.json",
        "JITWATCH_MANIFEST_ALLOW": "vllm, my_kernels,,vllm",
        "JITWATCH_MANIFEST_KEY": "sixteen-bytes-key-é",
        "JITWATCH_REPLAY_PARALLEL": "Threads",
        "JITWATCH_REPLAY_WORKERS": "3",
        "JITWATCH_SLOT_MAPPING_WARMUP": "off",
        "JITWATCH_EVENTS_EXPORTER": "OTLP",
        "JITWATCH_COLLECTIVE_DEADLINE_S": "90",
        "JITWATCH_ALLOWED_HOSTS": "jit.example, Prom.Internal",
        "JITWATCH_READ_TIMEOUT_SECONDS": "2.5",
        "JITWATCH_HEADER_TIMEOUT_SECONDS": "0",
        "JITWATCH_SEND_TIMEOUT_SECONDS": "12.5",
        "JITWATCH_MAX_CONNECTIONS": "64",
    }
    assert set(env) == set(ALL_VARIABLES)
    s = Settings.from_env(env)
    assert s == Settings(
        journal_dir=Path("/tmp/jw-x"),
        journal_dir_source="set",
        mode=Mode.ERROR,
        host="0.0.0.0",
        port=0,
        token="s3cret",
        retention_events=10,
        retention_seconds=60,
        max_kernels=3,
        queue_size=7,
        target_arch=80,
        heartbeat_seconds=2.5,
        stale_seconds=30.0,
        backends=("triton", "my_dsl"),
        rank_offset=4,
        tp_rank=1,
        pp_rank=0,
        dp_rank=2,
        manifest=Path("/tmp/m.json"),
        manifest_allow=("vllm", "my_kernels"),
        manifest_key="sixteen-bytes-key-é".encode(),
        replay_parallel="threads",
        replay_workers=3,
        slot_mapping_warmup="off",
        events_exporter="otlp",
        collective_deadline_s=90.0,
        collective_deadline_source="JITWATCH_COLLECTIVE_DEADLINE_S",
        allowed_hosts=("jit.example", "Prom.Internal"),
        read_timeout_seconds=2.5,
        header_timeout_seconds=0.0,
        send_timeout_seconds=12.5,
        max_connections=64,
    )


def test_variable_names_are_constants() -> None:
    assert len(set(ALL_VARIABLES)) == len(ALL_VARIABLES)
    for name in ALL_VARIABLES:
        assert getattr(config, name) == name and name.startswith("JITWATCH_")


def test_journal_dir_precedence() -> None:
    assert default_journal_dir({"JITWATCH_DIR": "~/j", "XDG_STATE_HOME": "/s"}) == Path("~/j").expanduser()
    assert default_journal_dir({"XDG_STATE_HOME": "/s"}) == Path("/s/jitwatch")


def test_journal_dir_without_home(monkeypatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("no home")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    d = default_journal_dir({})
    assert d.name.startswith("jitwatch-")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JITWATCH_MODE": "loud"}, "JITWATCH_MODE='loud'"),
        ({"JITWATCH_PORT": "http"}, "JITWATCH_PORT='http' is not an integer"),
        ({"JITWATCH_PORT": "70000"}, "above the maximum 65535"),
        ({"JITWATCH_PORT": "-1"}, "below the minimum 0"),
        ({"JITWATCH_QUEUE_SIZE": "0"}, "JITWATCH_QUEUE_SIZE=0 is below the minimum 1"),
        ({"JITWATCH_RETENTION_EVENTS": "1e5"}, "not an integer"),
        ({"JITWATCH_REPLAY_PARALLEL": "fast"}, "JITWATCH_REPLAY_PARALLEL='fast': expected one of auto, serial"),
        ({"JITWATCH_REPLAY_WORKERS": "0"}, "JITWATCH_REPLAY_WORKERS=0 is below 1"),
        ({"JITWATCH_SLOT_MAPPING_WARMUP": "yes"}, "expected one of auto, on, off"),
        ({"JITWATCH_BACKENDS": "triton,../x"}, "is not a backend name"),
        ({"JITWATCH_PP_RANK": "-2"}, "JITWATCH_PP_RANK=-2 is negative"),
        ({"RANK": "-1"}, "RANK=-1 is negative"),
        ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
        ({"JITWATCH_RANK": str(2**31)}, "above the maximum"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_blank_values_mean_default() -> None:
    s = Settings.from_env({"JITWATCH_MODE": "", "JITWATCH_PORT": "  ", "JITWATCH_TOKEN": ""})
    assert (s.mode, s.port, s.token) == (Mode.WARN, 9400, None)


def test_parse_mode() -> None:
    assert parse_mode(None) is Mode.WARN
    assert parse_mode(Mode.OFF) is Mode.OFF
    assert parse_mode("Off") is Mode.OFF
    with pytest.raises(ConfigError):
        parse_mode("on")


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({}, 0),
        ({"LOCAL_RANK": "2"}, 2),
        ({"RANK": "5", "LOCAL_RANK": "2"}, 5),
        ({"JITWATCH_RANK": "9"}, 9),
        ({"JITWATCH_RANK": "8", "RANK": "5"}, 13),
        ({"JITWATCH_RANK": "", "RANK": "5"}, 5),
    ],
)
def test_rank_is_offset_plus_host_rank(env: dict[str, str], rank: int) -> None:
    """JITWATCH_RANK means one thing everywhere: an offset added to the host's rank."""
    assert Settings.from_env(env).rank() == rank
    assert Settings.from_env(env).rank(host_rank=1) == int(env.get("JITWATCH_RANK") or 0) + 1


def test_parallel_ranks() -> None:
    s = Settings.from_env({"JITWATCH_TP_RANK": "1", "JITWATCH_DP_RANK": "0", "LOCAL_RANK": "3"})
    assert (s.tp_rank, s.pp_rank, s.dp_rank, s.local_rank) == (1, None, 0, 3)


def test_parse_backends() -> None:
    assert parse_backends(None) is None
    assert parse_backends(" ALL ") is None
    assert parse_backends("none") == ()
    assert parse_backends("triton, torch_compile ,triton") == ("triton", "torch_compile")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Triton", "JITWATCH_BACKENDS='Triton': 'Triton' is not a backend name"),
        ("triton,Torch_Compile", "did you mean JITWATCH_BACKENDS=triton,torch_compile?"),
        ("my-dsl", "'my-dsl' is not a backend name: lower-case letters, digits and _"),
        ("x" * 65, "at most 64 characters"),
    ],
)
def test_backend_names_follow_the_filters_rule(value: str, expected: str) -> None:
    """JITWATCH_BACKENDS names backends as /jit, `?backend=` and `--backend` spell them: lower
    case, exactly (the filters refuse `Triton`); a capitalised name was lower-cased silently here.
    Refused once, in Settings, with the lower-case value suggested when that one is valid."""
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"JITWATCH_BACKENDS": value})
    assert expected in str(info.value)
    assert ("did you mean" in str(info.value)) is (value.lower() != value and "-" not in value)
    # the words all / none are choices, case-insensitive like every other choice variable's
    assert parse_backends("None") == () and parse_backends("ALL") is None


def test_nothing_else_reads_jitwatch_variables() -> None:
    """Every JITWATCH_* variable is parsed in jitwatch/config.py and nowhere else."""
    import re

    root = Path(config.__file__).parent
    pattern = re.compile(r"(os\.environ|getenv|environ\.get)[^\n]*JITWATCH_")
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "config.py" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "name",
    [
        config.JITWATCH_PORT,
        config.JITWATCH_STALE_SECONDS,
        config.JITWATCH_READ_TIMEOUT_SECONDS,
        config.JITWATCH_HEADER_TIMEOUT_SECONDS,
        config.JITWATCH_MAX_CONNECTIONS,
    ],
)
def test_for_worker_ignores_a_bad_sidecar_only_variable(name: str) -> None:
    """A worker does not stop for a bad value of a variable only the sidecar reads (the sidecar's
    connection limit and timeouts included); ``from_env`` still refuses it."""
    env = {"JITWATCH_DIR": "/tmp/jw-test", name: "abc"}
    assert name in config.SIDECAR_ONLY_VARIABLES
    Settings.for_worker(env)
    with pytest.raises(ConfigError, match=name):
        Settings.from_env(env)


def test_sidecar_only_variables_are_not_worker_variables() -> None:
    assert not set(config.SIDECAR_ONLY_VARIABLES) & set(config.WORKER_VARIABLES)
    assert set(config.SIDECAR_ONLY_VARIABLES) <= set(ALL_VARIABLES)


@pytest.mark.parametrize(
    ("env", "source"),
    [
        ({"JITWATCH_DIR": "/tmp/jw-y"}, "set"),
        ({"JITWATCH_DIR": ""}, "empty"),
        ({"JITWATCH_DIR": "  "}, "empty"),
        ({"JITWATCH_DIR": " \t\n"}, "empty"),
        ({}, "unset"),
    ],
)
def test_the_journal_dir_says_where_it_came_from(env: dict[str, str], source: str) -> None:
    """``journal_dir_source``: what the CLI's "journal: <dir> (...)" line says, read here once
    (nothing else reads ``JITWATCH_DIR``); an empty value gives the default directory, as unset."""
    settings = Settings.from_env({"HOME": "/tmp/jw-home", **env})
    assert settings.journal_dir_source == source
    assert (settings.journal_dir == Path("/tmp/jw-y")) is (source == "set")
    if source != "set":  # a blank value (only spaces) is empty, as the numbers' blanks are: not a directory "  "
        assert settings.journal_dir == Settings.from_env({"HOME": "/tmp/jw-home"}).journal_dir
        assert settings.journal_dir == default_journal_dir({"HOME": "/tmp/jw-home", **env})


@pytest.mark.parametrize("raw", [" /tmp/jw-y", "/tmp/jw-y ", "/tmp/jw-y\n", "\t/tmp/jw-y\r\n"])
def test_the_journal_dir_is_read_without_the_whitespace_around_it(raw: str) -> None:
    """``JITWATCH_DIR=" /srv/j"`` (an env file, a YAML value, a secret file's last newline) names
    ``/srv/j``, as ``JITWATCH_MANIFEST``'s value is read stripped: not the relative directory
    ``" /srv/j"`` under the worker's working directory, nor ``"j\\n"``."""
    settings = Settings.from_env({"HOME": "/tmp/jw-home", "JITWATCH_DIR": raw})
    assert settings.journal_dir_source == "set"
    assert settings.journal_dir == Path("/tmp/jw-y")
    assert default_journal_dir({"HOME": "/tmp/jw-home", "JITWATCH_DIR": raw}) == Path("/tmp/jw-y")


@pytest.mark.parametrize("state", ["  ", "relative/state", "\t"])
def test_a_blank_or_relative_xdg_state_home_is_ignored(state: str) -> None:
    """The XDG spec: a relative path in an ``XDG_*`` variable is invalid and ignored. With
    ``JITWATCH_DIR`` unset or blank the journal is then under ``~/.local/state``, not a directory
    relative to each worker's working directory (``"  /jitwatch"``, ``relative/state/jitwatch``)."""
    home = Path("/tmp/jw-home")
    for env in (
        {"HOME": str(home), "XDG_STATE_HOME": state},
        {"HOME": str(home), "XDG_STATE_HOME": state, "JITWATCH_DIR": " "},
    ):
        assert default_journal_dir(env) == Path.home() / ".local" / "state" / "jitwatch"
    assert default_journal_dir({"XDG_STATE_HOME": " /s "}) == Path("/s/jitwatch")


NO_SUCH_USER = "~jitwatch-no-such-user-17"


def test_a_tilde_that_cannot_be_expanded_is_a_config_error() -> None:
    """`JITWATCH_DIR='~nosuchuser/x'` (and JITWATCH_MANIFEST, and the CLI's --journal-dir through
    journal_dir_value) raised pathlib's RuntimeError: a traceback in every CLI command, and not the
    ConfigError install() raises for any other unusable variable. Now a ConfigError naming it;
    not strict (the CLI), it reads as unset until a command requires the variable."""
    value = f"{NO_SUCH_USER}/x"
    with pytest.raises(ConfigError, match=r"JITWATCH_DIR='~jitwatch-no-such-user-17/x': cannot expand"):
        config.journal_dir_value(value)
    with pytest.raises(ConfigError, match=r"^--journal-dir='~jitwatch-no-such-user-17/x': cannot expand .*no user"):
        config.journal_dir_value(f"  {value} ", "--journal-dir")
    with pytest.raises(ConfigError, match="JITWATCH_DIR="):
        Settings.from_env({"JITWATCH_DIR": value})
    with pytest.raises(ConfigError, match="JITWATCH_MANIFEST="):
        Settings.from_env({"JITWATCH_MANIFEST": f"{NO_SUCH_USER}/m.json"})
    loose = Settings.from_env({"JITWATCH_DIR": value, "XDG_STATE_HOME": "/s"}, strict=False)
    assert loose.journal_dir == Path("/s/jitwatch")
    loose.require("JITWATCH_MODE")  # not a variable the command reads: no error
    with pytest.raises(ConfigError, match="JITWATCH_DIR="):
        loose.require("JITWATCH_DIR")
    # what did expand still does
    assert config.journal_dir_value("~/x") == Path.home() / "x"


@pytest.mark.parametrize("value", [",", " , ,", ",\n"])
def test_backends_of_only_commas_is_refused_not_none(value: str) -> None:
    """JITWATCH_BACKENDS=',' (a template whose names came out empty: "${A},${B}") parsed as ()
    — the same as `none`: jitwatch installed and recorded nothing, without a word. Now refused:
    it names no backend; `none` and `all` are the words for none and every one."""
    with pytest.raises(ConfigError, match=r"names no backend: .*none.*all"):
        parse_backends(value)
    assert parse_backends("none") == () and parse_backends(" ") is None


def test_host_is_read_without_the_whitespace_around_it() -> None:
    """JITWATCH_HOST=' 127.0.0.1 ' (an env file's stray space, a trailing newline) was used as is:
    `jitwatch serve` refused to bind ' 127.0.0.1 ' (Name or service not known) while `jitwatch
    status` reached 127.0.0.1. Read as JITWATCH_DIR is: stripped, blank = the default."""
    assert Settings.from_env({"JITWATCH_HOST": " 0.0.0.0\n"}).host == "0.0.0.0"
    assert Settings.from_env({"JITWATCH_HOST": "  "}).host == "127.0.0.1"
    assert Settings.from_env({"JITWATCH_HOST": "::1"}).host == "::1"
