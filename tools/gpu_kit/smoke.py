"""Check (a) of the GPU kit: Ray sees the GPU, a one-rank WorkerGroup on it runs a call.

    python tools/gpu_kit/smoke.py [--cpu]

Starts a local Ray instance, makes a one-bundle ``RayResourcePool`` (one GPU, or with
``--cpu`` one CPU: ``use_gpu=False``), starts a one-rank ``RayWorkerGroup`` on it and calls
one registered method, which joins a torch.distributed group (NCCL on the GPU, gloo on the
CPU), all-reduces a tensor on its device and reports what the rank saw. Prints one JSON line
and exits 0 when every field is as expected, 1 otherwise (the line says which field).
With ``--cpu`` it is the kit's completeness check on a machine without CUDA
(tests/test_gpu_kit.py): every import that the GPU path makes, with the CPU's resources.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="use_gpu=False: gloo on one CPU")
    use_gpu = not parser.parse_args(argv).cpu

    import ray
    import torch
    import torch.distributed as dist

    from reference_impl import (
        Dispatch,
        RayClassWithInitArgs,
        RayResourcePool,
        RayWorkerGroup,
        Worker,
        register,
    )

    class Probe(Worker):
        @register(Dispatch.ONE_TO_ALL)
        def probe(self):
            backend = self.init_process_group()  # NCCL where the rank has a GPU, else gloo
            device = "cuda" if torch.cuda.is_available() else "cpu"
            t = torch.ones(1, device=device)
            dist.all_reduce(t)
            return {
                "backend": backend,
                "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "all_reduce": t.item(),
            }

    ray.init(num_cpus=2, num_gpus=None if use_gpu else 0)
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        pool = RayResourcePool([1], use_gpu=use_gpu, max_colocate_count=1)
        group = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Probe)))
        (seen,) = group.probe()
    finally:
        ray.shutdown()
    result = {"use_gpu": use_gpu, "ray_gpus": gpus, "ray_version": ray.__version__, **seen}
    expected = {"backend": "nccl" if use_gpu else "gloo", "all_reduce": 1.0}
    if use_gpu:
        expected["device_is_cuda"] = True
        result["device_is_cuda"] = seen["device"] != "cpu" and gpus >= 1
    wrong = [k for k, v in expected.items() if result[k] != v]
    result["ok"] = not wrong
    if wrong:
        result["unexpected"] = {k: result[k] for k in wrong}
    print(json.dumps(result))
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
