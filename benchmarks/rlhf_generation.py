"""Rollout speed: our KV-cache sampler against ``transformers``' ``generate``, same model, one run.

    python benchmarks/rlhf_generation.py [--quick | --repeats N]     (or: nox -s bench)

Both sample the same prompts from the same randomly initialised model with the
same settings (temperature 1, top-p 1, EOS, ``max_new_tokens``), alternating
repeat after repeat so that load drift hits both. Printed: generated tokens per
second of each and their ratio. On a CUDA machine the ``gpu`` preset (the
Qwen2.5-0.5B shape, bf16) is used with a batch of 256 prompts and 64 new tokens;
elsewhere the ``cpu`` preset with the task's real lengths. The MFU of the actor
update is logged by every training run as ``perf/mfu/actor``
(``reference_impl/rlhf/metrics.py``).

``generate`` does more per step than our loop (logits processors, stopping
criteria, cache bookkeeping), which is what the ratio shows; both use the same
forward pass and the same KV cache class.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from reference_impl.rlhf.model import PRESETS, build_actor, qwen2_config
from reference_impl.rlhf.rollout import generate
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer


def main(repeats: int) -> float:
    cuda = torch.cuda.is_available()
    device, preset = ("cuda", "gpu") if cuda else ("cpu", "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    batch, new_tokens = (256, 64) if cuda else (256, 4)
    tok = CharTokenizer()
    shape = PRESETS[preset]
    # No EOS: every row generates all new_tokens in both systems, so the work is equal.
    config = qwen2_config(shape, tok.vocab_size, tok.pad_token_id, tok.bos_token_id, None)
    model = build_actor(config, seed=0, dtype=dtype).to(device).eval()
    prompts, _ = DigitSumTask().make_prompts(tok, batch, torch.Generator().manual_seed(0))
    prompts = prompts.to(device)

    def ours() -> int:
        out = generate(model, prompts, new_tokens, eos_token_id=-1, pad_token_id=0)
        return int(out["response_mask"].sum())

    def hf() -> int:
        with torch.no_grad():
            out = model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=0,
            )
        return (out.shape[1] - prompts.shape[1]) * out.shape[0]

    def rate(fn) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = fn()
        if cuda:
            torch.cuda.synchronize()
        return tokens / (time.perf_counter() - start)

    ours(), hf()  # warm-up: first calls pay for allocation and kernel selection
    rates = {"ours": [], "hf": []}
    for _ in range(repeats):
        rates["ours"].append(rate(ours))
        rates["hf"].append(rate(hf))
    median = {k: statistics.median(v) for k, v in rates.items()}
    ratio = median["ours"] / median["hf"]
    print(
        f"{preset} preset on {device}, {batch} prompts x {new_tokens} new tokens, {repeats} repeats"
    )
    print(f"ours (rollout.generate)    {median['ours']:>10.0f} tokens/s")
    print(f"transformers generate()    {median['hf']:>10.0f} tokens/s")
    print(f"ours/transformers tokens/s: {ratio:.2f}x")
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 20")
    parser.add_argument("--repeats", type=int, help="timed repeats of each (default 20)")
    args = parser.parse_args()
    main(args.repeats or (3 if args.quick else 20))
