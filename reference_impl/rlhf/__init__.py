"""A small RLHF pipeline (PPO and GRPO) on the single controller.

One driver process (:mod:`reference_impl.rlhf.trainer`) drives every role
through ``RayWorkerGroup`` calls, as veRL's ``RayPPOTrainer.fit`` does; the
roles (:mod:`reference_impl.rlhf.workers`) are ``Worker`` subclasses that hold
FSDP2-sharded models. Run it with ``python -m reference_impl.rlhf --preset cpu``.
"""
