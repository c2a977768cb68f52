"""Where the gpu preset's actor update and rollout spend their time: GPU kernels or the CPU.

    python benchmarks/rlhf_gpu_costs.py [--preset gpu] [--device cuda] [--steps 10]

The learning run's ``perf/mfu/actor`` and the rollout's tokens/s are far below what the GPU
can do. This script measures why, in one process (no Ray; the same model, FSDP2 wrapping,
fused AdamW and batch shapes as the ``gpu`` preset's actor update and rollout):

* **update**: one optimiser step on a mini-batch of ``ppo_mini_batch_size * n`` responses
  (64), as ``ActorRolloutRefWorker.update_actor`` takes it
  (``reference_impl/rlhf/workers.py``): forward to response log-probs and a loss,
  backward, gradient clipping, the optimiser step. Each phase is timed with the device
  synchronised around it (median of ``--steps``);
* **rollout**: ``reference_impl.rlhf.rollout.generate`` on 256 prompts, 64 new tokens;
* for both, ``torch.profiler`` over further steps gives the time the GPU spent running
  kernels. Wall time minus kernel time is time the GPU waited for the CPU to launch work
  (Python, transformers' and FSDP2's code, DTensor dispatch, kernel launches).

Prints one line per measurement and the model FLOPs utilisation that the update's wall time
and kernel time imply (FLOPs: ``reference_impl/rlhf/metrics.py`` (``train_flops``)).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from reference_impl.rlhf import engine
from reference_impl.rlhf.config import make_config
from reference_impl.rlhf.metrics import device_peak_flops, train_flops
from reference_impl.rlhf.model import build_actor, qwen2_config
from reference_impl.rlhf.rollout import generate, response_log_probs
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer
from reference_impl.rlhf.workers import make_optimizer


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def kernel_seconds(prof) -> float:
    """Seconds of device time spent in kernels and copies under ``prof`` (0 on CPU).

    Only the device's own events (kernels, memcpy, memset) count, so time is not counted
    twice through the CPU operators that launched them.
    """
    total_us = 0.0
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            total_us += event.device_time
    return total_us / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=10, help="timed repeats of each")
    args = parser.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA: torch.cuda.is_available() is False on this machine; nothing to run")
        return 0
    config = make_config("grpo", args.preset, device=device)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    if device == "cuda":
        torch.cuda.set_device(0)
    tok = CharTokenizer()
    model_config = qwen2_config(
        config.model_shape, tok.vocab_size, tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    )
    actor = engine.shard(build_actor(model_config, seed=0).to(device), device)
    optimizer = make_optimizer(actor, config.actor_lr)
    rollout_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rollout_model = build_actor(model_config, seed=0, dtype=rollout_dtype).to(device).eval()
    gen = torch.Generator(device="cpu").manual_seed(0)

    # One mini-batch as update_actor gets it: prompts with sampled responses.
    rows = config.mini_batch_rows_per_rank
    prompts, _ = DigitSumTask(config.num_digits).make_prompts(tok, rows, gen)
    out = generate(
        rollout_model, prompts.to(device), config.max_new_tokens, tok.eos_token_id, tok.pad_token_id
    )
    response_length = out["responses"].shape[1]
    mask = out["response_mask"].float()

    phases = {"forward": [], "backward": [], "clip": [], "optimizer": [], "total": []}

    def update_step(timed: bool) -> None:
        marks = [time.perf_counter()]

        def mark() -> None:
            if timed:
                synchronize(device)
            marks.append(time.perf_counter())

        log_prob = response_log_probs(
            actor, out["input_ids"], out["attention_mask"], out["position_ids"], response_length
        )
        loss = -(log_prob * mask).sum() / mask.sum()
        mark()
        optimizer.zero_grad()
        loss.backward()
        mark()
        engine.clip_grad_norm(actor, config.grad_clip)
        mark()
        optimizer.step()
        mark()
        if timed:
            names = ("forward", "backward", "clip", "optimizer")
            for name, a, b in zip(names, marks[:-1], marks[1:], strict=True):
                phases[name].append(b - a)
            phases["total"].append(marks[-1] - marks[0])

    for _ in range(3):  # warm-up: allocation, kernel selection
        update_step(timed=False)
    synchronize(device)
    for _ in range(args.steps):
        update_step(timed=True)
    median = {k: statistics.median(v) for k, v in phases.items()}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    synchronize(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            update_step(timed=False)
        synchronize(device)
    wall = (time.perf_counter() - start) / args.steps
    busy = kernel_seconds(prof) / args.steps
    lengths = out["attention_mask"].sum(-1)
    flops = train_flops(config.model_shape, lengths.cpu(), tok.vocab_size)
    peak = device_peak_flops(device)
    tokens = int(lengths.sum())
    print(
        f"update: one optimiser step on {rows} responses ({tokens} tokens): "
        f"{median['total'] * 1e3:.1f} ms (forward {median['forward'] * 1e3:.1f}, backward "
        f"{median['backward'] * 1e3:.1f}, clip {median['clip'] * 1e3:.1f}, optimizer "
        f"{median['optimizer'] * 1e3:.1f}); under the profiler {wall * 1e3:.1f} ms, of which "
        f"GPU kernels {busy * 1e3:.1f} ms ({busy / wall:.0%})"
    )
    print(
        f"update MFU: {flops / median['total'] / peak:.4f} at wall time; "
        f"{flops / busy / peak:.4f} if the GPU ran only the kernels"
        if busy
        else "update MFU: n/a"
    )

    batch, new_tokens = 256, 64
    gen_prompts, _ = DigitSumTask(config.num_digits).make_prompts(tok, batch, gen)
    gen_prompts = gen_prompts.to(device)

    def rollout() -> None:
        generate(rollout_model, gen_prompts, new_tokens, eos_token_id=-1, pad_token_id=0)

    rollout()
    times = []
    for _ in range(max(args.steps // 2, 2)):
        synchronize(device)
        start = time.perf_counter()
        rollout()
        synchronize(device)
        times.append(time.perf_counter() - start)
    with profile(activities=activities) as prof:
        rollout()
        synchronize(device)
    per_token = statistics.median(times) / new_tokens
    busy = kernel_seconds(prof) / new_tokens
    print(
        f"rollout: {batch} prompts x {new_tokens} tokens: {per_token * 1e3:.2f} ms per decode "
        f"step ({batch / per_token:.0f} tokens/s); GPU kernels {busy * 1e3:.2f} ms of it "
        f"({busy / per_token:.0%})"
    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
