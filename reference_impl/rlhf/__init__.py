"""A small RLHF pipeline (PPO and GRPO) on the single controller.

One driver process (:mod:`reference_impl.rlhf.trainer`) drives every role
through ``RayWorkerGroup`` calls, as veRL 0.9.1's ``PPOTrainer.fit``
(``verl/trainer/ppo/v1/trainer_base.py``) does from inside its controller actor,
``TaskRunnerV1`` (``verl/trainer/main_ppo.py``); the roles
(:mod:`reference_impl.rlhf.workers`) are ``Worker`` subclasses that hold
FSDP2-sharded models. Run it with ``python -m reference_impl.rlhf --preset cpu``.
"""
