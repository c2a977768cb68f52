"""What changes inside veRL's ``TaskRunnerV1`` process for a plan: the workers, and nothing else.

:func:`install` runs in that process (through ``__ray_call__``) before ``TaskRunnerV1.run``:

1. every actor the process creates goes through ``standins._remote``: recorded, and, for veRL's
   classes, started as a stand-in with the same resource request (``standins.py``);
2. veRL's rollout replica for ``vllm``, ``sglang`` and ``trtllm`` is a ``PlanReplica`` that
   starts that engine's servers as stand-ins: the engines are not installed, and each
   replica's module imports its own (`verl/workers/rollout/vllm_rollout/vllm_async_server.py`,
   `verl/workers/rollout/sglang_rollout/async_sglang_server.py`,
   `verl/workers/rollout/trtllm_rollout/trtllm_async_server.py`);
3. ``PPOTrainer._init_dataloader`` builds no data set: it only sets the step counts;
4. ``PPOTrainer.fit`` returns at once: the plan ends where training would begin;
5. ``transfer_queue.close`` is left to the planner, which reads TransferQueue's actors first.

Everything else in ``TaskRunnerV1.run`` is veRL 0.9.1's own code: ``tq.init``, the trainer's
``_setup`` (resource pools, placement groups, worker groups, LLM server manager, reward loop,
checkpoint engine) and the agent-loop manager.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from reference_impl.plan import standins

SERVER_METHODS = [
    "get_master_address",
    "launch_server",
    "get_server_address",
    "wake_up",
    "sleep",
    "abort_all_requests",
    "resume_generation",
    "clear_kv_cache",
    "release_kv_cache",
    "resume_kv_cache",
    "start_profile",
    "stop_profile",
    "wait_for_requests_to_drain",
    "generate",
]


@dataclass(frozen=True)
class Engine:
    """How one rollout engine's replica starts its servers in veRL 0.9.1 (its
    ``launch_servers``): the server class and module, the actor-name prefix, and whether it
    starts one server per node of the replica or one per replica."""

    server: str
    module: str
    prefix: str
    per_node: bool


ENGINES = {
    # vLLMReplica.launch_servers: one server per node, named vllm_server_<replica>_<node>
    "vllm": Engine(
        "vLLMHttpServer", "verl.workers.rollout.vllm_rollout.vllm_async_server", "vllm_", True
    ),
    # SGLangReplica.launch_servers: the same layout, named sglang_server_<replica>_<node>
    "sglang": Engine(
        "SGLangHttpServer",
        "verl.workers.rollout.sglang_rollout.async_sglang_server",
        "sglang_",
        True,
    ),
    # TRTLLMReplica.launch_servers: one server per replica, on the node of its first
    # worker (the first bundle of its first placement group), named trtllm_server_<replica>
    "trtllm": Engine(
        "TRTLLMHttpServer",
        "verl.workers.rollout.trtllm_rollout.trtllm_async_server",
        "trtllm_",
        False,
    ),
}


def _replica_class(engine: Engine):
    from verl.workers.rollout.replica import RolloutReplica

    class PlanReplica(RolloutReplica):
        """veRL's ``RolloutReplica`` (its init_hybrid, init_colocated, init_standalone run as they
        are), with ``engine``'s ``launch_servers`` placement: its servers hard-pinned to the node
        of the first worker they serve, with Ray's default request."""

        async def launch_servers(self):
            step = self.gpus_per_replica_node if engine.per_node else len(self.workers)
            node_ids = [
                await worker.__ray_call__.remote(lambda w: ray.get_runtime_context().get_node_id())
                for worker in self.workers[::step]
            ]
            if self.is_reward_model:
                role = "reward_"
            elif self.is_teacher_model and engine.per_node:  # TRTLLMReplica names no teacher
                role = "teacher_"
            else:
                role = ""
            base = f"{engine.prefix}server_{role}{self.replica_rank}"
            self.servers = [
                standins.standin_actor(
                    engine.server,
                    engine.module,
                    SERVER_METHODS,
                    name=(f"{base}_{node_rank}" if engine.per_node else base) + self.name_suffix,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                    max_concurrency=self.max_concurrency,
                )
                for node_rank, node_id in enumerate(node_ids)
            ]
            self._server_handle = self.servers[0]
            self._server_address = f"stand-in:{self.replica_rank}"

    return PlanReplica


def install(record_path: str) -> None:
    """Apply the changes above in this process; actors are recorded to ``record_path``."""
    os.environ["PLAN_RECORD"] = record_path
    os.environ["PLAN_STANDINS"] = "1"
    os.environ["PLAN_ROLE"] = "TaskRunnerV1"
    standins.install()

    import transfer_queue
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    for name, engine in ENGINES.items():
        replica = _replica_class(engine)
        RolloutReplicaRegistry.register(name, lambda replica=replica: replica)

    def init_dataloader(self):
        steps = self.config.trainer.total_training_steps or 1
        self.train_dataloader = self.val_dataloader = None
        self.steps_per_epoch = self.total_training_steps = steps

    PPOTrainer._init_dataloader = init_dataloader
    PPOTrainer.fit = lambda self, agent_loop_manager: None
    transfer_queue.close = lambda: None
