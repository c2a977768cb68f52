"""Per-step metrics under veRL's names, the FLOPs formula behind MFU, and where metrics go.

Names follow veRL 0.9.1's ``verl/trainer/ppo/metric_utils.py``
(``compute_data_metrics``, ``compute_throughout_metrics``): ``critic/score/mean`` is
the mean task score, ``response_length/mean`` the mean number of generated tokens,
``timing_s/<stage>`` the seconds each stage of the step took, ``perf/throughput``
the tokens (prompt + response) processed per second per worker. Some names are ours:
``timing_s/weight_sync``, the all-gather into the in-process rollout model inside
``timing_s/gen`` (veRL 0.9.1 times its weight transfer to the rollout servers as
``timing_s/update_weights``, at the end of the step:
``verl/trainer/ppo/v1/trainer_sync.py`` (``PPOTrainerSync.on_step_end``)), and the task's
diagnostics of :func:`score_metrics`; the full list is on ``docs/rlhf/index.md#metrics``.

MFU. A training step of a decoder with ``N`` non-embedding parameters costs
about ``6 N`` FLOPs per token (2 forward, 4 backward; Kaplan et al. 2020), plus
attention's ``6 * L_layers * d_attn * s`` per token for a sequence of ``s``
tokens (the score and value products; ``d_attn = heads * head_dim``), and the embedding
and LM head, ``2 V h`` more parameters per token for a vocabulary of ``V``, all as
``verl/utils/flops_counter.py`` (``_estimate_qwen2_flops``) counts it. (The LM head is a real
``[h, V]`` matmul, 28% of Qwen2.5-0.5B's matmul FLOPs; the embedding is a lookup, which
veRL's formula counts as a matmul too: 43% of what the formula counts at that shape.)
``perf/mfu/actor`` is the FLOPs of the actor update (all PPO epochs) divided by
``timing_s/update_actor`` and by the peak FLOP/s of the workers: the vendor's dense
bf16 peak on known GPUs, and on CPU a peak measured with a large matmul in each worker.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch

from reference_impl.rlhf.model import ModelShape

# Dense bf16 peak FLOP/s (vendor data sheets), as in get_device_flops of
# verl/utils/flops_counter.py.
GPU_PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}


def measure_cpu_peak_flops(size: int = 512, seconds: float = 0.3) -> float:
    """FLOP/s of fp32 ``size x size`` matmuls in this process (its thread settings apply)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        done += 1
    return 2 * size**3 * done / (time.perf_counter() - start)


def device_peak_flops(device: str) -> float:
    """Peak FLOP/s of this process's device: a data-sheet figure on GPU, measured on CPU."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for key, flops in GPU_PEAK_FLOPS.items():
            if key in name:
                return flops
        return float("inf")  # unknown GPU: report MFU 0 rather than a made-up figure
    return measure_cpu_peak_flops()


def train_flops(shape: ModelShape, sequence_lengths: torch.Tensor, vocab_size: int) -> float:
    """FLOPs of one forward + backward pass over sequences of the given lengths (int [b]).

    ``vocab_size`` adds the embedding and the LM head, ``2 * vocab_size * hidden`` weights.
    """
    h, heads, kv = shape.hidden_size, shape.num_attention_heads, shape.num_key_value_heads
    head_dim = h // heads
    attn_linear = h * (heads * head_dim + 2 * kv * head_dim) + heads * head_dim * h
    mlp = 3 * h * shape.intermediate_size
    dense = (attn_linear + mlp) * shape.num_hidden_layers + 2 * vocab_size * h
    tokens = float(sequence_lengths.sum())
    squares = float((sequence_lengths.float() ** 2).sum())
    return 6 * dense * tokens + 6 * squares * head_dim * heads * shape.num_hidden_layers


class MetricsLog:
    """Writes each step's metrics to ``metrics.jsonl`` (one JSON object per line) and TensorBoard.

    On resume, lines after the checkpointed step are dropped, so the file holds
    one trajectory.
    """

    def __init__(self, output_dir: str, tensorboard: bool, resume_step: int | None = None):
        self.path = os.path.join(output_dir, "metrics.jsonl")
        os.makedirs(output_dir, exist_ok=True)
        if resume_step is not None and os.path.exists(self.path):
            rows = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            with open(self.path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        elif os.path.exists(self.path):
            os.remove(self.path)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(os.path.join(output_dir, "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.writer is not None:
            for name, value in metrics.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def score_metrics(
    scores: torch.Tensor, exact: torch.Tensor, targets: torch.Tensor, uid
) -> dict[str, float]:
    """Why a GRPO step learns little: groups with nothing to compare, and targets not yet solved.

    Args:
        scores: float [B], each response's task score.
        exact: bool [B], whether the response's digits sum to its target exactly.
        targets: int64 [B], each response's target.
        uid: [B] array, one id per prompt: a prompt's ``n`` responses share it.

    Returns:
        ``reward/zero_variance_groups``: the fraction of prompts whose responses all scored
        the same (among prompts with more than one response; absent when there are none),
        so that their GRPO advantages (score minus the group's mean) are all 0 and they add
        nothing to the policy gradient; ``reward/exact_match/target_<T>``: exact match among
        the responses to prompts with target ``T``, for each ``T`` in the batch.
        Both are ours; veRL 0.9.1 logs neither.
    """
    _, group = np.unique(np.asarray(uid), return_inverse=True)
    group = torch.as_tensor(group.reshape(-1))
    count = int(group.max()) + 1
    scores = scores.float()
    lowest = torch.full((count,), float("inf")).scatter_reduce(0, group, scores, "amin")
    highest = torch.full((count,), float("-inf")).scatter_reduce(0, group, scores, "amax")
    metrics = {}
    several = torch.bincount(group, minlength=count) > 1  # PPO's n = 1: nothing to compare
    if several.any():
        same = (lowest == highest)[several]
        metrics["reward/zero_variance_groups"] = same.float().mean().item()
    for target in torch.unique(targets).tolist():
        hits = exact[targets == target].float().mean().item()
        metrics[f"reward/exact_match/target_{target}"] = hits
    return metrics


def read_metrics(path: str) -> list[dict]:
    """The rows of a ``metrics.jsonl``, in order.

    Raises:
        ValueError: a line is not JSON (often the last one, cut short by a killed run);
            the message names the file and the line.
    """
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{path}, line {number}, is not JSON ({err}): {line[:60]!r}. A run killed "
                    "while writing leaves a partial last line; delete that line and resume again"
                ) from err
    return rows
