"""Bad input gets a clear error: each test pins that the message names what was wrong.

The CLI and resume cases need no Ray; the pool, group and worker cases share one local
Ray instance (``cluster``, started once for the module). Every test has a hard timeout,
so that a check that would wait (a pool that never fits) fails instead of hanging.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import ray
import torch

from reference_impl import (
    BatchSplitError,
    DataProto,
    DispatchError,
    PlacementTimeoutError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    WorkerGroupError,
    register,
)
from reference_impl.decorator import Dispatch
from reference_impl.rlhf import checkpoint
from reference_impl.rlhf.__main__ import main
from reference_impl.rlhf.config import ConfigError, make_config
from reference_impl.rlhf.trainer import RLHFTrainer

# A hang detector, not a speed test: generous enough for a machine doing other work.
pytestmark = [pytest.mark.timeout(180), pytest.mark.reads_docs()]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


def one_list_per_rank(worker_group, *args, **kwargs):
    """A custom dispatch_fn with a plausible slip: each rank's arguments in one list."""
    return [list(args) for _ in range(worker_group.world_size)]


def args_without_kwargs(worker_group, *args, **kwargs):
    """Another slip: the per-rank arguments alone, the kwargs dict forgotten."""
    return ([args] * worker_group.world_size,)


def collect_all(worker_group, outputs):
    return outputs


class Doubler(Worker):
    @register({"dispatch_fn": one_list_per_rank, "collect_fn": collect_all})
    def echo(self, value):
        return value

    @register({"dispatch_fn": args_without_kwargs, "collect_fn": collect_all})
    def echo_again(self, value):
        return value

    @register(Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"y": data.batch["x"] * 2})

    @register(Dispatch.ONE_TO_ALL)
    def fail_on_rank_one(self):
        if self.rank == 1:
            raise ValueError("rank one refuses")
        return self.rank


@pytest.fixture(scope="module")
def doublers(cluster):
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    yield RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(Doubler)))
    pool.release()


def rows(n: int) -> DataProto:
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)})


# --- the CLI (no Ray: every case fails before it starts) -------------------------------------


@pytest.mark.parametrize(
    "args, named",
    [
        (["--total-steps", "-3"], r"total_steps must be an integer >= 1, got -3"),
        (["--world-size", "0"], r"world_size must be an integer >= 1, got 0"),
        (["--nnodes", "0"], r"nnodes must be an integer >= 1, got 0"),
        (["--save-freq", "-1"], r"save_freq must be an integer >= 0, got -1"),
        (["--set", "preset=tpu"], r"--set preset= is not accepted; use --preset \{cpu\|gpu\}"),
        (["--set", "algo=dpo"], r"use --algo \{grpo\|ppo\}"),
        (["--set", "n=abc"], r"--set n= takes an integer, got 'abc'"),
        (["--set", "top_p=high"], r"--set top_p= takes a number, got 'high'"),
        (["--set", "top_p=2"], r"top_p must be in \(0, 1\], got 2.0"),
        (["--set", "n"], r"--set takes NAME=VALUE, got 'n'"),
        (["--set", "nn=3"], r"unknown option\(s\) \['nn'\]"),
    ],
)
def test_cli_refuses_an_impossible_value_and_names_it(args, named, tmp_path, capsys):
    assert main([*args, "--output-dir", str(tmp_path / "run")]) == 2
    assert re.search(named, capsys.readouterr().err)


def test_cli_names_an_output_dir_it_cannot_write(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert main(["--output-dir", str(blocker / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {blocker / 'run'} cannot be written" in err


# --- resume -----------------------------------------------------------------------------------


def write_metrics(run, lines: list[str]) -> str:
    path = run / "metrics.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path.read_text()


def write_checkpoint(run, step: int, algo: str = "grpo", driver: bytes | None = None) -> None:
    """A pointer and a driver.pt as checkpoint.save writes them (no worker shards)."""
    path = run / "checkpoints" / f"global_step_{step}"
    path.mkdir(parents=True)
    state = {"step": step, "algo": algo, "data_rng": torch.Generator().get_state()}
    torch.save(state, path / "driver.pt")
    if driver is not None:
        (path / "driver.pt").write_bytes(driver)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))


def resume(run, algo: str = "grpo") -> None:
    config = make_config(algo, output_dir=str(run), resume=True, tensorboard=False)
    RLHFTrainer(config).fit(progress=False)  # fails before it touches a worker


def test_resume_without_a_checkpoint_refuses_and_keeps_the_metrics(tmp_path, capsys):
    before = write_metrics(tmp_path, ['{"step": 0, "loss": 1.0}', '{"step": 1, "loss": 0.5}'])
    assert main(["--resume", "--output-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--resume: {tmp_path} holds" in err and "no checkpoint" in err
    assert "--save-freq" in err and "new --output-dir" in err
    with pytest.raises(ConfigError, match="nothing to resume from"):
        resume(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == before  # not a byte lost


def test_resume_names_a_pointer_that_holds_no_step(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("global_step_3")
    with pytest.raises(RuntimeError, match=r"latest_checkpointed_iteration.txt should hold"):
        resume(tmp_path)


def test_resume_names_a_step_whose_checkpoint_is_missing(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("7")
    with pytest.raises(RuntimeError, match=r"cannot resume from step 7: .*global_step_7"):
        resume(tmp_path)


def test_resume_names_a_truncated_driver_file(tmp_path):
    write_checkpoint(tmp_path, 3)
    driver = tmp_path / "checkpoints" / "global_step_3" / "driver.pt"
    driver.write_bytes(driver.read_bytes()[:100])
    with pytest.raises(RuntimeError, match=rf"cannot load checkpoint {driver}: "):
        resume(tmp_path)


def test_resume_refuses_a_checkpoint_of_the_other_algorithm(tmp_path):
    write_checkpoint(tmp_path, 3, algo="grpo")
    with pytest.raises(ConfigError, match="checkpoint at step 3 .* was written by grpo, this run"):
        resume(tmp_path, algo="ppo")


def test_resume_names_a_half_written_metrics_line(tmp_path):
    write_checkpoint(tmp_path, 1)
    before = write_metrics(tmp_path, ['{"step": 0, "loss": 1.0}', '{"step": 1, "lo'])
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2, is not JSON"):
        resume(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == before


# --- resource pools ---------------------------------------------------------------------------


def test_a_strict_pack_group_larger_than_any_node_fails_at_once(cluster):
    start = time.monotonic()
    with pytest.raises(PlacementTimeoutError, match=r"no node can ever hold a group of 64 bundles"):
        RayResourcePool([64], use_gpu=False, max_colocate_count=1).slots()
    assert time.monotonic() - start < 10  # not the 60 s placement timeout


@pytest.mark.parametrize(
    "bad, error",
    [(4, TypeError), ([2.0], TypeError), ([True], TypeError), ([0], ValueError), ([], ValueError)],
)
def test_process_on_nodes_must_be_a_list_of_positive_ints(bad, error):
    with pytest.raises(error, match=r"process_on_nodes must be a (non-empty )?list of positive"):
        RayResourcePool(bad, use_gpu=False)


@pytest.mark.parametrize("bad", ["3", 2.0, True, None])
def test_max_colocate_count_must_be_an_int_and_is_named(bad):
    with pytest.raises(
        TypeError, match=r"max_colocate_count must be an int.*got " + re.escape(repr(bad))
    ):
        RayResourcePool([1], use_gpu=False, max_colocate_count=bad)


@pytest.mark.parametrize("bad", [0, -1])
def test_max_colocate_count_below_one_is_refused(bad):
    with pytest.raises(ValueError, match=rf"max_colocate_count must be >= 1, got {bad}"):
        RayResourcePool([1], use_gpu=False, max_colocate_count=bad)


# --- worker groups ----------------------------------------------------------------------------


def test_an_unknown_dispatch_mode_is_named_at_decoration():
    with pytest.raises(DispatchError, match=r"unknown dispatch mode.*DP_COMPUTE_PROTOO"):
        register("DP_COMPUTE_PROTOO")


def test_a_batch_that_does_not_divide_by_the_world_size_names_both(doublers):
    with pytest.raises(BatchSplitError, match=r"batch of 5 does not split"):
        doublers.double(rows(5))


def test_a_plain_list_where_a_batch_is_expected_is_named(doublers):
    with pytest.raises(DispatchError, match=r"splits DataProto arguments only, but argument 0"):
        doublers.double([1.0, 2.0])


def test_a_dispatch_fn_that_returns_a_list_is_named_with_what_it_returned(doublers):
    named = r"the dispatch_fn of echo\(\) must return \(args, kwargs\).*got list: \[\[7\], \[7\]\]"
    with pytest.raises(DispatchError, match=named):
        doublers.echo(7)


def test_a_dispatch_fn_that_forgets_the_kwargs_is_named_with_what_it_returned(doublers):
    named = r"the dispatch_fn of echo_again\(\) must return \(args, kwargs\).*got tuple: "
    with pytest.raises(DispatchError, match=named):
        doublers.echo_again(7)


def test_a_worker_method_that_raises_names_the_rank_and_method(doublers):
    with pytest.raises(WorkerGroupError, match=r"rank 1 .*fail_on_rank_one\(\) raised ValueError"):
        doublers.fail_on_rank_one()


# --- DataProto --------------------------------------------------------------------------------


def test_concat_of_parts_with_different_keys_names_the_keys():
    a = DataProto.from_dict(non_tensors={"uid": np.array(["a"], dtype=object)})
    b = DataProto.from_dict(non_tensors={"label": np.array(["b"], dtype=object)})
    with pytest.raises(ValueError, match=r"non_tensor_batch keys differ: \['uid'\] vs \['label'\]"):
        DataProto.concat([a, b])


def test_concat_of_parts_whose_tensor_shapes_differ_names_the_key_and_shapes():
    short = DataProto.from_dict({"responses": torch.zeros(2, 3, dtype=torch.long)})
    long = DataProto.from_dict({"responses": torch.zeros(2, 5, dtype=torch.long)})
    named = r"'responses' has rows of shape \(3,\) in part 0 but \(5,\) in part 1"
    with pytest.raises(ValueError, match=named):
        DataProto.concat([short, long])


def test_chunk_into_zero_parts_names_chunks():
    with pytest.raises(ValueError, match=r"chunks must be >= 1, got 0"):
        rows(4).chunk(0)


def test_an_index_out_of_range_names_the_index_and_size():
    with pytest.raises(IndexError, match=r"index 7 is out of bounds for dimension 0 with size 4"):
        rows(4)[7]


def test_non_tensor_data_of_the_wrong_length_names_the_key():
    named = r"non_tensor_batch\['uid'\] has length 3 but the batch size is 4"
    with pytest.raises(ValueError, match=named):
        DataProto.from_dict(
            {"x": torch.zeros(4)}, non_tensors={"uid": np.array(["a", "b", "c"], dtype=object)}
        )


def test_concat_of_int64_and_float32_parts_names_the_key_and_dtypes():
    ids = DataProto.from_dict({"input_ids": torch.tensor([2**24 + 1])})
    scores = DataProto.from_dict({"input_ids": torch.tensor([0.5])})
    named = r"'input_ids' is torch.int64 in part 0 but torch.float32 in part 1"
    with pytest.raises(TypeError, match=named):
        DataProto.concat([ids, scores])


def test_resume_names_a_truncated_checkpoint_shard_and_the_rank(cluster, tmp_path):
    config = make_config("grpo", world_size=1, output_dir=str(tmp_path), tensorboard=False)
    trainer = RLHFTrainer(config)
    try:
        trainer.init_workers()
        checkpoint.save(str(tmp_path), 1, trainer.roles(), "grpo", trainer.data_rng)
        actor = tmp_path / "checkpoints" / "global_step_1" / "actor"
        for shard in actor.glob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:64])
        with pytest.raises(WorkerGroupError) as failure:
            checkpoint.load(str(tmp_path), 1, trainer.roles(), trainer.data_rng)
    finally:
        trainer.shutdown()
    assert f"cannot load checkpoint {actor} on rank 0" in str(failure.value)
    assert "load_checkpoint()" in str(failure.value)
