"""Rollout: batched sampling with a KV cache (temperature, top-p, EOS, maximum length).

This is the "generate" half of the hybrid engine: the same weights that the
actor trains are copied into a plain (unsharded) model, which samples
``max_new_tokens`` tokens for every prompt at once. Each step feeds only the
newest token and reuses the keys and values of the earlier ones (the KV cache
that ``transformers`` keeps in ``past_key_values``), so a step costs one
token's compute, not the whole sequence's.

Output layout follows the batch that veRL 0.9.1's agent loop assembles from its
rollout servers (``verl/experimental/agent_loop/agent_loop.py``
(``AgentLoopWorker._postprocess``)): ``prompts``, ``responses`` (right-padded with pad),
``input_ids`` (their concatenation), ``attention_mask``, ``position_ids`` and
``response_mask`` (1 for generated tokens up to and including EOS). veRL generates
with vLLM or SGLang in server actors of their own (``verl/workers/rollout/``); this
module is the small in-process sampler that stands in for them.
"""

from __future__ import annotations

import torch


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the smallest set of tokens whose probability reaches top_p.

    Nucleus sampling (Holtzman et al., 2020). ``logits``: float [batch, vocab].
    The most likely token is always kept, so no row is left empty.
    """
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    # Probability mass *before* each token: a token is kept if that is below top_p.
    drop = probs.cumsum(-1) - probs >= top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Sample a response for every prompt.

    Args:
        model: a causal LM returning ``.logits`` and ``.past_key_values``.
        prompts: int64 [batch, prompt_length], all the same length (no padding).
        max_new_tokens: response length; a response that has not emitted EOS
            by then is cut (and gets no EOS).
        temperature: logits are divided by it; must be > 0.
        top_p: nucleus sampling threshold in (0, 1].
        generator: a ``torch.Generator`` for reproducible sampling.

    Returns:
        A dict of tensors, all with ``batch`` rows: ``prompts`` [b, P],
        ``responses`` [b, R], ``input_ids`` / ``attention_mask`` /
        ``position_ids`` [b, P + R], ``response_mask`` [b, R] (int64 except
        masks, which are int64 0/1).

    Raises:
        ValueError: if ``temperature <= 0`` or ``top_p`` is outside (0, 1].
    """
    if temperature <= 0:
        raise ValueError(
            f"temperature must be > 0, got {temperature}; use a small value for greedy"
        )
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    batch, prompt_length = prompts.shape
    device = prompts.device
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    responses = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    response_mask = torch.zeros_like(responses)
    positions = torch.arange(prompt_length, device=device).expand(batch, -1)
    out = model(input_ids=prompts, position_ids=positions, use_cache=True)
    for step in range(max_new_tokens):
        logits = top_p_filter(out.logits[:, -1, :].float() / temperature, top_p)
        token = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
        token = token.masked_fill(finished, pad_token_id)
        responses[:, step] = token
        response_mask[:, step] = (~finished).long()
        finished |= token == eos_token_id
        if finished.all() or step == max_new_tokens - 1:
            break
        out = model(
            input_ids=token[:, None],
            position_ids=torch.full((batch, 1), prompt_length + step, device=device),
            past_key_values=out.past_key_values,
            use_cache=True,
        )
    input_ids = torch.cat([prompts, responses], dim=1)
    attention_mask = torch.cat([torch.ones_like(prompts), response_mask], dim=1)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": torch.arange(input_ids.shape[1], device=device).expand(batch, -1).clone(),
        "response_mask": response_mask,
    }


def response_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
):
    """Log-probability of each response token under ``model`` (and optionally the entropy).

    Args:
        input_ids: int64 [b, P + R] from :func:`generate`.
        attention_mask: int64 [b, P + R] from :func:`generate`.
        position_ids: int64 [b, P + R] from :func:`generate`.
        response_length: ``R``.
        temperature: the sampling temperature, so log-probs match the sampling
            distribution (veRL divides logits by it the same way).

    Returns:
        ``log_probs`` float32 [b, R]; with ``with_entropy``, also ``entropy`` [b, R].
    """
    from reference_impl.rlhf.core_algos import entropy_from_logits, logprobs_from_logits

    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).logits
    # The logit at position t predicts token t + 1.
    logits = logits[:, -response_length - 1 : -1, :].float() / temperature
    log_probs = logprobs_from_logits(logits, input_ids[:, -response_length:])
    if with_entropy:
        return log_probs, entropy_from_logits(logits)
    return log_probs
