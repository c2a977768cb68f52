"""A test reward for the CPU run: ``reward.custom_reward_function.path=.../reward.py``.

veRL's gsm8k scorer (`verl/utils/reward_score/gsm8k.py`) gives a random model 0 for every
response, so every GRPO advantage is 0 and so is every gradient: the run would prove nothing about
the update. This reward also scores length, so responses in a group differ, advantages are not 0,
and ``actor/pg_loss`` and ``actor/grad_norm`` are not 0 either. veRL's reward-loop workers
(``RewardLoopWorker``, `verl/experimental/reward_loop/`) call it once per trajectory.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1 for the right sum after "####", minus a small cost per character of the response."""
    correct = solution_str.split("####")[-1].strip() == str(ground_truth)
    return float(correct) - len(solution_str) / 50
