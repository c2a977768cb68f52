"""A character-level tokenizer: one token per character, plus four special tokens.

Nothing is downloaded: the vocabulary is the alphabet given to the
constructor. Special tokens come first so their ids are fixed:
``<pad>`` = 0, ``<s>`` (BOS) = 1, ``</s>`` (EOS) = 2, ``<unk>`` = 3.

``decode`` drops special tokens, as a Hugging Face tokenizer does with
``skip_special_tokens=True``; this is exactly why rewards must be computed on
token ids and not on decoded text (see :mod:`reference_impl.rlhf.task`).
"""

from __future__ import annotations

import torch

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


class CharTokenizer:
    """Map characters of ``alphabet`` to ids ``4 .. 4 + len(alphabet) - 1``.

    Args:
        alphabet: the characters the task uses, e.g. ``"0123456789="``.
            Characters must be distinct.

    Raises:
        ValueError: if ``alphabet`` repeats a character.
    """

    def __init__(self, alphabet: str = "0123456789=") -> None:
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"alphabet {alphabet!r} repeats a character; give each once")
        self.tokens = list(SPECIALS) + list(alphabet)
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        self.pad_token_id, self.bos_token_id, self.eos_token_id, self.unk_token_id = 0, 1, 2, 3

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """Ids of ``text``, one per character (unknown characters become ``<unk>``)."""
        ids = [self.ids.get(char, self.unk_token_id) for char in text]
        return [self.bos_token_id, *ids] if bos else ids

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """The text of ``ids`` with special tokens dropped."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.tokens[i] for i in ids if i >= len(SPECIALS))

    def digit_ids(self) -> torch.Tensor:
        """The ids of ``0``..``9``, in order (int64, shape [10])."""
        return torch.tensor([self.ids[str(d)] for d in range(10)])
