"""The static-cache rollout (reference_impl/rlhf/static_rollout.py), run eagerly on CPU.

What a CUDA graph replays is this same step; these tests check that it samples what
``rollout.generate`` samples, that its log-probs are the model's, that its draws follow
the softmax, and that its step holds no host sync (Dynamo traces it whole). The graph
itself is measured on a GPU by ``benchmarks/rlhf_generation.py``.
"""

from __future__ import annotations

import pytest
import torch

from reference_impl.rlhf import engine
from reference_impl.rlhf.model import PRESETS, build_actor, qwen2_config
from reference_impl.rlhf.rollout import generate, response_log_probs, top_p_filter
from reference_impl.rlhf.static_rollout import StaticRollout
from reference_impl.rlhf.tokenizer import CharTokenizer

TOK = CharTokenizer()
PAD, EOS = TOK.pad_token_id, TOK.eos_token_id
BATCH, PROMPT, NEW = 8, 6, 16
GREEDY = 1e-9  # top_p -> 0 keeps only the most likely token


@pytest.fixture(scope="module")
def model():
    """The cpu preset's shape with larger initial weights (0.2, not 0.02), so that greedy
    responses differ by row and by step and end at EOS at different lengths: a model that
    repeats one token would hide a wrong position or a stale cache."""
    config = qwen2_config(PRESETS["cpu"], TOK.vocab_size, PAD, TOK.bos_token_id, EOS)
    config.initializer_range = 0.2
    return build_actor(config, seed=0).eval()


def random_prompts(seed: int) -> torch.Tensor:
    return torch.randint(
        3, TOK.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(seed)
    )


def test_greedy_responses_equal_the_dynamic_cache_path(model):
    prompts = random_prompts(0)
    expected = generate(model, prompts, NEW, EOS, PAD, top_p=GREEDY)
    ended = expected["response_mask"].sum(1)
    assert len(set(ended.tolist())) > 2 and int(ended.min()) < NEW  # EOS at different steps
    assert len(set(expected["responses"][:, :3].flatten().tolist())) > 3  # not one token
    # check_every=3: finished is read at steps 3, 6, ...; rows keep writing pad after EOS.
    ours = StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, top_p=GREEDY, check_every=3)
    got = ours.generate(prompts)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_a_second_call_starts_from_a_clean_state(model):
    ours = StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, top_p=GREEDY)
    ours.generate(random_prompts(1))
    second = ours.generate(random_prompts(2))
    fresh = StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, top_p=GREEDY).generate(
        random_prompts(2)
    )
    for key, value in fresh.items():
        assert torch.equal(second[key], value), key


def test_rollout_log_probs_equal_teacher_forced_log_probs(model):
    temperature = 0.7
    ours = StaticRollout(
        model,
        BATCH,
        PROMPT,
        NEW,
        EOS,
        PAD,
        temperature=temperature,
        generator=torch.Generator().manual_seed(3),
    )
    out = ours.generate(random_prompts(3))
    mask = out["response_mask"].bool()
    assert 0 < mask.float().mean() < 1  # some rows ended early
    forced = response_log_probs(
        model, out["input_ids"], out["attention_mask"], out["position_ids"], NEW, temperature
    )
    torch.testing.assert_close(out["rollout_log_probs"][mask], forced[mask], atol=1e-5, rtol=1e-5)
    assert torch.all(out["rollout_log_probs"][~mask] == 0)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_first_tokens_follow_the_softmax(model, top_p):
    """20,000 draws of the first token for one prompt, against softmax(logits / T) (top-p
    filtered and renormalised): Pearson's chi-squared below its 0.1 % critical value, and
    no draw outside the nucleus. The seed is fixed, so the verdict is too."""
    draws, temperature = 20_000, 0.8
    prompt = random_prompts(4)[:1]
    with torch.no_grad():
        logits = model(input_ids=prompt).logits[0, -1].float() / temperature
    probs = top_p_filter(logits[None], top_p)[0].softmax(-1)
    ours = StaticRollout(
        model,
        draws,
        PROMPT,
        1,
        EOS,
        PAD,
        temperature=temperature,
        top_p=top_p,
        generator=torch.Generator().manual_seed(5),
    )
    first = ours.generate(prompt.expand(draws, -1).contiguous())["responses"][:, 0]
    counts = torch.bincount(first, minlength=TOK.vocab_size).double()
    assert counts[probs == 0].sum() == 0
    kept = probs > 0
    expected = draws * probs[kept].double()
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    # The 0.1 % critical values of chi-squared (Pearson 1900), by degrees of freedom.
    critical = {
        1: 10.83,
        2: 13.82,
        3: 16.27,
        4: 18.47,
        5: 20.52,
        6: 22.46,
        7: 24.32,
        8: 26.12,
        9: 27.88,
        10: 29.59,
        11: 31.26,
        12: 32.91,
        13: 34.53,
        14: 36.12,
        15: 37.70,
        16: 39.25,
    }[int(kept.sum()) - 1]
    assert chi2 < critical, (chi2, critical, counts[kept].tolist(), expected.tolist())


def test_the_decode_step_has_no_host_sync(model):
    """Dynamo's ``fullgraph=True`` refuses a step that branches on a tensor's value or reads
    one back (``.item()``): what a CUDA graph cannot capture. ``backend="eager"`` only
    traces, so this needs no compiler."""
    ours = StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, top_p=0.9)
    with torch.no_grad():
        ours._prefill(random_prompts(6))
        torch.compile(ours._step, backend="eager", fullgraph=True)()
    assert int(ours.column) == 2  # the prefill's draw and the traced step's


def test_bad_shapes_and_devices_are_named(model):
    ours = StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD)
    with pytest.raises(ValueError, match=r"shape \(8, 5\).*built for \(8, 6\)"):
        ours.generate(random_prompts(7)[:, :5])
    with pytest.raises(ValueError, match="cuda_graph=True needs a model on a CUDA device"):
        StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, cuda_graph=True)
    with pytest.raises(ValueError, match="check_every must be at least 1, got 0"):
        StaticRollout(model, BATCH, PROMPT, NEW, EOS, PAD, check_every=0)


def test_the_rollout_copy_casts_parameters_and_keeps_the_rotary_frequencies(model):
    # On GPU the trainer samples from a bf16 copy of the actor (engine.rollout_copy). The
    # actor's rotary frequencies stay fp32 (FSDP2 casts parameters only); a copy made with
    # Module.to(bfloat16) would round them too, and shift every angle at long positions.
    rollout = engine.rollout_copy(model, "cpu", torch.bfloat16)
    for name, param in rollout.named_parameters():
        assert param.dtype == torch.bfloat16, name
        assert torch.equal(param, model.get_parameter(name).to(torch.bfloat16)), name
    buffers = dict(model.named_buffers())
    assert any(name.endswith("inv_freq") for name in buffers)
    for name, buffer in rollout.named_buffers():
        assert buffer.dtype == buffers[name].dtype and torch.equal(buffer, buffers[name]), name
    assert not rollout.training and model.get_parameter("lm_head.weight").dtype == torch.float32
