"""Tests for reference_impl.rlhf.core_algos: PPO / GRPO arithmetic checked against hand
examples and straightforward reference loops (no Ray)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reference_impl.rlhf.core_algos import (
    agg_loss,
    apply_kl_penalty,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    place_score,
)

pytestmark = pytest.mark.reads_docs()

DTYPE = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=DTYPE)


def ragged_mask(batch: int, length: int, seed: int) -> torch.Tensor:
    """Rows of different lengths (right padding), some with holes (observation tokens)."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, length, generator=g) < 0.75).to(DTYPE)
    mask[:, 0] = 1.0
    for row in range(batch):
        end = int(torch.randint(1, length + 1, (1,), generator=g))
        mask[row, end:] = 0.0
    mask[0] = 1.0  # one full-length row
    mask[1, 1:] = 0.0  # one single-token row
    return mask


# ------------------------------------------------------------------ masked statistics


def test_place_score_puts_each_score_on_its_last_generated_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    scores = torch.tensor([2.0, -1.0, 0.5])
    expected = torch.tensor([[0.0, 0.0, 2.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]])
    assert torch.equal(place_score(scores, mask), expected)
    assert torch.equal(place_score(scores, mask.bool()), expected)
    with pytest.raises(ValueError, match="no generated token"):
        place_score(scores, torch.tensor([[1, 0], [0, 0], [1, 1]]))
    with pytest.raises(ValueError, match=r"scores must be \[B\]"):
        place_score(scores[:2], mask)


def test_masked_mean_ignores_masked_positions_even_nan():
    values = t([[1.0, 2.0, float("nan")], [4.0, 100.0, 6.0]])
    mask = t([[1, 1, 0], [1, 0, 1]])
    assert masked_mean(values, mask).item() == pytest.approx((1 + 2 + 4 + 6) / 4)
    torch.testing.assert_close(masked_mean(values, mask, axis=-1), t([1.5, 5.0]))
    # A fully masked row gives 0 rather than NaN.
    assert masked_mean(values, torch.zeros_like(mask), axis=-1).tolist() == [0.0, 0.0]


def test_masked_var_matches_torch_var_on_selected_elements():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 7, generator=g, dtype=DTYPE)
    mask = ragged_mask(4, 7, seed=1)
    selected = values[mask.bool()]
    torch.testing.assert_close(masked_var(values, mask), selected.var(unbiased=True))
    torch.testing.assert_close(
        masked_var(values, mask, unbiased=False), selected.var(unbiased=False)
    )
    # bool masks behave like float masks
    torch.testing.assert_close(masked_var(values, mask.bool()), selected.var())


def test_masked_var_rejects_zero_or_one_selected_element():
    values = t([[1.0, 2.0]])
    with pytest.raises(ValueError, match="selects no element"):
        masked_var(values, t([[0, 0]]))
    with pytest.raises(ValueError, match="unbiased=False"):
        masked_var(values, t([[1, 0]]))
    assert masked_var(values, t([[1, 0]]), unbiased=False).item() == pytest.approx(0.0, abs=1e-12)


def test_masked_whiten_zero_mean_unit_var_and_shift_mean_false():
    g = torch.Generator().manual_seed(2)
    values = 3.0 + 5.0 * torch.randn(3, 6, generator=g, dtype=DTYPE)
    mask = ragged_mask(3, 6, seed=3)
    white = masked_whiten(values, mask)
    # masked_mean divides by (count + 1e-8), so "zero" is only zero to about 1e-8.
    assert masked_mean(white, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert masked_var(white, mask).item() == pytest.approx(1.0, abs=1e-6)
    kept = masked_whiten(values, mask, shift_mean=False)
    torch.testing.assert_close(kept, white + masked_mean(values, mask))


# ------------------------------------------------------------------ agg_loss


def test_agg_loss_modes_on_hand_example():
    # Row 0: 3 tokens (1, 2, 3); row 1: 1 token (4); row 2: fully masked, must not count.
    loss_mat = t([[1.0, 2.0, 3.0], [4.0, 50.0, 60.0], [9.0, 9.0, 9.0]])
    loss_mask = t([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert agg_loss(loss_mat, loss_mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss_mat, loss_mask, "seq-mean-token-sum").item() == pytest.approx(10 / 2)
    assert agg_loss(loss_mat, loss_mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert agg_loss(loss_mat, loss_mask).item() == pytest.approx(2.5)  # default is token-mean


def test_agg_loss_rejects_unknown_mode_and_shape_mismatch():
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'seq-sum'.*token-mean"):
        agg_loss(t([[1.0]]), t([[1.0]]), "seq-sum")
    with pytest.raises(ValueError, match=r"loss_mat \(1, 2\), loss_mask \(1, 3\)"):
        agg_loss(t([[1.0, 2.0]]), t([[1, 1, 1]]))


# ------------------------------------------------------------------ GAE


def gae_reference(rewards, values, mask, gamma, lam):
    """Per row, walk the real tokens backwards; the 'next' token is the next real one."""
    batch, length = rewards.shape
    advantages = torch.zeros(batch, length, dtype=DTYPE)
    returns = torch.zeros(batch, length, dtype=DTYPE)
    for b in range(batch):
        next_value, next_advantage = 0.0, 0.0
        for i in reversed([i for i in range(length) if mask[b, i] > 0]):
            delta = rewards[b, i].item() + gamma * next_value - values[b, i].item()
            advantage = delta + gamma * lam * next_advantage
            advantages[b, i] = advantage
            returns[b, i] = advantage + values[b, i].item()
            next_value, next_advantage = values[b, i].item(), advantage
    return advantages, returns


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.9, 0.0), (1.0, 0.5)])
def test_gae_matches_reference_loop_on_ragged_masks(gamma, lam):
    g = torch.Generator().manual_seed(4)
    batch, length = 6, 9
    rewards = torch.randn(batch, length, generator=g, dtype=DTYPE)
    values = torch.randn(batch, length, generator=g, dtype=DTYPE)
    mask = ragged_mask(batch, length, seed=5)
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = gae_reference(rewards, values, mask, gamma, lam)

    real = mask.bool()
    torch.testing.assert_close(returns[real], ref_ret[real])
    # Advantages are the reference ones whitened over the real tokens (unbiased variance).
    raw = ref_adv[real]
    expected = (raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)
    torch.testing.assert_close(advantages[real], expected)
    assert masked_mean(advantages, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert masked_var(advantages, mask).item() == pytest.approx(1.0, abs=1e-6)


def test_gae_with_gamma_lam_one_is_reward_to_go_minus_value():
    rewards = t([[0.0, 0.0, 1.0, 0.0], [0.5, -1.0, 2.0, 7.0]])
    values = t([[0.2, 0.4, 0.6, 9.0], [1.0, 2.0, 3.0, 4.0]])
    mask = t([[1, 1, 1, 0], [1, 1, 1, 1]])
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    # Reward-to-go over the real tokens: row 0 ignores its masked reward slot.
    torch.testing.assert_close(returns[0, :3], t([1.0, 1.0, 1.0]))
    torch.testing.assert_close(returns[1], t([8.5, 8.0, 9.0, 7.0]))
    raw = t([0.8, 0.6, 0.4, 7.5, 6.0, 6.0, 3.0])  # reward-to-go minus value, real tokens
    torch.testing.assert_close((returns - values)[mask.bool()], raw)
    expected = (raw - raw.mean()) / torch.sqrt(raw.var() + 1e-8)
    torch.testing.assert_close(advantages[mask.bool()], expected)


def test_gae_bool_mask_equals_float_mask_and_no_grad():
    g = torch.Generator().manual_seed(6)
    rewards = torch.randn(3, 5, generator=g, dtype=DTYPE)
    values = torch.randn(3, 5, generator=g, dtype=DTYPE, requires_grad=True)
    mask = ragged_mask(3, 5, seed=7)
    adv_f, ret_f = compute_gae_advantage_return(rewards, values, mask, 0.99, 0.95)
    adv_b, ret_b = compute_gae_advantage_return(rewards, values, mask.bool(), 0.99, 0.95)
    torch.testing.assert_close(adv_f, adv_b)
    torch.testing.assert_close(ret_f, ret_b)
    assert not adv_f.requires_grad and not ret_f.requires_grad


def test_gae_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        compute_gae_advantage_return(t([1.0, 2.0]), t([1.0, 2.0]), t([1, 1]), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"values \(1, 3\)"):
        compute_gae_advantage_return(t([[1.0, 2.0]]), t([[1.0, 2.0, 3.0]]), t([[1, 1]]), 1.0, 1.0)


# ------------------------------------------------------------------ GRPO


def grpo_example():
    """Two groups: 'a' scores (1, 0); 'b' scores (0, 2, 4), row 3 split over two tokens."""
    rewards = t(
        [
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [1.0, 1.0, 0.0],
            [0.0, 0.0, 4.0],
        ]
    )
    mask = t([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    return rewards, mask


@pytest.mark.parametrize(
    "index",
    [["a", "a", "b", "b", "b"], np.array(["a", "a", "b", "b", "b"], dtype=object)],
    ids=["list", "numpy-object"],
)
def test_grpo_two_groups_by_hand(index):
    rewards, mask = grpo_example()
    advantages, returns = compute_grpo_outcome_advantage(rewards, mask, index)
    # Group a: mean 0.5, unbiased std sqrt(0.5) -> +-0.5 / sqrt(0.5) = +-1/sqrt(2).
    # Group b: mean 2, unbiased std 2 -> -1, 0, +1.
    a = 1 / math.sqrt(2)
    per_row = t([a, -a, -1.0, 0.0, 1.0])
    torch.testing.assert_close(advantages, per_row[:, None] * mask, atol=1e-5, rtol=0)
    assert advantages[0, 2].item() == 0.0 and advantages[2, 1:].abs().sum().item() == 0.0
    assert returns is advantages


def test_grpo_without_std_normalisation_and_tensor_index():
    rewards, mask = grpo_example()
    index = torch.tensor([7, 7, 3, 3, 3])  # 0-d tensors hash by identity: must be grouped by value
    advantages, _ = compute_grpo_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=False
    )
    per_row = t([0.5, -0.5, -2.0, 0.0, 2.0])
    torch.testing.assert_close(advantages, per_row[:, None] * mask)


def test_grpo_group_of_one_keeps_raw_score_and_equal_scores_give_zero():
    rewards = t([[0.0, 0.7], [1.0, 0.0], [0.0, 1.0]])
    mask = t([[1, 1], [1, 1], [1, 1]])
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, np.array([0, 1, 1]))
    # Row 0 is alone: mean 0, std 1 -> 0.7 / (1 + 1e-6). Rows 1 and 2 tie: std 0 -> 0, not NaN.
    torch.testing.assert_close(advantages[0], t([0.7, 0.7]) / (1 + 1e-6))
    assert advantages[1:].abs().max().item() == 0.0


def test_grpo_rejects_index_of_wrong_length():
    rewards, mask = grpo_example()
    with pytest.raises(ValueError, match="index has 3 entries but the batch has 5 rows"):
        compute_grpo_outcome_advantage(rewards, mask, [0, 0, 1])


# ------------------------------------------------------------------ KL


def test_kl_estimators_on_hand_values():
    logprob = t([[-1.0, -1.5]])
    ref_logprob = t([[-1.5, -1.0]])  # d = logprob - ref = (+0.5, -0.5)
    expected = {
        "kl": [0.5, -0.5],
        "abs": [0.5, 0.5],
        "mse": [0.125, 0.125],
        # k3 = exp(-d) + d - 1
        "low_var_kl": [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1],
    }
    for mode, values in expected.items():
        torch.testing.assert_close(kl_penalty(logprob, ref_logprob, mode), t([values]))
    for alias, mode in [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")]:
        torch.testing.assert_close(
            kl_penalty(logprob, ref_logprob, alias), kl_penalty(logprob, ref_logprob, mode)
        )


def test_k3_is_nonnegative_and_clamped():
    g = torch.Generator().manual_seed(8)
    logprob = 10 * torch.randn(64, 16, generator=g, dtype=DTYPE)
    ref_logprob = 10 * torch.randn(64, 16, generator=g, dtype=DTYPE)
    k3 = kl_penalty(logprob, ref_logprob, "k3")
    assert torch.isfinite(k3).all()
    assert k3.min().item() >= 0.0 and k3.max().item() <= 10.0
    # exp(x) >= 1 + x, so k3 = exp(x) - x - 1 >= 0, with equality only at x = 0.
    assert kl_penalty(t([[-2.0]]), t([[-2.0]]), "k3").item() == 0.0


def test_kl_penalty_rejects_unknown_mode_listing_valid_ones():
    with pytest.raises(ValueError, match=r"unknown mode 'full'.*'low_var_kl'.*'k3'"):
        kl_penalty(t([[0.0]]), t([[0.0]]), "full")


def test_apply_kl_penalty_arithmetic_and_metrics():
    scores = t([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    ref = t([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    diff = t([[0.1, 0.2, 0.3], [0.4, -0.2, 5.0]])
    old = ref + diff
    mask = t([[1, 1, 1], [1, 1, 0]])
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.5)
    expected = scores - 0.5 * t([[0.1, 0.2, 0.3], [0.4, -0.2, 0.0]])
    torch.testing.assert_close(rewards, expected)
    # Row means 0.2 and 0.1 (the masked 5.0 does not count) -> 0.15.
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.15)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.5
    assert all(isinstance(v, float) for v in metrics.values())
    rewards_k3, _ = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.5, kl_penalty="k3")
    torch.testing.assert_close(rewards_k3, scores - 0.5 * kl_penalty(old, ref, "k3") * mask)


# ------------------------------------------------------------------ PPO losses


def test_policy_loss_at_ratio_one_is_minus_mean_advantage():
    g = torch.Generator().manual_seed(9)
    log_prob = torch.randn(4, 6, generator=g, dtype=DTYPE)
    advantages = torch.randn(4, 6, generator=g, dtype=DTYPE)
    mask = ragged_mask(4, 6, seed=10)
    pg_loss, clipfrac, ppo_kl = compute_policy_loss(log_prob, log_prob, advantages, mask)
    assert pg_loss.item() == pytest.approx(-masked_mean(advantages, mask).item())
    assert clipfrac.item() == 0.0 and ppo_kl.item() == 0.0


def test_policy_loss_half_the_tokens_clip():
    # ratio 1.5 with A>0 and ratio 0.5 with A<0 leave the trust region: the clipped term is
    # the larger loss. ratio 1.1 and 0.9 stay inside [0.8, 1.2].
    ratios = t([[1.5, 0.5, 1.1, 0.9]])
    advantages = t([[1.0, -1.0, 1.0, 1.0]])
    old_log_prob = torch.zeros(1, 4, dtype=DTYPE)
    log_prob = ratios.log().requires_grad_(True)
    mask = torch.ones(1, 4, dtype=DTYPE)
    pg_loss, clipfrac, ppo_kl = compute_policy_loss(
        old_log_prob, log_prob, advantages, mask, cliprange=0.2
    )
    assert pg_loss.item() == pytest.approx((-1.2 + 0.8 - 1.1 - 0.9) / 4)
    assert clipfrac.item() == pytest.approx(0.5)
    assert ppo_kl.item() == pytest.approx(-ratios.log().mean().item())
    pg_loss.backward()
    # Clipped tokens get no gradient; the others get d(-A * ratio)/dlogp / 4 = -A * ratio / 4.
    torch.testing.assert_close(log_prob.grad, t([[0.0, 0.0, -1.1 / 4, -0.9 / 4]]))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_policy_loss_ignores_masked_tokens(mode):
    g = torch.Generator().manual_seed(11)
    old = torch.randn(3, 5, generator=g, dtype=DTYPE)
    new = old + 0.3 * torch.randn(3, 5, generator=g, dtype=DTYPE)
    advantages = torch.randn(3, 5, generator=g, dtype=DTYPE)
    mask = ragged_mask(3, 5, seed=12)
    clean = compute_policy_loss(old, new, advantages, mask, loss_agg_mode=mode)
    pad = ~mask.bool()
    junk_new = new.masked_fill(pad, float("nan"))
    junk_adv = advantages.masked_fill(pad, 1e6)
    dirty = compute_policy_loss(old, junk_new, junk_adv, mask, loss_agg_mode=mode)
    for a, b in zip(clean, dirty, strict=True):
        torch.testing.assert_close(a, b)


def test_value_loss_clipping_by_hand():
    values = t([[0.0, 0.0, 0.0]])
    vpreds = t([[1.0, 0.1, 1.0]])
    returns = t([[2.0, -1.0, 0.0]])
    mask = torch.ones(1, 3, dtype=DTYPE)
    # token 0: v_clip 0.5 -> max((1-2)^2, (0.5-2)^2) = 2.25, clipped term active
    # token 1: inside the range -> 1.21 both ways
    # token 2: v_clip 0.5 -> max(1, 0.25) = 1, unclipped term active
    vf_loss, vf_clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    assert vf_loss.item() == pytest.approx(0.5 * (2.25 + 1.21 + 1.0) / 3)
    assert vf_clipfrac.item() == pytest.approx(1 / 3)


def test_losses_reject_bad_input():
    ok = torch.zeros(2, 3, dtype=DTYPE)
    with pytest.raises(ValueError, match=r"log_prob \(2, 4\)"):
        compute_policy_loss(ok, torch.zeros(2, 4, dtype=DTYPE), ok, ok)
    with pytest.raises(ValueError, match="cliprange must be >= 0"):
        compute_policy_loss(ok, ok, ok, ok, cliprange=-0.1)
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        compute_policy_loss(ok, ok, ok, torch.ones(2, 3), loss_agg_mode="sum")
    with pytest.raises(ValueError, match="cliprange_value must be >= 0"):
        compute_value_loss(ok, ok, ok, ok, cliprange_value=-1.0)
    with pytest.raises(ValueError, match="2-D"):
        apply_kl_penalty(ok[0], ok[0], ok[0], ok[0], kl_coef=0.1)


# ------------------------------------------------------------------ logits


def test_entropy_of_uniform_logits_is_log_vocab_and_matches_categorical():
    vocab = 11
    uniform = torch.full((2, 3, vocab), 4.2, dtype=DTYPE)
    torch.testing.assert_close(
        entropy_from_logits(uniform), torch.full((2, 3), math.log(vocab), dtype=DTYPE)
    )
    g = torch.Generator().manual_seed(13)
    logits = 3 * torch.randn(2, 3, vocab, generator=g, dtype=DTYPE)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)
    # Huge logits: a near one-hot distribution, entropy ~0 and finite (no log(0)).
    peaked = torch.tensor([[[1e4, 0.0, -1e4]]], dtype=torch.float32)
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_logprobs_from_logits_normalise_and_match_categorical():
    g = torch.Generator().manual_seed(14)
    batch, length, vocab = 2, 4, 6
    logits = torch.randn(batch, length, vocab, generator=g, dtype=DTYPE)
    every_label = torch.stack(
        [logprobs_from_logits(logits, torch.full((batch, length), v)) for v in range(vocab)]
    )
    torch.testing.assert_close(every_label.exp().sum(0), torch.ones(batch, length, dtype=DTYPE))
    labels = torch.randint(0, vocab, (batch, length), generator=g)
    expected = torch.distributions.Categorical(logits=logits).log_prob(labels)
    torch.testing.assert_close(logprobs_from_logits(logits, labels), expected)


def test_logprobs_from_logits_rejects_bad_labels():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"labels shape \(2, 4\).*\(2, 3\)"):
        logprobs_from_logits(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer token ids"):
        logprobs_from_logits(logits, torch.zeros(2, 3))
