"""The policy and the critic: Qwen2-architecture models built from a config, randomly initialised.

Nothing is downloaded. :data:`PRESETS` holds two shapes:

* ``cpu``: about 0.4M parameters (hidden 128, 2 layers, 4 heads / 2 KV heads,
  MLP 384), small enough to learn the digit-sum task in minutes on two cores
  (a wide, shallow net learns this task faster than a deep, narrow one of the
  same size);
* ``gpu``: the shape of Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads /
  2 KV heads, MLP 4864) with this task's small vocabulary, in bf16.

The actor is ``Qwen2ForCausalLM``; the critic is ``Qwen2ForTokenClassification``
with one label, i.e. the same backbone with a scalar value head, as veRL 0.9.1 builds
its critic (``num_labels=1`` in ``verl/workers/engine/fsdp/transformer_impl.py``
(``FSDPEngine._build_module``), loading an ``AutoModelForTokenClassification`` through
``verl/utils/model.py`` (``load_valuehead_model``)). ``load_model`` keeps
the real loading path (``from_pretrained`` on a local directory) for readers
who point it at a checkpoint of their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class ModelShape:
    """The transformer's shape (Qwen2Config field names)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int = 64


PRESETS = {
    "cpu": ModelShape(128, 2, 4, 2, 384),
    "gpu": ModelShape(896, 24, 14, 2, 4864),
}
#: Qwen2.5-0.5B exactly, as its ``config.json`` gives it: the ``gpu`` preset's body with the
#: real 151,936-token vocabulary and 32,768 positions. Only ``benchmarks/rlhf_gpu_perf.py``
#: uses it: it measures at a real RLHF shape and does not learn a task.
QWEN25_05B = ModelShape(896, 24, 14, 2, 4864, max_position_embeddings=32768)
QWEN25_05B_VOCAB = 151936


def qwen2_config(shape: ModelShape, vocab_size: int, pad_token_id: int, bos: int, eos: int | None):
    """A ``transformers.Qwen2Config`` of ``shape`` for a vocabulary of ``vocab_size`` tokens."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        pad_token_id=pad_token_id,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=True,
        num_labels=1,  # used by the critic's value head
        attn_implementation="sdpa",
        **asdict(shape),
    )


def build_actor(config, seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A randomly initialised ``Qwen2ForCausalLM`` (same weights for the same ``seed``)."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(dtype)


def build_critic(config, seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A randomly initialised ``Qwen2ForTokenClassification`` with one output: a value per token."""
    from transformers import Qwen2ForTokenClassification

    torch.manual_seed(seed)
    return Qwen2ForTokenClassification(config).to(dtype)


def load_model(path: str, critic: bool = False, dtype: torch.dtype = torch.float32):
    """Load a saved actor (or critic) from a local directory (``save_pretrained`` output)."""
    from transformers import Qwen2ForCausalLM, Qwen2ForTokenClassification

    cls = Qwen2ForTokenClassification if critic else Qwen2ForCausalLM
    return cls.from_pretrained(path, dtype=dtype, local_files_only=True)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
