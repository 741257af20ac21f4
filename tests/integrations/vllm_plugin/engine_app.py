"""Start a real vLLM engine (offline ``LLM``) on the tiny model and run token-id prompts.

Usage: ``python engine_app.py --model DIR [--tp N] [--requests N] [--compile-in-request]
[--fail-in-request] [--compile]``.
Prints one ``RESULT {json}`` line: request ids and generated token ids. Run by the ``vllm`` tests
in a subprocess; vLLM loads the jitwatch plugin itself (entry point, ``VLLM_PLUGINS``).
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--compile-in-request", action="store_true")
    parser.add_argument("--fail-in-request", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (no enforce_eager)")
    args = parser.parse_args()

    from vllm import LLM, SamplingParams

    kwargs = {}
    if args.compile_in_request:
        from vllm_testprocs import CompileInRequest

        kwargs["logits_processors"] = [CompileInRequest]
    if args.fail_in_request:
        from vllm_testprocs import FailInRequest

        kwargs["logits_processors"] = [FailInRequest]
    llm = LLM(
        model=args.model,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=128,
        max_num_seqs=4,
        max_num_batched_tokens=128,
        enforce_eager=not args.compile,
        gpu_memory_utilization=0.1,
        tensor_parallel_size=args.tp,
        seed=0,
        **kwargs,
    )
    prompts = [{"prompt_token_ids": [1, 5 + i, 7, 11, 13]} for i in range(args.requests)]
    outs = llm.generate(prompts, SamplingParams(max_tokens=args.max_tokens, detokenize=False, ignore_eos=True))
    result = {"requests": [{"request_id": o.request_id, "token_ids": list(o.outputs[0].token_ids)} for o in outs]}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
