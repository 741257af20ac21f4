"""A failure inside the plugin never stops vLLM (logged and counted), unless ``JITWATCH_MODE=error``."""

from __future__ import annotations

from pathlib import Path

import pytest

from .vllm_engine import run_engine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(400)]


def test_broken_config_is_logged_and_vllm_serves(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result, out = run_engine(tmp_path, tiny_model, journal, env_extra={"JITWATCH_QUEUE_SIZE": "lots"})
    assert result is not None and len(result["requests"][0]["token_ids"]) == 4
    assert "jitwatch vLLM plugin: register failed (1 so far): ConfigError: JITWATCH_QUEUE_SIZE='lots'" in out
    assert not (journal / "journal.db").exists()  # nothing was installed


def test_error_mode_stops_the_worker(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result, out = run_engine(
        tmp_path, tiny_model, journal, env_extra={"JITWATCH_QUEUE_SIZE": "lots", "JITWATCH_MODE": "error"}, check=False
    )
    assert result is None
    assert "PluginError: jitwatch vLLM plugin: register failed: ConfigError: JITWATCH_QUEUE_SIZE" in out
