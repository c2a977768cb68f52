"""Rollout speed: our samplers against ``transformers``' ``generate``, same model, one run.

    python benchmarks/rlhf_generation.py [--quick | --repeats N] [--shape toy|real] [--compile]
    (or: nox -s bench)

Every column samples the same prompts from the same randomly initialised model with the
same settings (temperature 1, top-p 1, ``max_new_tokens``, no EOS, so every row generates
every token and the work is equal), alternating repeat after repeat so that load drift
hits all of them. Printed: generated tokens per second of each, and each one's ratio to
``generate``. The columns:

* ``rollout.generate``: our KV-cache loop, one Python step per token (a ``DynamicCache``);
* ``StaticRollout``: a static KV cache and, on CUDA, one captured CUDA graph per decode
  step (``reference_impl/rlhf/static_rollout.py``); eager on a CPU;
* ``generate()``: ``transformers``' own loop;
* with ``--compile``, on CUDA only, ``generate(cache_implementation="static")``:
  ``transformers`` with its static cache, which on CUDA makes it compile the decoding
  forward pass with ``torch.compile`` itself (``GenerationMixin._valid_auto_compile_criteria``
  in ``transformers/generation/utils.py``). Its first call compiles, inside the warm-up,
  which is why the GPU kit's short rollout check leaves it out.

Shapes. ``toy`` (default): on CUDA the ``gpu`` preset (Qwen2.5-0.5B's layers with this
task's 15-token vocabulary, bf16), 256 prompts of 4 tokens, 64 new tokens; on a CPU the
``cpu`` preset with the task's real lengths (4 new tokens). ``real``: Qwen2.5-0.5B exactly,
its 151,936-token vocabulary included (``model.QWEN25_05B``), 64 prompts of 256 random
tokens, 512 new tokens: closer to an RLHF rollout, where the vocabulary's LM head and the
long KV cache are a large part of each step. The MFU of the actor update is logged by every
training run as ``perf/mfu/actor`` (``reference_impl/rlhf/metrics.py``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from reference_impl.rlhf.model import (
    PRESETS,
    QWEN25_05B,
    QWEN25_05B_VOCAB,
    build_actor,
    qwen2_config,
)
from reference_impl.rlhf.rollout import generate
from reference_impl.rlhf.static_rollout import StaticRollout
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer


def model_and_prompts(shape: str, cuda: bool):
    """(model, prompts [b, P], new tokens, a label) for ``shape``, on the device to use."""
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    if shape == "real":
        config = qwen2_config(QWEN25_05B, QWEN25_05B_VOCAB, pad_token_id=0, bos=1, eos=None)
        generator = torch.Generator().manual_seed(0)
        prompts = torch.randint(3, QWEN25_05B_VOCAB, (64, 256), generator=generator)
        new_tokens, label = 512, "Qwen2.5-0.5B (vocabulary 151,936)"
    else:
        tok = CharTokenizer()
        preset = "gpu" if cuda else "cpu"
        # No EOS: every row generates all new tokens in every column, so the work is equal.
        config = qwen2_config(
            PRESETS[preset], tok.vocab_size, tok.pad_token_id, tok.bos_token_id, None
        )
        prompts, _ = DigitSumTask().make_prompts(tok, 256, torch.Generator().manual_seed(0))
        new_tokens, label = (
            (64 if cuda else 4),
            f"{preset} preset (toy vocabulary of {tok.vocab_size})",
        )
    model = build_actor(config, seed=0, dtype=dtype).to(device).eval()
    return model, prompts.to(device), new_tokens, label


# Columns that may fail on a machine without failing the run: a CUDA graph that cannot be
# captured, or a compiler (Triton, a C compiler) missing. The two baselines still give their
# rates, and the failure is printed, not hidden.
OPTIONAL = ("StaticRollout", "transformers static + compile")


def warm_up(columns: dict) -> dict:
    """Call each column once, printing how long it took; return the columns that ran.

    The first call allocates, picks kernels, captures a CUDA graph (``StaticRollout``) or
    compiles (``--compile``). A column whose name starts with one in :data:`OPTIONAL` and
    that raises is printed with its error and left out; any other column's error is raised.
    """
    kept = {}
    for name, fn in columns.items():
        start = time.perf_counter()
        try:
            fn()
        except Exception as error:
            if not name.startswith(OPTIONAL):
                raise
            print(f"warm-up {name}: failed, left out: {type(error).__name__}: {error}", flush=True)
            continue
        print(f"warm-up {name}: {time.perf_counter() - start:.1f} s", flush=True)
        kept[name] = fn
    return kept


def main(repeats: int, shape: str = "toy", compile_column: bool = False) -> float:
    cuda = torch.cuda.is_available()
    model, prompts, new_tokens, label = model_and_prompts(shape, cuda)
    batch, prompt_length = prompts.shape
    static = StaticRollout(model, batch, prompt_length, new_tokens, eos_token_id=-1, pad_token_id=0)

    def ours() -> int:
        out = generate(model, prompts, new_tokens, eos_token_id=-1, pad_token_id=0)
        return int(out["response_mask"].sum())

    def ours_static() -> int:
        return int(static.generate(prompts)["response_mask"].sum())

    def hf(**kwargs) -> int:
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
                **kwargs,
            )
        return (out.shape[1] - prompts.shape[1]) * out.shape[0]

    columns = {
        "rollout.generate": ours,
        "StaticRollout" + (" (CUDA graph)" if cuda else " (eager)"): ours_static,
        "transformers generate()": hf,
    }
    if cuda and compile_column:
        columns["transformers static + compile"] = lambda: hf(cache_implementation="static")

    def rate(fn) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = fn()
        if cuda:
            torch.cuda.synchronize()
        return tokens / (time.perf_counter() - start)

    # Each step is printed as it ends, so a run killed at its time limit still shows how far
    # it got: the warm-up of each column and every repeat's rates.
    columns = warm_up(columns)
    rates = {name: [] for name in columns}
    for repeat in range(repeats):
        for name, fn in columns.items():
            rates[name].append(rate(fn))
        shown = ", ".join(f"{name} {values[-1]:.0f}" for name, values in rates.items())
        print(f"repeat {repeat + 1}: {shown} tokens/s", flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    base = median["transformers generate()"]
    print(
        f"{label} on {'cuda' if cuda else 'cpu'}, {batch} prompts of {prompt_length} tokens "
        f"x {new_tokens} new tokens, {repeats} repeats"
    )
    for name, value in median.items():
        print(f"{name:32s} {value:>10.0f} tokens/s  {value / base:5.2f}x generate()")
    static_name = next((name for name in columns if name.startswith("StaticRollout")), None)
    if static_name is None:
        print("static/transformers tokens/s: none, StaticRollout failed in its warm-up (above)")
    else:
        print(f"static/transformers tokens/s: {median[static_name] / base:.2f}x")
    ratio = median["rollout.generate"] / base
    print(f"ours/transformers tokens/s: {ratio:.2f}x")
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 20")
    parser.add_argument("--repeats", type=int, help="timed repeats of each (default 20)")
    parser.add_argument("--shape", choices=("toy", "real"), default="toy", help="see above")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add transformers' static cache + torch.compile (CUDA)",
    )
    args = parser.parse_args()
    if args.shape == "real" and not torch.cuda.is_available():
        parser.error("--shape real is Qwen2.5-0.5B at 64 x (256 + 512) tokens: it needs a CUDA GPU")
    main(args.repeats or (3 if args.quick else 20), args.shape, args.compile)
