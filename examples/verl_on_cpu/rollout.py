"""The rollout backend ``hfcpu``: a CPU stand-in for vLLM, HF ``generate`` in one Ray actor.

vLLM is a GPU package, so the one piece of veRL 0.9.1 that cannot run on a CPU as shipped is the
rollout engine. veRL finds its rollout through two registries, keyed by
``actor_rollout_ref.rollout.name``; this module adds the name ``hfcpu`` to both:

* ``RolloutReplicaRegistry`` (`verl/workers/rollout/replica.py`): the controller side.
  ``LLMServerManager`` (`verl/workers/rollout/llm_server.py`) builds one replica per rollout
  world, calls ``init_hybrid(worker_group)``, and hands each replica's server handle to the
  ``GlobalRequestLoadBalancer``, through which the agent-loop workers call ``generate``.
  ``HFCPUReplica`` stands where ``vLLMReplica`` stands
  (`verl/workers/rollout/vllm_rollout/vllm_async_server.py`), and ``HFCPUServer`` where
  ``vLLMHttpServer`` does: one named actor per replica instead of an HTTP server and vLLM's
  engine-core processes.
* ``_ROLLOUT_REGISTRY`` (`verl/workers/rollout/base.py`, a private dict): the worker side.
  Each ``WorkerDict`` with the rollout role builds the adapter named there
  (``get_rollout_class`` in `verl/workers/engine_workers.py`). ``HFCPUServerAdapter`` stands
  where vLLM's ``ServerAdapter`` (`verl/workers/rollout/vllm_rollout/vllm_rollout.py`) does.
  vLLM's adapter sends the trainer's weights to its server over CUDA IPC through a ZMQ socket;
  this one puts the full state dict into Ray's object store and passes the reference.

The trainer drives the server the way it drives vLLM: ``sleep`` before training, ``wake_up``
twice per weight sync (tags ``weights``, then ``kv_cache``), ``update_weights`` once per step
plus once at start. On the CPU there is no device memory to free, so those are no-ops that keep
the call pattern visible in Ray's task list and timeline.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "hfcpu"


def server_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name, in veRL's pattern ``{rollout name}_server_{replica}_{node}``."""
    return f"{NAME}_server_{replica_rank}_{node_rank}"


class HFCPUServer:
    """One rollout replica's server: the policy as a ``transformers`` model, generating token ids.

    ``generate`` has the signature the agent loop calls on vLLM's server
    (``LLMServerClient.generate`` in `verl/workers/rollout/llm_server.py`) and returns veRL's
    ``TokenOutput``. Requests run one at a time on a thread, so the actor's event loop stays free
    for the control calls (``sleep``, ``wake_up``, ``update_weights``).
    """

    def __init__(self, config, model_config, replica_rank: int):
        from transformers import AutoModelForCausalLM
        from verl.utils.fs import copy_to_local

        torch.set_num_threads(1)
        self.config = config
        self.replica_rank = replica_rank
        self.model = AutoModelForCausalLM.from_pretrained(
            copy_to_local(model_config.path), torch_dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        self.eos_token_id = self.model.generation_config.eos_token_id
        self.pad_token_id = self.model.generation_config.pad_token_id
        self.global_steps = None
        self.lock = asyncio.Lock()

    def get_server_address(self) -> str:
        """A unique key for the load balancer; there is no HTTP endpoint behind it."""
        return f"{NAME}://replica-{self.replica_rank}"

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data=None,
        video_data=None,
        **kwargs,
    ) -> TokenOutput:
        async with self.lock:
            tokens, log_probs = await asyncio.to_thread(self._generate, prompt_ids, sampling_params)
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    @torch.no_grad()
    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any]):
        params = dict(sampling_params)
        limit = params.pop("max_tokens", None) or params.pop("max_new_tokens", None)
        limit = min(limit or self.config.response_length, self.config.response_length)
        temperature = float(params.get("temperature", 1.0))
        greedy = temperature == 0 or params.get("do_sample") is False
        top_k = int(params.get("top_k", -1))
        output = self.model.generate(
            torch.tensor([prompt_ids]),
            attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=limit,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None if greedy else float(params.get("top_p", 1.0)),
            top_k=None if greedy or top_k <= 0 else top_k,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
        tokens = output.sequences[0, len(prompt_ids) :].tolist()
        if not params.get("logprobs"):
            return tokens, None
        # log-probabilities of the sampled tokens under the processed distribution, the way
        # vLLM reports them with logprobs_mode=processed_logprobs
        scores = torch.stack(output.scores, dim=1)[0].float().log_softmax(dim=-1)
        chosen = scores.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)
        return tokens, chosen.tolist()

    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps=None) -> int:
        """Load the trainer's weights; ``state_dict`` arrives from the object store."""
        async with self.lock:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected:
            raise KeyError(f"weights the rollout model does not have: {unexpected[:5]}")
        self.global_steps = global_steps
        return len(state_dict)

    # The lifecycle calls veRL makes on a rollout server. vLLM frees and restores GPU memory
    # here; a CPU model has nothing to free.
    async def wake_up(self, tags: list[str] | None = None):
        pass

    async def sleep(self):
        pass

    async def clear_kv_cache(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self):
        pass

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    async def start_profile(self, **kwargs):
        pass

    async def stop_profile(self):
        pass


class HFCPUReplica(RolloutReplica):
    """Launches one ``HFCPUServer`` per replica, beside the replica's ``WorkerDict`` actors.

    Like ``vLLMReplica.launch_servers``, the server is pinned to the node of the replica's first
    worker and gets no resources of its own (Ray's actor default: 1 CPU to be placed, 0 held).
    """

    async def launch_servers(self):
        assert self.nnodes == 1, "the CPU stand-in serves a replica on one node"
        node_id = await self.workers[0].__ray_call__.remote(
            lambda worker: ray.get_runtime_context().get_node_id()
        )
        server = (
            ray.remote(HFCPUServer)
            .options(
                name=server_name(self.replica_rank),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                max_concurrency=self.max_concurrency,
            )
            .remote(
                config=self.config, model_config=self.model_config, replica_rank=self.replica_rank
            )
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()


class HFCPUServerAdapter(BaseRollout):
    """The rollout object inside each ``WorkerDict``: forwards weights and lifecycle calls.

    Only the first rank of a replica talks to the server, as in vLLM's ``ServerAdapter``.
    """

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        self.is_leader = rank % rollout_world_size == 0
        self.server = None

    def _server(self):
        if self.server is None:  # the server starts after the worker group
            self.server = ray.get_actor(server_name(self.replica_rank))
        return self.server

    async def resume(self, tags: list[str]):
        if self.config.free_cache_engine and self.is_leader:
            await self._server().wake_up.remote(tags=tags)

    async def release(self):
        if self.config.free_cache_engine and self.is_leader:
            await self._server().sleep.remote()

    async def update_weights(
        self, weights, global_steps=None, wire_format="named_tensors", **kwargs
    ):
        assert wire_format == "named_tensors", f"hfcpu takes full tensors, not {wire_format!r}"
        state_dict = {name: tensor.detach().to("cpu", torch.float32) for name, tensor in weights}
        if self.is_leader:
            ref = ray.put(state_dict)  # the object store stands where vLLM's CUDA IPC stands
            await self._server().update_weights.remote(ref, global_steps=global_steps)


RolloutReplicaRegistry.register(NAME, lambda: HFCPUReplica)
rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.HFCPUServerAdapter"
