"""jitwatch inside vLLM: a ``vllm.general_plugins`` entry point (:mod:`jitwatch.integrations.vllm.plugin`).

``pip install jitwatch[vllm]`` registers the plugin; vLLM loads it in every process it starts
(``vllm.plugins.load_general_plugins``, filtered by ``VLLM_PLUGINS``). Only worker processes do
anything: see :mod:`jitwatch.integrations.vllm.plugin` and ``docs/vllm.md``. Importing this package does not
import vLLM.
"""
