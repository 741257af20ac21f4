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
    detect_parallel_ranks,
    detect_rank,
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
    }
    s = Settings.from_env(env)
    assert s == Settings(Path("/tmp/jw-x"), Mode.ERROR, "0.0.0.0", 0, "s3cret", 10, 60, 3, 7, 80)


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
        ({"JITWATCH_RANK": "9", "RANK": "5"}, 9),
        ({"JITWATCH_RANK": "", "RANK": "5"}, 5),
    ],
)
def test_detect_rank(env: dict[str, str], rank: int) -> None:
    assert detect_rank(env) == rank


def test_detect_rank_errors() -> None:
    with pytest.raises(ConfigError, match="RANK=-1 is negative"):
        detect_rank({"RANK": "-1"})
    with pytest.raises(ConfigError, match="LOCAL_RANK='x'"):
        detect_rank({"LOCAL_RANK": "x"})


def test_detect_parallel_ranks() -> None:
    assert detect_parallel_ranks({}) == {"tp_rank": None, "pp_rank": None, "dp_rank": None, "local_rank": None}
    got = detect_parallel_ranks({"JITWATCH_TP_RANK": "1", "JITWATCH_DP_RANK": "0", "LOCAL_RANK": "3"})
    assert got == {"tp_rank": 1, "pp_rank": None, "dp_rank": 0, "local_rank": 3}
    with pytest.raises(ConfigError, match="JITWATCH_PP_RANK=-2"):
        detect_parallel_ranks({"JITWATCH_PP_RANK": "-2"})
