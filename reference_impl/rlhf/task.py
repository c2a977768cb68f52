"""The digit-sum task: a generated, verifiable problem for RL on a laptop.

A prompt gives a target ``T`` (``"<s>13="``); the answer is exactly
``num_digits`` digits followed by EOS (``"49</s>"``: 4 + 9 = 13). Any
``num_digits``-digit answer whose digits sum to ``T`` is right, so the policy
must learn to condition on the prompt, and a policy that ignores it scores
about 0.5.

The score is shaped by distance, ``max(0, 1 - |sum - T| / distance_scale)``:
1.0 for an exact answer, 0.9 for one off by one (with the default scale 10).
A malformed answer scores 0. Exact-match accuracy is reported beside it.

The check runs on **token ids**, never on decoded text: a decoder that drops
``<pad>`` and ``<unk>`` would turn ``4 <pad> 9 </s>`` into the valid-looking
``"49"``, and a policy would learn to game that. Here every one of the first
``num_digits`` response tokens must be a digit token and the next one EOS.

Here the trainer calls :func:`score_responses` on the driver, over the whole batch,
as veRL's legacy trainer did. veRL 0.9.1 scores each response as soon as it is
generated, in ``RewardLoopWorker`` actors (``verl/experimental/reward_loop/reward_loop.py``
(``RewardLoopWorker.compute_score``)) that the agent-loop workers call; a rule-based
score goes through ``verl/experimental/reward_loop/reward_manager/naive.py``
(``NaiveRewardManager``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.rlhf.tokenizer import CharTokenizer


@dataclass(frozen=True)
class DigitSumTask:
    """Prompts and a verifier for the digit-sum task.

    Args:
        num_digits: digits in an answer; targets are ``0 .. 9 * num_digits``.
        distance_scale: ``|sum - T|`` at which the score reaches 0.
    """

    num_digits: int = 2
    distance_scale: float = 10.0

    @property
    def max_target(self) -> int:
        return 9 * self.num_digits

    @property
    def prompt_text_width(self) -> int:
        return len(str(self.max_target))

    def prompt_text(self, target: int) -> str:
        return f"{target:0{self.prompt_text_width}d}="

    def make_prompts(
        self, tokenizer: CharTokenizer, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of prompts and their targets.

        Returns:
            ``input_ids`` (int64, [batch_size, 1 + width + 1], all the same
            length, so no padding) and ``targets`` (int64, [batch_size]).
        """
        targets = torch.randint(0, self.max_target + 1, (batch_size,), generator=generator)
        ids = [tokenizer.encode(self.prompt_text(int(t))) for t in targets]
        return torch.tensor(ids, dtype=torch.long), targets

    def format_examples(
        self, tokenizer: CharTokenizer, rows: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, int]:
        """Rows for the supervised format warm-up: a prompt, random digits, then EOS.

        The answers are well-formed but not correct: the warm-up teaches the format only.

        Returns:
            ``input_ids`` (int64, [rows, P + num_digits + 1]) and the prompt length ``P``.
        """
        prompts, _ = self.make_prompts(tokenizer, rows, generator)
        digits = torch.randint(0, 10, (rows, self.num_digits), generator=generator)
        eos = torch.full((rows, 1), tokenizer.eos_token_id)
        return torch.cat([prompts, tokenizer.digit_ids()[digits], eos], dim=1), prompts.shape[1]

    def score_responses(
        self, responses: torch.Tensor, targets: torch.Tensor, tokenizer: CharTokenizer
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Score each response on its token ids.

        Args:
            responses: int64 [batch, response_length], generated ids; tokens after
                EOS are padding and are ignored.
            targets: int64 [batch].

        Returns:
            ``scores`` (float32 [batch], in [0, 1]) and ``exact`` (bool [batch]).

        Raises:
            ValueError: if ``response_length <= num_digits`` (no room for EOS) or
                the batch sizes differ.
        """
        n = self.num_digits
        if responses.shape[1] <= n:
            raise ValueError(
                f"responses have {responses.shape[1]} tokens but an answer needs {n} digits "
                f"and EOS; generate at least {n + 1} tokens"
            )
        if responses.shape[0] != targets.shape[0]:
            raise ValueError(f"{responses.shape[0]} responses for {targets.shape[0]} targets")
        digit_ids = tokenizer.digit_ids().to(responses.device)
        head = responses[:, :n]
        # Position of each token in 0..9 if it is a digit token, else -1.
        is_digit = head.unsqueeze(-1) == digit_ids
        well_formed = is_digit.any(-1).all(-1) & (responses[:, n] == tokenizer.eos_token_id)
        values = is_digit.float().argmax(-1)  # digit value where is_digit
        distance = (values.sum(-1) - targets.to(responses.device)).abs().float()
        scores = (1.0 - distance / self.distance_scale).clamp(min=0.0)
        scores = torch.where(well_formed, scores, torch.zeros_like(scores))
        return scores.float(), well_formed & (distance == 0)
