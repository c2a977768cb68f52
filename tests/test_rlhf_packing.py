"""Padding removed (reference_impl/rlhf/packing.py) gives the padded path's numbers, in fp32.

The packed forward pass, the chunked LM head and the token-budget micro-batches each
change how the work is laid out, never what is computed: log-probs, entropies, the loss
and every parameter's gradient must equal the padded path's to float32 rounding.
"""

from __future__ import annotations

import pytest
import torch

from reference_impl.rlhf import packing
from reference_impl.rlhf.model import ModelShape, build_actor, qwen2_config
from reference_impl.rlhf.rollout import response_log_probs

pytestmark = pytest.mark.reads_docs()

SHAPE = ModelShape(32, 2, 4, 2, 64, max_position_embeddings=64)
VOCAB, PAD = 50, 0
P, R = 6, 9  # prompt and response columns


def rollout_batch(seed: int = 0):
    """A rollout-shaped batch: prompts left-padded to P, responses right-padded to R."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = [6, 3, 5, 1, 4]
    response_lens = [9, 2, 5, 7, 1]
    b = len(prompt_lens)
    input_ids = torch.full((b, P + R), PAD)
    attention_mask = torch.zeros(b, P + R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens, strict=True)):
        input_ids[i, P - p : P + r] = torch.randint(1, VOCAB, (p + r,), generator=g)
        attention_mask[i, P - p : P + r] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    response_mask = attention_mask[:, P:].float()
    return input_ids, attention_mask, position_ids, response_mask


@pytest.fixture(scope="module")
def model():
    config = qwen2_config(SHAPE, VOCAB, PAD, bos=1, eos=2)
    return build_actor(config, seed=0).eval()


def test_pack_restarts_positions_and_unpack_inverts_it():
    input_ids, attention_mask, _, _ = rollout_batch()
    packed = packing.pack(input_ids, attention_mask)
    assert packed.input_ids.shape == (1, int(attention_mask.sum()))
    assert packed.position_ids[0, :15].tolist() == list(range(15))  # row 0: 6 + 9 tokens
    assert packed.position_ids[0, 15:20].tolist() == list(range(5))  # row 1: 3 + 2 tokens
    assert torch.equal(packed.unpack(packed.input_ids[0]), input_ids * attention_mask)


def test_pack_refuses_a_row_with_a_gap():
    ids = torch.ones(2, 5, dtype=torch.long)
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 0, 1, 1]])
    with pytest.raises(ValueError, match="row 1's attention_mask has a gap"):
        packing.pack(ids, mask)


@pytest.mark.parametrize("chunk_tokens", [packing.LOGIT_CHUNK_TOKENS, 4])
def test_packed_log_probs_loss_and_gradients_equal_the_padded_path(model, chunk_tokens):
    input_ids, attention_mask, position_ids, mask = rollout_batch()

    def loss_and_grads(log_probs, entropy):
        model.zero_grad()
        # Any loss that weighs every response token differently will do.
        weights = torch.linspace(0.5, 1.5, mask.numel()).view_as(mask)
        loss = ((log_probs - 0.1 * entropy) * weights * mask).sum() / mask.sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    padded = response_log_probs(
        model, input_ids, attention_mask, position_ids, R, temperature=0.7, with_entropy=True
    )
    packed = packing.response_log_probs_packed(
        model,
        input_ids,
        attention_mask,
        R,
        temperature=0.7,
        with_entropy=True,
        chunk_tokens=chunk_tokens,
    )
    for a, b in zip(padded, packed, strict=True):
        torch.testing.assert_close(a * mask, b * mask, rtol=1e-5, atol=1e-5)
    loss_padded, grads_padded = loss_and_grads(*padded)
    packed = packing.response_log_probs_packed(
        model,
        input_ids,
        attention_mask,
        R,
        temperature=0.7,
        with_entropy=True,
        chunk_tokens=chunk_tokens,
    )
    loss_packed, grads_packed = loss_and_grads(*packed)
    torch.testing.assert_close(loss_packed, loss_padded, rtol=1e-6, atol=1e-6)
    for name, grad in grads_padded.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_positions_that_do_not_restart_give_other_log_probs(model, monkeypatch):
    """The test above can fail: one position counter over the whole pack (no restart per
    sequence) makes the model read the sequences as one, and the numbers move."""
    input_ids, attention_mask, position_ids, mask = rollout_batch()
    padded = response_log_probs(model, input_ids, attention_mask, position_ids, R)
    real_pack = packing.pack

    def pack_without_restart(ids, attn):
        packed = real_pack(ids, attn)
        packed.position_ids = torch.arange(packed.input_ids.shape[1]).unsqueeze(0)
        return packed

    monkeypatch.setattr(packing, "pack", pack_without_restart)
    wrong = packing.response_log_probs_packed(model, input_ids, attention_mask, R)
    assert not torch.allclose(padded * mask, wrong * mask, atol=1e-3)


def test_token_log_probs_match_full_logits():
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(11, 8, generator=g), torch.randn(30, 8, generator=g)
    labels = torch.randint(0, 30, (11,), generator=g)
    log_probs, entropy = packing.token_log_probs(hidden, weight, labels, 1.3, chunk_tokens=3)
    logits = hidden @ weight.T / 1.3
    expected = torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0]
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(log_probs, expected)
    torch.testing.assert_close(entropy, -(p * p.log()).sum(-1))


def test_micro_batches_keep_the_budget_and_every_row_once():
    lengths = [1024, 130, 900, 128, 512, 700, 1000, 300, 256, 640]
    batches = packing.balanced_micro_batches(lengths, max_tokens=2048)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in b) for b in batches]
    assert max(loads) <= 2048
    assert len(batches) == -(-sum(lengths) // 2048)  # as few as the budget allows here
    assert max(loads) - min(loads) <= max(lengths)  # balanced, not first-fit


def test_micro_batches_name_a_row_over_the_budget():
    with pytest.raises(ValueError, match="row 1 has 3000 tokens.*at least 3000"):
        packing.balanced_micro_batches([10, 3000], max_tokens=2048)


# --- the actor update over token-budget micro-batches -------------------------------------


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_accumulate_the_mini_batchs_gradients_and_metrics(model, loss_agg_mode):
    from reference_impl.data_proto import DataProto
    from reference_impl.rlhf.config import make_config
    from reference_impl.rlhf.workers import actor_loss, micro_batches

    input_ids, attention_mask, position_ids, mask = rollout_batch(seed=3)
    g = torch.Generator().manual_seed(4)
    batch = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, P:],
            "response_mask": mask,
            "old_log_probs": -torch.rand(mask.shape, generator=g) * 4,
            "ref_log_prob": -torch.rand(mask.shape, generator=g) * 4,
            "advantages": torch.randn(mask.shape, generator=g),
        }
    )

    def accumulate(config):
        model.zero_grad()
        totals = {}
        parts = micro_batches(batch, config)
        for part in parts:
            log_prob, entropy = packing.response_log_probs_packed(
                model, part.batch["input_ids"], part.batch["attention_mask"], R, with_entropy=True
            )
            loss, metrics = actor_loss(log_prob, entropy, part.batch, batch.batch, config)
            loss.backward()
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value.detach()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        return len(parts), totals, grads

    whole = make_config(loss_agg_mode=loss_agg_mode, clip_ratio=0.1)
    # Rows of 15, 5, 10, 8 and 5 tokens under a budget of 16 tokens: 3 micro-batches.
    split = make_config(
        loss_agg_mode=loss_agg_mode,
        clip_ratio=0.1,
        use_dynamic_bsz=True,
        ppo_max_token_len_per_gpu=16,
    )
    n_whole, metrics_whole, grads_whole = accumulate(whole)
    n_split, metrics_split, grads_split = accumulate(split)
    assert (n_whole, n_split) == (1, 3)
    for key, value in metrics_whole.items():
        torch.testing.assert_close(metrics_split[key], value, rtol=1e-5, atol=1e-6, msg=key)
    for name, grad in grads_whole.items():
        torch.testing.assert_close(grads_split[name], grad, rtol=1e-4, atol=1e-6, msg=name)
