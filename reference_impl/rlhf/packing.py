"""Padding removed: packed sequences, token-budget micro-batches and chunked log-probs.

A rollout batch is a rectangle ``[b, P + R]``: prompts left-padded to ``P``, responses
right-padded to ``R``. With responses of 128 to 1,024 tokens, half of that rectangle or
more is padding, and a forward pass over it is work thrown away. veRL removes it three
ways, and this module does the same in plain PyTorch:

* :func:`pack` lays the valid tokens of every row end to end in one row ``[1, T]``, with
  ``position_ids`` that restart at 0 for each sequence. Hugging Face models read such
  ``position_ids`` (with no attention mask and no KV cache) as packed sequences, and keep
  each one from attending to the others (``transformers/masking_utils.py``
  (``find_packed_sequence_indices``)); FlashAttention's variable-length kernel does the same
  on a GPU. veRL 0.9.1: ``actor_rollout_ref.model.use_remove_padding`` (default true),
  with its unpadding helpers in ``verl/workers/utils/padding.py``.
* :func:`balanced_micro_batches` cuts a mini-batch into micro-batches of at most
  ``max_tokens`` valid tokens each, with the tokens spread evenly, so that every forward
  pass is about as long as the budget allows. veRL 0.9.1: ``use_dynamic_bsz`` and
  ``ppo_max_token_len_per_gpu`` (``verl/utils/seqlen_balancing.py``
  (``rearrange_micro_batches``), which partitions with Karmarkar-Karp; we use the simpler
  longest-first greedy rule, which the same file offers as ``greedy_partition``).
* :func:`token_log_probs` applies the LM head to a few thousand tokens at a time and
  recomputes each chunk in the backward pass, so the fp32 logits of a 151,936-token
  vocabulary never exist for the whole batch at once (``[T, V]`` in fp32 is 2.4 GB for
  4,096 tokens). veRL 0.9.1 fuses the same computation in a Triton kernel
  (``verl/utils/kernel/linear_cross_entropy.py``) or in Liger's.

Everything here runs unchanged on CPU, where the tests check it against the padded path
(``tests/test_rlhf_packing.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

#: Tokens per LM-head chunk in :func:`token_log_probs`: [4096, 151936] fp32 logits are
#: 2.4 GB, against 4.7 GB of bf16 activations for a 0.5B model's 16k-token micro-batch.
LOGIT_CHUNK_TOKENS = 4096


def balanced_micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group rows into micro-batches of at most ``max_tokens`` tokens, balanced by tokens.

    Args:
        lengths: valid tokens of each row (``attention_mask.sum(-1)``), ints.
        max_tokens: the token budget of one micro-batch (veRL's
            ``ppo_max_token_len_per_gpu``).

    Returns:
        Lists of row indices, each sorted; every row is in exactly one list. The number
        of lists is the smallest ``k >= ceil(sum / max_tokens)`` for which the greedy rule
        (longest row first, into the list with the fewest tokens) keeps every list within
        the budget.

    Raises:
        ValueError: ``max_tokens`` < 1, or a row is longer than ``max_tokens`` (the message
            names the row and says to raise the budget to at least its length).
    """
    if max_tokens < 1:
        raise ValueError(
            f"max_tokens must be >= 1 (a token budget per micro-batch), got {max_tokens}"
        )
    longest = max(range(len(lengths)), key=lambda i: lengths[i], default=None)
    if longest is not None and lengths[longest] > max_tokens:
        raise ValueError(
            f"row {longest} has {lengths[longest]} tokens, more than max_tokens={max_tokens}: "
            f"set the budget (ppo_max_token_len_per_gpu) to at least {lengths[longest]}, "
            "usually 2-3 x (prompt + response length)"
        )
    if not lengths:
        return []
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    k = max(1, -(-sum(lengths) // max_tokens))
    while True:
        bins: list[list[int]] = [[] for _ in range(k)]
        load = [0] * k
        for i in order:
            j = min(range(k), key=load.__getitem__)
            bins[j].append(i)
            load[j] += lengths[i]
        if max(load) <= max_tokens:
            return [sorted(b) for b in bins if b]
        k += 1


@dataclass
class Packed:
    """The valid tokens of a padded batch, end to end in one row.

    Attributes:
        input_ids: int64 ``[1, T]``, T = the number of valid tokens.
        position_ids: int64 ``[1, T]``, 0, 1, 2, ... restarting at each sequence.
        valid: bool ``[b, L]``, where the tokens came from (the batch's attention mask).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    valid: torch.Tensor

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """Put per-token ``values`` ``[T]`` back in the padded layout ``[b, L]`` (0 at pads)."""
        out = values.new_zeros(self.valid.shape)
        return out.masked_scatter(self.valid, values)


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Packed:
    """Remove the padding of ``input_ids`` ``[b, L]`` (int64) under ``attention_mask`` ``[b, L]``.

    The valid tokens of each row must be contiguous, as a rollout's are (left-padded
    prompt, then the response, then right padding); positions restart at 0 for each
    row, so a packed forward pass gives each token the position it had in its own row.

    Raises:
        ValueError: the shapes differ, or a row's valid tokens are not contiguous (its
            mask is not 0...0 1...1 0...0), which packing would silently reorder.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"pack: input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must both be [batch, length]"
        )
    valid = attention_mask.bool()
    # A contiguous run has at most one 0->1 rise along the row (counting a 1 at column 0).
    rises = (valid[:, 1:] & ~valid[:, :-1]).sum(-1) + valid[:, 0].long()
    if (rises > 1).any():
        row = int((rises > 1).nonzero()[0])
        raise ValueError(
            f"pack: row {row}'s attention_mask has a gap; packing needs each row's tokens "
            "in one run (left-padded prompt, response, right padding)"
        )
    lengths = valid.sum(-1)
    # Position of each valid token within its own row: 0 .. length - 1.
    positions = torch.cat([torch.arange(int(n), device=input_ids.device) for n in lengths])
    return Packed(
        input_ids=input_ids[valid].unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        valid=valid,
    )


def _chunk_log_probs(hidden, weight, labels, temperature: float):
    """Log-prob of ``labels`` and entropy for one chunk; fp32 logits live only here."""
    logits = (hidden @ weight.T).float() / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - log_z
    entropy = log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return log_probs, entropy


def token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = LOGIT_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of ``labels`` and the entropy under ``softmax(hidden @ weight.T / t)``.

    Args:
        hidden: ``[T, h]``, the decoder's last hidden states (any float dtype).
        weight: ``[V, h]``, the LM head's weight.
        labels: int64 ``[T]``, the token each position predicts.
        chunk_tokens: positions per LM-head chunk. Each chunk is recomputed in the
            backward pass (activation checkpointing) rather than kept, so peak memory
            holds one chunk's ``[chunk_tokens, V]`` fp32 logits, not ``[T, V]``.

    Returns:
        ``(log_probs, entropy)``, float32 ``[T]`` each: the same values as
        ``core_algos.logprobs_from_logits`` and ``entropy_from_logits`` on the full logits.
    """
    log_probs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_tokens):
        part = slice(start, start + chunk_tokens)
        lp, ent = checkpoint(
            _chunk_log_probs, hidden[part], weight, labels[part], temperature, use_reentrant=False
        )
        log_probs.append(lp)
        entropies.append(ent)
    return torch.cat(log_probs), torch.cat(entropies)


class _LogProbHead(torch.nn.Module):
    """Stands in for a model's LM head: returns ``[..., 2]`` (log-prob of the label, entropy).

    Holds the real head, so its weight is the one FSDP2 gathers during the forward pass.
    """

    def __init__(self, head: torch.nn.Linear, labels, temperature: float, chunk_tokens: int):
        super().__init__()
        self.head, self.labels = head, labels
        self.temperature, self.chunk_tokens = temperature, chunk_tokens

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [1, n, h] -> [1, n, 2]
        log_probs, entropy = token_log_probs(
            hidden[0], self.head.weight, self.labels, self.temperature, self.chunk_tokens
        )
        # A new tensor, not a view: FSDP2 hooks the backward pass on the forward's output.
        return torch.stack([log_probs[None], entropy[None]], dim=-1)


def response_log_probs_packed(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = LOGIT_CHUNK_TOKENS,
):
    """``rollout.response_log_probs`` with the padding removed; same arguments and results.

    One forward pass of the model over the packed tokens ``[1, T]``, with the LM head
    applied to the positions that predict a response token only, in chunks
    (:func:`token_log_probs`).

    Args:
        model: a Hugging Face causal LM whose forward takes ``logits_to_keep`` (e.g.
            ``Qwen2ForCausalLM``), plain or sharded with FSDP2.
        input_ids, attention_mask: int64 ``[b, P + R]`` from ``rollout.generate``.
        response_length: ``R``.

    Returns:
        ``log_probs`` float32 ``[b, R]`` (0 at padding); with ``with_entropy``, also
        ``entropy`` ``[b, R]``.
    """
    packed = pack(input_ids, attention_mask)
    # The hidden state at a token predicts the next token of its own sequence. Only the
    # positions that predict a response token need the LM head: the padded layout's
    # columns P-1 .. P+R-2 of valid rows.
    wanted = torch.zeros_like(packed.valid)
    wanted[:, -response_length - 1 : -1] = True
    wanted &= packed.valid
    next_ids = torch.zeros_like(input_ids)
    next_ids[:, :-1] = input_ids[:, 1:]
    at = packed.unpack(torch.arange(packed.input_ids.shape[1], device=input_ids.device))[wanted]
    # The model runs through its own __call__, so FSDP2's hooks on the root module gather
    # the LM head's weight for the forward pass and again for the backward pass. Its
    # ``logits_to_keep`` picks the wanted positions, and for this one call the LM head is
    # replaced by one that returns log-probs and entropies instead of [n, V] logits.
    head = model.get_output_embeddings()
    model.set_output_embeddings(_LogProbHead(head, next_ids[wanted], temperature, chunk_tokens))
    try:
        out = model(
            input_ids=packed.input_ids,
            position_ids=packed.position_ids,
            # No KV cache: transformers reads packed position_ids as separate sequences
            # only when there is neither an attention mask nor a cache (masking_utils.py).
            use_cache=False,
            logits_to_keep=at,
        )
    finally:
        model.set_output_embeddings(head)
    log_probs, entropy = out.logits[0].unbind(-1)

    def to_response(values):
        full = torch.zeros(packed.valid.shape, dtype=values.dtype, device=values.device)
        full = full.masked_scatter(wanted, values)
        return full[:, -response_length - 1 : -1]

    if with_entropy:
        return to_response(log_probs), to_response(entropy)
    return to_response(log_probs)
