"""The arithmetic of PPO and GRPO for language models, as pure torch functions.

Every function here maps tensors to tensors; none knows about Ray, workers or models.
Shapes follow veRL: a batch of ``B`` responses padded to ``L`` tokens gives tensors of
shape ``[B, L]``, and ``response_mask`` (float or bool, 1 = a token the policy generated)
says which positions count. The module holds:

- masked statistics: ``masked_mean``, ``masked_var``, ``masked_whiten``;
- a response's score on its last token: ``place_score``;
- loss aggregation over tokens and sequences: ``agg_loss``;
- advantages: ``compute_gae_advantage_return`` (GAE, Schulman et al. 2016,
  arXiv:1506.02438) and ``compute_grpo_outcome_advantage`` (GRPO, Shao et al. 2024,
  DeepSeekMath, arXiv:2402.03300);
- the PPO losses: ``compute_policy_loss`` (clipped surrogate, Schulman et al. 2017,
  arXiv:1707.06347) and ``compute_value_loss``;
- KL: ``kl_penalty`` (the k1/k2/k3 estimators of J. Schulman, "Approximating KL
  divergence", 2020) and ``apply_kl_penalty`` (KL subtracted from the reward, Ziegler et
  al. 2019, arXiv:1909.08593);
- per-token quantities from logits: ``entropy_from_logits``, ``logprobs_from_logits``.

Follows veRL 0.9.1's ``verl/trainer/ppo/core_algos.py`` and
``verl/utils/torch_functional.py``, with the same names, argument names and semantics;
``apply_kl_penalty`` follows ``verl/trainer/ppo/ray_trainer.py`` (``apply_kl_penalty``),
which the default trainer imports too. The code is our own.
In veRL 0.9.1 the driver-side functions run in the controller
(``verl/trainer/ppo/v1/trainer_base.py`` (``PPOTrainer._compute_advantage``)) and the losses
in the workers (``verl/workers/utils/losses.py`` (``ppo_loss``, ``value_loss``)).
Deliberate differences: each rank averages over its own tokens, so ``agg_loss`` has no
data-parallel normalisers; ``compute_policy_loss`` is plain
PPO clipping without veRL's dual-clip for negative advantages; ``kl_penalty`` has no
straight-through ``"k3+"``-style modes; and bad input raises ``ValueError`` with a message
instead of an assertion or ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

__all__ = [
    "LOSS_AGG_MODES",
    "KL_PENALTY_MODES",
    "agg_loss",
    "apply_kl_penalty",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_value_loss",
    "entropy_from_logits",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_PENALTY_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _check_same_shape(caller: str, **tensors: torch.Tensor) -> None:
    """Raise ValueError unless all ``tensors`` have one shape (names them if not)."""
    shapes = {name: tuple(tensor.shape) for name, tensor in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(
            f"{caller}: tensors must have the same shape, got {listed}; "
            "pass one value per response token for every argument"
        )


def _check_batch_by_length(caller: str, **tensors: torch.Tensor) -> None:
    """Raise ValueError unless all ``tensors`` are 2-D ``[batch, response_length]`` alike."""
    for name, tensor in tensors.items():
        if tensor.dim() != 2:
            raise ValueError(
                f"{caller}: {name} must be 2-D [batch, response_length], got shape "
                f"{tuple(tensor.shape)}; add or flatten the batch dimension first"
            )
    _check_same_shape(caller, **tensors)


# --------------------------------------------------------------------------------------
# Masked statistics (verl/utils/torch_functional.py)
# --------------------------------------------------------------------------------------


def masked_sum(
    values: torch.Tensor, mask: torch.Tensor, axis: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero.

    Shapes: ``values`` and ``mask`` alike (any shape); ``mask`` float or bool. Returns
    ``values`` reduced over ``axis`` (all dims when None), in ``values``' dtype.
    Equation: sum_i mask_i * values_i.
    Raises ValueError if the shapes differ. Source: veRL ``masked_sum``.
    """
    _check_same_shape("masked_sum", values=values, mask=mask)
    # Padding positions may hold NaN or inf (e.g. a log-prob of a pad token); 0 * NaN is
    # still NaN, so drop them with where() before weighting.
    kept = torch.where(mask.bool(), values, torch.zeros_like(values))
    return (kept * mask).sum(dim=axis)


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, axis: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is non-zero.

    Shapes: ``values`` and ``mask`` alike (any shape); ``mask`` float or bool. Returns
    ``values`` reduced over ``axis`` (a scalar when None).
    Equation: sum_i m_i v_i / (sum_i m_i + 1e-8); an all-zero mask gives 0, not NaN.
    Raises ValueError if the shapes differ. Source: veRL ``masked_mean``.
    """
    # The 1e-8 keeps an empty selection (a fully padded row with axis=-1) finite.
    return masked_sum(values, mask, axis) / (mask.sum(dim=axis) + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over the positions where ``mask`` is non-zero (a scalar).

    Shapes: ``values`` and ``mask`` alike; ``mask`` float or bool.
    Equation: var = masked_mean((v - masked_mean(v))^2) * (n / (n - 1) if unbiased), where
    n = sum(mask).
    Raises ValueError if the shapes differ, if the mask selects nothing, or (unbiased) if it
    selects a single element, since n - 1 = 0. Source: veRL ``masked_var``.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        if count == 0:
            raise ValueError(
                "masked_var: the mask selects no element; check that response_mask marks "
                "the response tokens with 1"
            )
        if count == 1:
            raise ValueError(
                "masked_var: the mask selects one element, so the unbiased variance divides "
                "by zero; use a larger batch or unbiased=False"
            )
        variance = variance * (count / (count - 1))
    return variance


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """Normalise ``values`` by the mean and variance of its masked positions.

    Shapes: ``values`` and ``mask`` alike; returns a tensor shaped like ``values``. All
    positions are transformed; only the statistics are restricted to the mask.
    Equation: (v - mean) / sqrt(var + 1e-8), plus mean again if not ``shift_mean``
    (mean and unbiased var from ``masked_mean`` / ``masked_var``).
    Raises ValueError as ``masked_var`` does. Source: veRL ``masked_whiten``.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


# --------------------------------------------------------------------------------------
# Loss aggregation (verl/trainer/ppo/core_algos.py)
# --------------------------------------------------------------------------------------


def agg_loss(
    loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, L]`` to a scalar.

    Shapes: ``loss_mat`` and ``loss_mask`` ``[B, L]`` alike; ``loss_mask`` float or bool.
    Modes (S = the sequences with at least one real token):
      "token-mean":          sum_{b,t} m l / sum_{b,t} m     (every token weighs the same)
      "seq-mean-token-sum":  mean_{b in S} sum_t m l          (every sequence weighs the same)
      "seq-mean-token-mean": mean_{b in S} (sum_t m l / sum_t m)
    An all-zero mask gives NaN (0 / 0), as in veRL: a loss over no tokens has no value.
    Raises ValueError for a shape mismatch or an unknown ``loss_agg_mode``.
    Source: veRL ``agg_loss`` without its data-parallel arguments (``dp_size``,
    ``batch_num_tokens``, ``global_batch_size``) and without "seq-mean-token-sum-norm".
    """
    _check_same_shape("agg_loss", loss_mat=loss_mat, loss_mask=loss_mask)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"agg_loss: unknown loss_agg_mode {loss_agg_mode!r}; choose one of {LOSS_AGG_MODES}"
        )
    if loss_agg_mode == "token-mean":
        return masked_sum(loss_mat, loss_mask) / loss_mask.sum()
    tokens_per_seq = loss_mask.sum(dim=-1)
    seq_losses = masked_sum(loss_mat, loss_mask, axis=-1)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (tokens_per_seq + 1e-8)
    # A row with no response tokens (e.g. padding added to fill a micro-batch) is not a
    # sequence: counting it would shrink the mean.
    real_seqs = (tokens_per_seq > 0).to(seq_losses.dtype)
    return masked_sum(seq_losses, real_seqs) / real_seqs.sum()


# --------------------------------------------------------------------------------------
# Rewards on tokens
# --------------------------------------------------------------------------------------


def place_score(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One score per response, placed on its last generated token; 0 everywhere else.

    Args:
        scores: ``[B]``, one float per response.
        response_mask: ``[B, L]``, 1 for each generated token (a right-padded response:
            its ones come first).

    Returns:
        ``token_level_scores``, ``[B, L]``, ``scores.dtype``: row ``i`` holds ``scores[i]``
        at index ``response_mask[i].sum() - 1`` (as veRL 0.9.1's reward managers do,
        ``verl/workers/reward_manager/naive.py``).

    Raises:
        ValueError: if the shapes disagree, or a response has no generated token.
    """
    if scores.dim() != 1 or response_mask.dim() != 2 or len(scores) != len(response_mask):
        raise ValueError(
            f"place_score: scores must be [B] and response_mask [B, L], got "
            f"{tuple(scores.shape)} and {tuple(response_mask.shape)}"
        )
    lengths = response_mask.sum(-1).long()
    if (lengths < 1).any():
        raise ValueError("place_score: a response has no generated token (its mask is all 0)")
    token_scores = torch.zeros(response_mask.shape, dtype=scores.dtype)
    token_scores[torch.arange(len(scores)), lengths - 1] = scores
    return token_scores


# --------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation over the response tokens; returns (advantages, returns).

    Shapes: all inputs ``[B, L]`` float (``response_mask`` float or bool); both outputs
    ``[B, L]`` in the dtype of ``values``, computed without autograd.
    Equation, backwards over the real tokens t of each row, t' = the next real token
    (V_{t'} = A_{t'} = 0 past the last one):
      delta_t = r_t + gamma * V_{t'} - V_t ;  A_t = delta_t + gamma * lam * A_{t'}
      returns_t = A_t + V_t (before whitening) ;  advantages = masked_whiten(A, mask).
    Masked positions are skipped: they neither add a TD error nor break the chain, so a
    response with observation tokens in its middle bootstraps across them. Outputs at
    masked positions are filler (the running values carried through); mask them in losses.
    Raises ValueError if the tensors are not 2-D of one shape, or as ``masked_whiten``.
    Source: veRL ``compute_gae_advantage_return``; Schulman et al. 2016, arXiv:1506.02438.
    """
    _check_batch_by_length(
        "compute_gae_advantage_return",
        token_level_rewards=token_level_rewards,
        values=values,
        response_mask=response_mask,
    )
    with torch.no_grad():
        real = response_mask.bool()
        batch_size, response_length = values.shape
        next_value = values.new_zeros(batch_size)
        next_advantage = values.new_zeros(batch_size)
        advantages = torch.zeros_like(values)
        for t in reversed(range(response_length)):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            advantage_t = delta + gamma * lam * next_advantage
            # At a masked position keep the running value and advantage of the next real
            # token, so the real token before the gap bootstraps from the one after it.
            next_value = torch.where(real[:, t], values[:, t], next_value)
            next_advantage = torch.where(real[:, t], advantage_t, next_advantage)
            advantages[:, t] = next_advantage
        # The critic regresses on the un-whitened target; only the policy sees whitened A.
        returns = advantages + values
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


def _group_ids(index: Sequence[Hashable] | np.ndarray | torch.Tensor, batch_size: int) -> list:
    """Turn ``index`` into a list of plain, hashable group ids, one per row."""
    if isinstance(index, (np.ndarray, torch.Tensor)):
        # tolist() gives Python scalars: numpy scalars hash by value already, but 0-d
        # torch tensors hash by identity, which would put every row in its own group.
        ids = index.tolist()
    else:
        ids = list(index)
    if len(ids) != batch_size:
        raise ValueError(
            f"compute_grpo_outcome_advantage: index has {len(ids)} entries but the batch has "
            f"{batch_size} rows; pass one group id (e.g. the prompt's uid) per response"
        )
    return ids


def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's group-relative outcome advantage; returns (advantages, returns), the same tensor.

    Shapes: ``token_level_rewards`` and ``response_mask`` ``[B, L]``; ``index`` a list,
    numpy array or tensor of ``B`` group ids (rows answering the same prompt share one).
    Outputs ``[B, L]`` float, computed without autograd, zero at masked positions.
    Equation, for row i in group g with score s_i = sum_t r_{i,t}:
      A_i = (s_i - mean_g(s)) / (std_g(s) + epsilon)   (std unbiased, as torch.std)
      A_i = s_i - mean_g(s)                            if not norm_adv_by_std_in_grpo
    A group of one row uses mean 0 and std 1 (its raw score), as veRL does. A_i is copied
    to every token of row i and multiplied by the mask.
    Raises ValueError if the tensors are not 2-D of one shape or ``index`` has the wrong
    length. Source: veRL ``compute_grpo_outcome_advantage``; Shao et al. 2024 (DeepSeekMath,
    arXiv:2402.03300); the unnormalised form is Dr. GRPO (Liu et al. 2025, arXiv:2503.20783).
    """
    _check_batch_by_length(
        "compute_grpo_outcome_advantage",
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
    )
    ids = _group_ids(index, token_level_rewards.shape[0])
    rows_of_group: dict[Hashable, list[int]] = {}
    for row, group in enumerate(ids):
        rows_of_group.setdefault(group, []).append(row)

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        group_mean = torch.zeros_like(scores)
        group_std = torch.ones_like(scores)
        for rows in rows_of_group.values():
            # A single response has nothing to be compared with; the zeros/ones set above
            # leave its score as it is.
            if len(rows) > 1:
                group_scores = scores[rows]
                group_mean[rows] = group_scores.mean()
                group_std[rows] = group_scores.std()
        if norm_adv_by_std_in_grpo:
            # epsilon keeps a group whose answers all scored the same at advantage 0.
            per_row = (scores - group_mean) / (group_std + epsilon)
        else:
            per_row = scores - group_mean
        advantages = per_row.unsqueeze(-1) * response_mask
    return advantages, advantages


# --------------------------------------------------------------------------------------
# KL between the policy and the reference model
# --------------------------------------------------------------------------------------


def _kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str) -> torch.Tensor:
    """The body of ``kl_penalty`` (see there); ``apply_kl_penalty`` calls it directly
    because its own argument named ``kl_penalty`` hides the public function."""
    _check_same_shape("kl_penalty", logprob=logprob, ref_logprob=ref_logprob)
    if mode in ("kl", "k1"):
        return logprob - ref_logprob
    if mode == "abs":
        return (logprob - ref_logprob).abs()
    if mode in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if mode in ("low_var_kl", "k3"):
        log_ratio = ref_logprob - logprob
        # exp() of a large log-ratio overflows; veRL bounds the exponent and then the result.
        log_ratio = torch.clamp(log_ratio, min=-20.0, max=20.0)
        k3 = torch.exp(log_ratio) - log_ratio - 1
        return torch.clamp(k3, min=-10.0, max=10.0)
    raise ValueError(f"kl_penalty: unknown mode {mode!r}; choose one of {KL_PENALTY_MODES}")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probabilities.

    Shapes: ``logprob`` (policy) and ``ref_logprob`` (reference) alike, float; returns the
    same shape. With d = logprob - ref_logprob, the ``kl_penalty`` modes are:
      "kl" / "k1":          d                              (unbiased, can be negative)
      "abs":                |d|
      "mse" / "k2":         0.5 * d^2                      (biased, low variance, >= 0)
      "low_var_kl" / "k3":  exp(-d) - (-d) - 1, -d clamped to [-20, 20] and the result to
                            [-10, 10]                      (unbiased before clamping, >= 0)
    Raises ValueError for a shape mismatch or an unknown mode (the message lists the modes).
    Source: veRL ``kl_penalty`` / ``kl_penalty_forward``; J. Schulman, "Approximating KL
    divergence" (2020), http://joschu.net/blog/kl-approx.html.
    """
    return _kl_estimate(logprob, ref_logprob, kl_penalty)


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract a KL penalty from the token rewards; returns (token_level_rewards, metrics).

    Shapes: all tensors ``[B, L]`` (``response_mask`` float or bool); ``token_level_rewards``
    ``[B, L]`` float. Equation, with kl_t the ``kl_penalty`` estimate times the mask:
      token_level_rewards_t = token_level_scores_t - kl_coef * kl_t
    metrics = {"actor/reward_kl_penalty": mean over rows of the row's masked mean of kl,
               "actor/reward_kl_penalty_coeff": kl_coef}, as Python floats.
    This is the "KL in the reward" form of RLHF-PPO; GRPO instead puts KL in the loss.
    Raises ValueError if the tensors are not 2-D of one shape or the mode is unknown.
    Source: veRL ``ray_trainer.apply_kl_penalty`` with a fixed coefficient (no adaptive
    controller), taking and returning tensors instead of a DataProto; Ziegler et al. 2019.
    """
    _check_batch_by_length(
        "apply_kl_penalty",
        token_level_scores=token_level_scores,
        old_log_prob=old_log_prob,
        ref_log_prob=ref_log_prob,
        response_mask=response_mask,
    )
    kl = _kl_estimate(old_log_prob, ref_log_prob, kl_penalty) * response_mask
    token_level_rewards = token_level_scores - kl_coef * kl
    # Mean per sequence first, so a long response does not outweigh a short one.
    current_kl = masked_mean(kl, response_mask, axis=-1).mean().item()
    metrics = {
        "actor/reward_kl_penalty": current_kl,
        "actor/reward_kl_penalty_coeff": float(kl_coef),
    }
    return token_level_rewards, metrics


# --------------------------------------------------------------------------------------
# PPO losses
# --------------------------------------------------------------------------------------


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float = 0.2,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate loss; returns (pg_loss, pg_clipfrac, ppo_kl), three scalars.

    Shapes: all tensors ``[B, L]`` alike; ``log_prob`` carries the gradient.
    Equation, with ratio = exp(clamp(log_prob - old_log_prob, -20, 20)) and eps = cliprange:
      per-token loss = max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))
      pg_loss = agg_loss(per-token loss, mask, loss_agg_mode)
      pg_clipfrac = masked mean of [clipped term > unclipped term] (the clip is active and
                    the token's gradient is zero)
      ppo_kl = masked mean of (old_log_prob - log_prob), a k1 estimate of KL(old || new)
    Raises ValueError for a shape mismatch, a negative cliprange, or an unknown mode.
    Source: veRL ``compute_policy_loss`` (the deprecated form of
    ``compute_policy_loss_vanilla``) without dual-clip: veRL also bounds the loss of tokens
    with A < 0 by -A * clip_ratio_c (3.0), which changes tokens whose ratio exceeds ~3.
    Schulman et al. 2017, arXiv:1707.06347.
    """
    _check_same_shape(
        "compute_policy_loss",
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
    )
    if cliprange < 0:
        raise ValueError(f"compute_policy_loss: cliprange must be >= 0, got {cliprange}")
    # A token whose probability moved by e^20 is already an outlier; bounding the exponent
    # keeps one such token from producing inf and NaN gradients for the whole batch.
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)

    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    # The max makes the objective pessimistic: moving the ratio past the clip can only
    # stop helping, never make the loss look better.
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)
    pg_clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    return pg_loss, pg_clipfrac, ppo_kl


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss; returns (vf_loss, vf_clipfrac), two scalars.

    Shapes: all tensors ``[B, L]`` alike. ``vpreds`` are the critic's current predictions
    (with gradient), ``values`` the predictions at rollout time, ``returns`` the targets.
    Equation, with v_clip = clip(vpreds, values - cliprange_value, values + cliprange_value):
      vf_loss = 0.5 * agg_loss(max((vpreds - returns)^2, (v_clip - returns)^2), mask)
      vf_clipfrac = masked mean of [(v_clip - returns)^2 > (vpreds - returns)^2]
    Raises ValueError for a shape mismatch, a negative cliprange_value, or an unknown mode.
    Source: veRL ``compute_value_loss``; the clipping follows OpenAI baselines' PPO2.
    """
    _check_same_shape(
        "compute_value_loss",
        vpreds=vpreds,
        returns=returns,
        values=values,
        response_mask=response_mask,
    )
    if cliprange_value < 0:
        raise ValueError(f"compute_value_loss: cliprange_value must be >= 0, got {cliprange_value}")
    vpreds_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (vpreds_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        torch.maximum(loss_unclipped, loss_clipped), response_mask, loss_agg_mode
    )
    vf_clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


# --------------------------------------------------------------------------------------
# Per-token quantities from logits (verl/utils/torch_functional.py)
# --------------------------------------------------------------------------------------


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution at each position.

    Shapes: ``logits`` ``[..., V]`` (typically ``[B, L, V]``), float; returns ``[...]``
    (``[B, L]``). Equation: H = logsumexp(z) - sum_v softmax(z)_v * z_v, which equals
    -sum_v p_v log p_v without ever taking log of a probability that underflowed to 0.
    Raises nothing of its own. Source: veRL ``entropy_from_logits``.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label under the softmax of its logits.

    Shapes: ``logits`` ``[..., V]`` float (typically ``[B, L, V]``), ``labels`` integer
    ``[...]`` (``[B, L]``); returns ``[...]`` in the dtype of ``logits``.
    Equation: log p(y) = z_y - logsumexp(z), computed as log_softmax then gather.
    Raises ValueError if ``labels`` is not integer or its shape is not ``logits.shape[:-1]``.
    Source: veRL ``logprobs_from_logits`` (its plain-torch path; no flash-attn or NPU kernel).
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"logprobs_from_logits: labels shape {tuple(labels.shape)} must equal logits shape "
            f"without the vocab dim, {tuple(logits.shape[:-1])}; for next-token log-probs "
            "shift with logits[:, :-1] and labels[:, 1:]"
        )
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(
            f"logprobs_from_logits: labels must be integer token ids, got dtype {labels.dtype}"
        )
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(dim=-1, index=labels.unsqueeze(-1).long()).squeeze(-1)
