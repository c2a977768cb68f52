"""The CPU platform plugin, and the four patches veRL 0.9.1 needs beside it on a CPU-only machine.

How it gets loaded: ``import verl`` imports every module named in ``VERL_USE_EXTERNAL_MODULES``
(`verl/__init__.py`, through ``verl.utils.import_utils.import_external_libs``). run.py sets
``VERL_USE_EXTERNAL_MODULES=examples.verl_on_cpu.platform,examples.verl_on_cpu.rollout`` in the
environment of ``python -m verl.trainer.main_ppo``; Ray's processes inherit it, so this module
runs in the driver and in every actor (TaskRunnerV1, WorkerDict, agent-loop and reward-loop
workers...) before veRL uses a device. Nothing in site-packages is edited.

What it replaces, each only while ``VERL_PLATFORM=cpu``:

1. ``PlatformCPU``, registered with veRL's own ``PlatformRegistry`` and selected by
   ``VERL_PLATFORM=cpu`` (`verl/plugin/platform/platform_manager.py`). Without it veRL finds no
   accelerator and falls back to ``PlatformCUDA`` (`verl/plugin/platform/platform_cuda.py`).
2. ``VERL_ENGINE_DEVICE=cuda``: ``EngineRegistry.get_engine_cls`` (`verl/workers/engine/base.py`)
   reads it instead of the platform's device name. The FSDP engines are registered for
   ``cuda`` and ``npu`` only (`verl/workers/engine/fsdp/transformer_impl.py`); their code runs
   on CPU once the platform answers ``cpu`` to ``get_device_name()``.
3. The backend string: ``verl/utils/distributed.py`` builds ``cpu:gloo,{device}:{backend}``,
   which here is ``cpu:gloo,cpu:gloo``; ``torch.distributed.init_process_group`` gets ``gloo``.
4. ``torch.Tensor.pin_memory`` returns the tensor itself: the FSDP2 engine gives a forward-only
   model (the reference policy) ``CPUOffloadPolicy(pin_memory=True)``
   (`verl/workers/engine/fsdp/transformer_impl.py`), and pinning needs an accelerator.
5. ``load_valuehead_model`` (`verl/utils/model.py`), which the FSDP engine imports when it
   builds the PPO critic, hard-codes ``attn_implementation="flash_attention_2"``: the one here
   loads the same ``AutoModelForTokenClassification`` with ``sdpa``.
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM = "cpu"


class CPUDevice:
    """What veRL calls on ``get_torch_device()`` (``torch.cuda`` on CUDA), answered for the CPU.

    ``is_available()`` is False on purpose: the memory helpers in `verl/utils/memory_utils.py`
    then skip themselves. Memory statistics are 0; ``mem_get_info`` reports host memory.
    """

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def set_device(device) -> None:
        pass

    @staticmethod
    def synchronize(device=None) -> None:
        pass

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def ipc_collect() -> None:
        pass

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def memory_allocated(device=None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        pass

    @staticmethod
    def set_per_process_memory_fraction(fraction, device=None) -> None:
        pass

    @staticmethod
    def get_device_name(device=None) -> str:
        return "cpu"


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """veRL's platform interface (`verl/plugin/platform/platform_base.py`) for the host CPU.

    ``current_device()`` is ``torch.device("cpu")``, not an index: veRL moves tensors with
    ``.to(get_device_id())``, and an int 0 would mean ``cuda:0``. The Ray resource stays
    ``GPU``: run.py declares one *logical* GPU (``num_gpus=1``; Ray does not check hardware),
    so veRL's placement groups and ``_check_resource_available`` work as on a GPU node.
    """

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPUDevice  # a class used as a namespace, like the torch.cuda module

    def is_available(self) -> bool:
        return True

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray sets it for the logical GPU; nothing reads it here

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def gloo_only(init_process_group):
    """Wrap ``torch.distributed.init_process_group``: ``cpu:gloo,cpu:gloo`` becomes ``gloo``."""

    def init(*args, backend=None, **kwargs):
        if isinstance(backend, str) and set(backend.split(",")) == {"cpu:gloo"}:
            backend = "gloo"
        return init_process_group(*args, backend=backend, **kwargs)

    init.gloo_only = True
    return init


def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
    """veRL's ``verl.utils.model.load_valuehead_model`` with ``sdpa`` attention, no trl fallback."""
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=local_path,
        torch_dtype=torch_dtype,
        config=model_config,
        attn_implementation="sdpa",
        trust_remote_code=trust_remote_code,
    )


def install() -> None:
    """Select the CPU platform and apply the patches, once per process."""
    if getattr(torch.distributed.init_process_group, "gloo_only", False):
        return  # already installed in this process
    import verl.utils.model

    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    torch.distributed.init_process_group = gloo_only(torch.distributed.init_process_group)
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    verl.utils.model.load_valuehead_model = load_valuehead_model


if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM:
    install()
