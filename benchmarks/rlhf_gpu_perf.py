"""The actor update at a real RLHF shape: what removing padding and token budgets buy.

    python benchmarks/rlhf_gpu_perf.py [--shape qwen2.5-0.5b] [--device cuda] [--out DIR]
    python benchmarks/rlhf_gpu_perf.py --shape tiny --device cpu      (a check on a laptop)

The ``gpu`` preset trains on 8-token sequences, far from real RLHF. This script measures
one optimiser step of ``ActorRolloutRefWorker.update_actor``'s loss code
(``reference_impl/rlhf/workers.py`` (``micro_batches``, ``actor_loss``)) at the shape of a
real run: Qwen2.5-0.5B exactly, its 151,936-token vocabulary included, randomly initialised
(nothing downloads), FSDP2 on one device, fused AdamW, on a mini-batch of 64 responses
whose prompts are 64 to 512 tokens and responses 128 to 1,024 tokens, drawn uniformly
(with ``--seed``). It does not learn anything; the advantages are random.

Three ways to lay out the same mini-batch, each on a fresh model with the same weights,
one after another in this process (compare them only within one run):

* ``padded``: micro-batches of ``--micro-rows`` rows, each a padded rectangle
  (veRL's ``ppo_micro_batch_size_per_gpu`` with ``use_remove_padding=False``);
* ``packed``: the same rows, padding removed (``use_remove_padding``;
  ``reference_impl/rlhf/packing.py``);
* ``packed+budget``: padding removed and micro-batches of at most ``--max-tokens`` valid
  tokens, balanced by length (``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``).

For each: the median wall time of an optimiser step, the first step's loss (the same for
all three up to rounding: they compute one loss), MFU at wall time with veRL's FLOPs
formula (``reference_impl/rlhf/metrics.py`` (``train_flops``), which counts the
embedding and LM head), the share of the step the GPU spent in kernels (``torch.profiler``),
and the peak GPU memory. ``--out DIR`` writes ``gpu_perf.json`` with all of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from reference_impl.data_proto import DataProto
from reference_impl.rlhf import engine
from reference_impl.rlhf.config import make_config
from reference_impl.rlhf.metrics import device_peak_flops, train_flops
from reference_impl.rlhf.model import (
    QWEN25_05B,
    QWEN25_05B_VOCAB,
    ModelShape,
    build_actor,
    qwen2_config,
)
from reference_impl.rlhf.packing import response_log_probs_packed
from reference_impl.rlhf.rollout import response_log_probs
from reference_impl.rlhf.workers import actor_loss, make_optimizer, micro_batches

# (model shape, vocabulary, prompt lengths, response lengths, responses per mini-batch)
SHAPES = {
    "qwen2.5-0.5b": (QWEN25_05B, QWEN25_05B_VOCAB, (64, 512), (128, 1024), 64),
    # A check that the script runs, on a laptop's CPU in seconds: nothing like real use.
    "tiny": (ModelShape(64, 2, 4, 2, 128, max_position_embeddings=256), 512, (4, 16), (8, 32), 8),
}
LAYOUTS = {
    "padded": {"use_remove_padding": False, "use_dynamic_bsz": False},
    "packed": {"use_remove_padding": True, "use_dynamic_bsz": False},
    "packed+budget": {"use_remove_padding": True, "use_dynamic_bsz": True},
}


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def kernel_seconds(prof) -> float:
    """Seconds the device spent in kernels and copies under ``prof`` (0 on CPU)."""
    return sum(e.device_time for e in prof.events() if e.device_type == DeviceType.CUDA) / 1e6


def rollout_batch(vocab: int, prompts: tuple, responses: tuple, rows: int, seed: int):
    """A mini-batch as ``update_actor`` receives it, of random tokens and lengths.

    Prompts are left-padded to the longest possible prompt, responses right-padded to the
    longest possible response, as ``rollout.generate`` lays them out.
    """
    g = torch.Generator().manual_seed(seed)
    p_max, r_max = prompts[1], responses[1]
    p_len = torch.randint(prompts[0], prompts[1] + 1, (rows,), generator=g)
    r_len = torch.randint(responses[0], responses[1] + 1, (rows,), generator=g)
    ids = torch.randint(1, vocab, (rows, p_max + r_max), generator=g)
    cols = torch.arange(p_max + r_max)
    attention_mask = ((cols >= p_max - p_len[:, None]) & (cols < p_max + r_len[:, None])).long()
    ids = ids * attention_mask
    response_mask = attention_mask[:, p_max:].float()
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "responses": ids[:, p_max:],
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(response_mask.shape, generator=g) * 3,
            "advantages": torch.randn(response_mask.shape, generator=g),
        }
    )


def measure(layout: str, args, shape, vocab, batch: DataProto) -> dict:
    """Time ``args.steps`` optimiser steps of one layout on a fresh model."""
    device = args.device
    config = make_config(
        "grpo",
        "gpu" if device == "cuda" else "cpu",
        device=device,
        use_kl_loss=False,  # no reference model: the update's own cost is what we measure
        ppo_micro_batch_size_per_gpu=args.micro_rows,
        ppo_max_token_len_per_gpu=args.max_tokens,
        **LAYOUTS[layout],
    )
    model_config = qwen2_config(shape, vocab, pad_token_id=0, bos=1, eos=2)
    actor = engine.shard(build_actor(model_config, seed=0).to(device), device)
    optimizer = make_optimizer(actor, config.actor_lr)
    data = batch.to(device)
    r = data.batch["responses"].shape[1]
    parts = micro_batches(data, config)

    def step() -> float:
        optimizer.zero_grad()
        total = torch.zeros((), device=device)
        for part in parts:
            b = part.batch
            if config.use_remove_padding:
                log_prob, entropy = response_log_probs_packed(
                    actor, b["input_ids"], b["attention_mask"], r, with_entropy=True
                )
            else:
                log_prob, entropy = response_log_probs(
                    actor,
                    b["input_ids"],
                    b["attention_mask"],
                    b["position_ids"],
                    r,
                    with_entropy=True,
                )
            loss, _ = actor_loss(log_prob, entropy, b, data.batch, config)
            loss.backward()
            total += loss.detach()
        engine.clip_grad_norm(actor, config.grad_clip)
        optimizer.step()
        return float(total)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    first_loss = step()  # also the warm-up: allocation, kernel selection
    times = []
    for _ in range(args.steps):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        synchronize(device)
    wall = statistics.median(times)
    lengths = data.batch["attention_mask"].sum(-1).cpu()
    flops = train_flops(shape, lengths, vocab)
    peak = device_peak_flops(device)
    result = {
        "layout": layout,
        "micro_batches": len(parts),
        "micro_batch_tokens": [int(p.batch["attention_mask"].sum()) for p in parts],
        "first_loss": first_loss,
        "step_s": wall,
        "step_s_all": times,
        "mfu": flops / wall / peak,
        "kernel_share": kernel_seconds(prof) / wall if device == "cuda" else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "tokens_per_s": float(lengths.sum()) / wall,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=5, help="timed optimiser steps per layout")
    parser.add_argument("--micro-rows", type=int, default=4, help="rows per padded micro-batch")
    parser.add_argument("--max-tokens", type=int, default=16384, help="token budget")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write gpu_perf.json here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA: torch.cuda.is_available() is False on this machine; nothing to run")
        return 0
    shape, vocab, prompts, responses, rows = SHAPES[args.shape]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29534"))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)
    if args.device == "cuda":
        torch.cuda.set_device(0)
    batch = rollout_batch(vocab, prompts, responses, rows, args.seed)
    mask = batch.batch["attention_mask"]
    print(
        f"shape {args.shape}: {rows} responses, {int(mask.sum())} valid tokens in a "
        f"{mask.shape[0]} x {mask.shape[1]} rectangle ({mask.float().mean():.0%} of it)"
    )
    results = []
    for layout in args.layouts.split(","):
        result = measure(layout, args, shape, vocab, batch)
        if args.device == "cuda":  # the layout's model and optimiser went with measure()
            torch.cuda.empty_cache()
        results.append(result)
        share = result["kernel_share"]
        memory = result["peak_memory_gib"]
        print(
            f"{layout:>14}: {result['micro_batches']:>2} micro-batches, step "
            f"{result['step_s'] * 1e3:8.1f} ms, MFU {result['mfu']:.3f}, "
            f"{result['tokens_per_s']:9.0f} tokens/s"
            + (f", kernels {share:.0%}" if share is not None else "")
            + (f", peak {memory:.1f} GiB" if memory is not None else "")
            + f", first loss {result['first_loss']:.6f}"
        )
    dist.destroy_process_group()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "shape": args.shape,
            "device": torch.cuda.get_device_name()
            if args.device == "cuda"
            else platform.processor(),
            "torch": torch.__version__,
            "args": {k: str(v) for k, v in vars(args).items()},
            "valid_tokens": int(mask.sum()),
            "rectangle": list(mask.shape),
            "results": results,
        }
        (args.out / "gpu_perf.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
