"""The RLHF pipeline: reward, rollout and config checks in-process; the whole loop on real Ray.

Tests that start Ray are marked ``rlhf`` and run in ``nox -s rlhf`` (CI runs it
after ``nox``): a short run in the separate-pools layout that must report every
metric, a killed run that must resume on the same trajectory, and the learning
test (the CPU preset reaches ``critic/score/mean >= 0.9`` within 5 minutes). One run on
Ray stays in the default suite: a single GRPO step of the gpu preset's shape on CPU, so
that a mistake in that preset fails on every machine.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from reference_impl.rlhf.config import ConfigError, check, make_config
from reference_impl.rlhf.metrics import score_metrics
from reference_impl.rlhf.model import PRESETS, build_actor, count_parameters, qwen2_config
from reference_impl.rlhf.rollout import generate, response_log_probs, top_p_filter
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer

pytestmark = pytest.mark.reads_docs()

TOK = CharTokenizer()
TASK = DigitSumTask(num_digits=2)
D = {d: TOK.ids[str(d)] for d in range(10)}
PAD, EOS, UNK = TOK.pad_token_id, TOK.eos_token_id, TOK.unk_token_id


# --- the reward cannot be gamed -------------------------------------------------------------


def test_exact_and_near_answers_score_by_distance():
    responses = torch.tensor(
        [[D[4], D[9], EOS, PAD], [D[4], D[8], EOS, PAD], [D[0], D[0], EOS, PAD]]
    )
    scores, exact = TASK.score_responses(responses, torch.tensor([13, 13, 13]), TOK)
    assert scores.tolist() == pytest.approx([1.0, 0.9, 0.0])
    assert exact.tolist() == [True, False, False]


def test_padding_or_unknown_tokens_cannot_fake_an_answer():
    # A text-level check would be fooled: the decoder drops <pad> and <unk>.
    gamed = torch.tensor(
        [
            [D[4], PAD, D[9], EOS],  # decodes to "49"
            [UNK, D[4], D[9], EOS],  # decodes to "49"
            [D[4], D[9], PAD, EOS],  # EOS not right after the digits
            [D[4], D[9], D[0], D[0]],  # no EOS at all
        ]
    )
    assert [TOK.decode(row) for row in gamed[:2]] == ["49", "49"]
    scores, exact = TASK.score_responses(gamed, torch.full((4,), 13), TOK)
    assert scores.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert not exact.any()


def test_score_needs_room_for_eos():
    with pytest.raises(ValueError, match="generate at least 3 tokens"):
        TASK.score_responses(torch.zeros(2, 2, dtype=torch.long), torch.zeros(2), TOK)


# --- rollout --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model():
    config = qwen2_config(PRESETS["cpu"], TOK.vocab_size, PAD, TOK.bos_token_id, EOS)
    return build_actor(config, seed=0).eval()


def test_cpu_preset_has_about_0_4m_parameters(tiny_model):
    assert 350_000 <= count_parameters(tiny_model) <= 450_000


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = top_p_filter(logits, 0.7).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    assert top_p_filter(logits, 1e-9).isfinite().sum() == 1  # never empty


def test_kv_cache_generation_equals_recomputing_the_whole_sequence(tiny_model):
    prompts, _ = TASK.make_prompts(TOK, 8, torch.Generator().manual_seed(0))
    # top_p -> 0 keeps only the most likely token: greedy decoding, comparable step by step.
    out = generate(tiny_model, prompts, 5, EOS, PAD, top_p=1e-9)
    ids = prompts
    with torch.no_grad():
        for _ in range(5):
            next_token = tiny_model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, next_token], dim=1)
    mask = out["response_mask"].bool()
    assert torch.equal(out["responses"][mask], ids[:, prompts.shape[1] :][mask])


def eos_prone_model(eos_probability: float):
    """The cpu-preset model with an output layer that ignores the input: every step samples
    EOS with ``eos_probability`` and each other token uniformly (a zero weight, a bias).

    EOS is then certain to appear, at every position, whatever the random initial weights:
    a test of EOS handling that cannot pass by the model never emitting EOS.
    """
    config = qwen2_config(PRESETS["cpu"], TOK.vocab_size, PAD, TOK.bos_token_id, EOS)
    config.tie_word_embeddings = False
    model = build_actor(config, seed=0).eval()
    head = torch.nn.Linear(config.hidden_size, TOK.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        others = (1 - eos_probability) / (TOK.vocab_size - 1)
        head.bias.fill_(math.log(others))
        head.bias[EOS] = math.log(eos_probability)
    model.lm_head = head
    return model


def test_generation_stops_at_eos_and_masks_what_follows():
    model = eos_prone_model(0.35)
    prompts, _ = TASK.make_prompts(TOK, 64, torch.Generator().manual_seed(1))
    length = 6
    out = generate(model, prompts, length, EOS, PAD, generator=torch.Generator().manual_seed(2))
    responses, mask = out["responses"], out["response_mask"]
    is_eos = responses == EOS
    first_eos = torch.where(is_eos.any(-1), is_eos.int().argmax(-1), length)
    # The forced distribution puts EOS everywhere: first at step 1, in the middle, never.
    assert {0, 2, length} <= set(first_eos.tolist()), first_eos.tolist()
    for row in range(len(responses)):
        stop = int(first_eos[row])
        kept = min(stop + 1, length)  # up to and including EOS; all of a cut response
        assert mask[row].tolist() == [1] * kept + [0] * (length - kept), row
        assert (responses[row, kept:] == PAD).all(), row  # nothing sampled after EOS
        assert (responses[row, :stop] != EOS).all()
    prompt_length = prompts.shape[1]
    assert torch.equal(out["attention_mask"][:, prompt_length:], mask)
    assert torch.equal(out["input_ids"], torch.cat([prompts, responses], dim=1))
    # The reward sees what the mask says: a cut response (no EOS) is malformed.
    scores, _ = TASK.score_responses(responses, torch.full((64,), 9), TOK)
    assert (scores[first_eos == length] == 0).all()


def test_recomputed_log_probs_are_normalised(tiny_model):
    prompts, _ = TASK.make_prompts(TOK, 4, torch.Generator().manual_seed(3))
    out = generate(tiny_model, prompts, 3, EOS, PAD, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        log_probs, entropy = response_log_probs(
            tiny_model,
            out["input_ids"],
            out["attention_mask"],
            out["position_ids"],
            3,
            with_entropy=True,
        )
    assert log_probs.shape == entropy.shape == (4, 3)
    assert (log_probs <= 0).all() and (entropy >= 0).all()
    assert (entropy <= math.log(TOK.vocab_size) + 1e-5).all()


def test_log_probs_of_a_response_token_come_from_the_logits_one_position_earlier(tiny_model):
    # Computed independently: token t of the sequence is scored by the model run on tokens
    # 0 .. t-1 alone, its last logit divided by the temperature. A window shifted by one
    # (the logit at t scoring token t) gives other numbers, not just other bounds.
    prompts, _ = TASK.make_prompts(TOK, 3, torch.Generator().manual_seed(5))
    out = generate(tiny_model, prompts, 4, EOS, PAD, generator=torch.Generator().manual_seed(6))
    ids, temperature = out["input_ids"], 0.7
    prompt_length = prompts.shape[1]
    with torch.no_grad():
        got = response_log_probs(
            tiny_model, ids, torch.ones_like(ids), out["position_ids"], 4, temperature
        )
        want = torch.empty(3, 4)
        for j in range(4):
            t = prompt_length + j
            logits = tiny_model(input_ids=ids[:, :t]).logits[:, -1].float() / temperature
            want[:, j] = logits.log_softmax(-1).gather(-1, ids[:, t : t + 1]).squeeze(-1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


# --- configuration errors -------------------------------------------------------------------


def test_score_metrics_count_groups_with_one_score_and_hits_per_target():
    # Four prompts of two responses each, interleaved: a group is its uid, not its rows.
    uid = np.array(["a", "b", "c", "d", "a", "b", "c", "d"], dtype=object)
    scores = torch.tensor([1.0, 0.9, 0.5, 0.0, 1.0, 1.0, 0.5, 0.0])
    exact = scores == 1.0
    targets = torch.tensor([3, 3, 5, 7, 3, 3, 5, 7])
    got = score_metrics(scores, exact, targets, uid)
    one_each = score_metrics(scores, exact, targets, np.array(list("abcdefgh"), dtype=object))
    assert "reward/zero_variance_groups" not in one_each  # PPO: n = 1
    # A prompt with one response has nothing to compare: it is left out, not counted as same.
    mixed = score_metrics(
        torch.tensor([1.0, 0.0, 1.0, 1.0, 0.3]),
        torch.tensor([True, False, True, True, False]),
        torch.tensor([3, 3, 5, 5, 7]),
        np.array(list("aabbe"), dtype=object),
    )
    assert mixed["reward/zero_variance_groups"] == 0.5  # b, of a and b
    assert got == {
        "reward/zero_variance_groups": 0.75,  # a (1, 1), c (0.5, 0.5), d (0, 0); not b
        "reward/exact_match/target_3": 0.75,
        "reward/exact_match/target_5": 0.0,
        "reward/exact_match/target_7": 0.0,
    }


def test_a_batch_that_does_not_split_across_ranks_is_refused():
    with pytest.raises(ConfigError, match=r"do not split across world_size=2.*multiple of"):
        make_config("ppo", train_batch_size=3, n=1, ppo_mini_batch_size=1)


def test_ppo_mini_batch_size_counts_prompts_as_in_verl():
    # veRL 0.9.1 multiplies actor.ppo_mini_batch_size by rollout.n before each update
    # (verl/trainer/ppo/v1/trainer_base.py, PPOTrainer._update_actor) and the worker divides
    # the product by the data-parallel size (engine_workers.py, TrainingWorker.train_mini_batch).
    config = make_config("grpo", train_batch_size=12, n=4, ppo_mini_batch_size=3, world_size=2)
    assert config.mini_batch_responses == 3 * 4
    assert config.mini_batch_rows_per_rank == 3 * 4 // 2

    # What one rank of update_actor / update_critic iterates over: its share of the step's
    # responses, in mini-batches of P * G / world_size rows, train_batch_size / P per epoch.
    from reference_impl.data_proto import DataProto
    from reference_impl.rlhf.workers import mini_batches

    share = DataProto.from_dict({"x": torch.arange(config.responses_per_step // 2)})
    batches = list(mini_batches(share, config.mini_batch_rows_per_rank, 2, torch.Generator()))
    assert [len(mb) for mb in batches] == [6] * (12 // 3) * 2


def test_default_mini_batches_hold_64_responses():
    # The unit changed from responses to prompts; the presets kept their mini-batch size.
    grpo, ppo = make_config("grpo"), make_config("ppo")
    assert (grpo.ppo_mini_batch_size, grpo.n, grpo.mini_batch_responses) == (8, 8, 64)
    assert (ppo.ppo_mini_batch_size, ppo.n, ppo.mini_batch_responses) == (64, 1, 64)


def test_mini_batches_that_do_not_fit_are_refused():
    with pytest.raises(ConfigError, match=r"train_batch_size=8 prompts .* ppo_mini_batch_size=3 "):
        make_config("grpo", train_batch_size=8, ppo_mini_batch_size=3)
    with pytest.raises(ConfigError, match=r"ppo_mini_batch_size \* n = 1 \* 3 = 3 responses"):
        make_config("grpo", train_batch_size=4, n=3, ppo_mini_batch_size=1, world_size=2)


def test_more_gpus_than_the_cluster_has_are_refused():
    config = make_config("grpo", "gpu", world_size=4)
    with pytest.raises(ConfigError, match="needs 4 GPUs but the Ray cluster has 1"):
        check(config, gpus_available=1)


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown option.*'lr'.*valid ones"):
        make_config("grpo", lr=0.1)


def test_cli_reports_a_bad_config_and_exits_2():
    done = subprocess.run(
        [sys.executable, "-m", "reference_impl.rlhf", "--set", "n=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "GRPO normalises within groups" in done.stderr


# --- the gpu preset's shape, on CPU ----------------------------------------------------------


def test_gpu_preset_shape_takes_an_update_step_on_cpu(tmp_path):
    """The gpu preset (Qwen2.5-0.5B's shape, its learning rates) through the real workers:
    Ray WorkerGroup, FSDP2 over gloo, one GRPO step (generation, both log-prob passes, an
    update), on CPU in fp32.

    A shape or config mistake in the preset fails here on every machine, not first on a GPU.
    One rank: the model has 358M parameters (this task's vocabulary is 15 tokens), so the
    worker holds the actor (1.4 GB in fp32), its gradients (1.4 GB), AdamW's two moments
    (2.9 GB), the reference (1.4 GB) and the rollout copy (1.4 GB): about 9 GB, which fits
    this 23 GB machine beside other jobs; two ranks would add a second rollout copy and
    the gathered parameters of each, about 13 GB. Batch: 2 prompts x 2 responses.
    """
    config = make_config("grpo", "gpu")
    assert (config.device, config.world_size) == ("cuda", 1)  # the preset is for GPUs
    small = ["train_batch_size=2", "n=2", "ppo_mini_batch_size=2", "ppo_epochs=1"]
    # No format warm-up: it would repeat the update's work (a forward, a backward, AdamW).
    # Untrained, every response scores 0, so the advantages are 0 and the actor equals the
    # reference: an entropy bonus is what gives the update a gradient to check.
    fast = ["device=cpu", "warmup_steps=0", "entropy_coeff=0.01"]
    sets = [arg for item in [*fast, *small] for arg in ("--set", item)]
    start = time.monotonic()
    process = run_cli(
        tmp_path, "--preset", "gpu", "--algo", "grpo", "--total-steps", "1", *sets, wait=False
    )
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output[-3000:]
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1]
    step = rows[1]
    assert step["perf/total_num_tokens"] == 4 * 4 + step["response_length/mean"] * 4
    for name in ("actor/grad_norm", "actor/pg_loss", "actor/kl_loss", "perf/mfu/actor"):
        assert math.isfinite(step[name]), (name, step[name])
    assert step["actor/grad_norm"] > 0
    print(f"gpu preset on CPU: {time.monotonic() - start:.0f} s")


# --- the loop on Ray ------------------------------------------------------------------------

REQUIRED = [
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/step",
    "perf/throughput",
    "perf/mfu/actor",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "critic/score/mean",
    "response_length/mean",
    "reward/exact_match",
    "actor/grad_clipped",
]
SHORT = ("--set", "warmup_steps=20")  # a short format warm-up: these runs check plumbing
PPO_ONLY = ["timing_s/values", "timing_s/update_critic", "critic/vf_explained_var"]


def run_cli(output_dir: Path, *args: str, wait: bool = True):
    module = [sys.executable, "-m", "reference_impl.rlhf"]
    command = [*module, "--output-dir", str(output_dir), "--no-progress", *args]
    # A session of its own, so a kill takes Ray's processes down with the driver.
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if wait:
        output, _ = process.communicate(timeout=280)
        assert process.returncode == 0, output[-3000:]
    return process


def metrics(output_dir: Path) -> list[dict]:
    path = output_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# The pipeline's runs on Ray take half a minute or more each, so they live in `nox -s rlhf`
# (CI runs it after `nox`). GRPO and colocated PPO also run on the docs pages
# (docs/rlhf/index.md, docs/rlhf/one-step.md), whose outputs list their metrics.
@pytest.mark.rlhf
@pytest.mark.parametrize("algo, layout", [("ppo", "separate"), ("grpo", "colocated")])
def test_a_few_steps_report_every_metric(tmp_path, algo, layout):
    run_cli(tmp_path, "--algo", algo, "--layout", layout, "--total-steps", "2", *SHORT)
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]  # step 0: the format warm-up
    names = REQUIRED + (PPO_ONLY if algo == "ppo" else [])
    for row in rows[1:]:
        missing = [n for n in names if n not in row]
        assert not missing, missing
        assert all(math.isfinite(row[n]) for n in names)
        assert 0 <= row["critic/score/mean"] <= 1
        if algo == "grpo":  # no critic: none of its stages or metrics
            assert not [n for n in PPO_ONLY if n in row], row
            assert 0 <= row["reward/zero_variance_groups"] <= 1
        per_target = [n for n in row if n.startswith("reward/exact_match/target_")]
        assert per_target and all(0 <= row[n] <= 1 for n in per_target), row
    # The library draws nothing: charts are benchmarks/charts.py's (tests/test_records.py).
    assert not list(tmp_path.glob("*.png"))
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.rlhf
def test_the_static_rollout_trains_on_the_same_trajectory_as_the_eager_one(tmp_path):
    """enforce_eager=false samples through StaticRollout (eager here, a CUDA graph on a GPU).
    Greedy (top_p -> 0), both samplers draw the same tokens, so two steps of training give
    the same metrics; the two runs differ in nothing else."""
    runs = {}
    for eager in ("true", "false"):
        out = tmp_path / f"eager-{eager}"
        greedy = ("--set", "top_p=1e-9", "--set", f"enforce_eager={eager}")
        run_cli(out, "--total-steps", "2", *SHORT, *greedy)
        runs[eager] = metrics(out)[1:]
    for name in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/grad_norm"):
        assert [r[name] for r in runs["true"]] == [r[name] for r in runs["false"]], name
    # The sampler's own log-probs are the actor's, step after step: its copy of the weights
    # is the one the trainer updates in place (fp32 on a CPU, so up to rounding).
    assert all(r["training/rollout_probs_diff_max"] < 1e-5 for r in runs["false"]), runs["false"]
    assert not any("training/rollout_probs_diff_max" in r for r in runs["true"])


@pytest.mark.rlhf
def test_a_killed_run_resumes_on_the_same_trajectory(tmp_path):
    args = ("--algo", "ppo", "--total-steps", "6", "--save-freq", "3", *SHORT)
    process = run_cli(tmp_path, *args, wait=False)
    deadline = time.monotonic() + 240
    while not any(r["step"] == 5 for r in metrics(tmp_path)):
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "the run did not reach step 5 in time"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = {r["step"]: r for r in metrics(tmp_path)}
    assert (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"

    run_cli(tmp_path, *args, "--resume")
    after = {r["step"]: r for r in metrics(tmp_path)}
    assert sorted(after) == [0, 1, 2, 3, 4, 5, 6]
    for step in (4, 5):  # run twice: before the kill and after the resume
        for name, value in before[step].items():
            if not name.startswith(("timing_s/", "perf/")):
                assert after[step][name] == value, (step, name)


# --- learning (nox -s rlhf) -----------------------------------------------------------------


@pytest.mark.rlhf
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_cpu_preset_learns_the_task_within_five_minutes(algo):
    # Kept in runs/ (git-ignored) so the curve and metrics can be looked at afterwards.
    output_dir = Path(__file__).resolve().parents[1] / "runs" / f"cpu-{algo}"
    shutil.rmtree(output_dir, ignore_errors=True)
    start = time.monotonic()
    run_cli(output_dir, "--algo", algo, "--total-steps", "400", "--target-score", "0.9")
    elapsed = time.monotonic() - start
    rows = metrics(output_dir)[1:]
    recent = [r["critic/score/mean"] for r in rows[-5:]]
    print(f"{algo}: {len(rows)} steps, {elapsed:.0f} s, last 5 scores {recent}")
    assert sum(recent) / 5 >= 0.9, f"{algo} reached only {recent} in {len(rows)} steps"
    assert elapsed < 300, f"{algo} took {elapsed:.0f} s, including Ray start-up"
