"""Our GRPO pipeline against TRL's ``GRPOTrainer`` on one task for equal wall time, in one run.

    python benchmarks/rlhf_vs_trl.py [--seconds 90] [--world-size 2] [--quick] [--plot PNG]
                                     [--trl-threads N] [--trl-first] [--record DIR]
    python benchmarks/rlhf_vs_trl.py --redraw DIR --plot PNG

What is compared: RL on the digit-sum task (:mod:`reference_impl.rlhf.task`) with
GRPO, run for the same wall-clock budget by

* **ours**: :class:`~reference_impl.rlhf.trainer.RLHFTrainer` (``reference_impl/rlhf/
  trainer.py``, ``workers.py``, ``rollout.py``, ``core_algos.py``), a single controller
  driving ``world_size`` Ray worker processes that hold the actor sharded with FSDP2;
* **TRL**: ``trl.GRPOTrainer`` (``trl/trainer/grpo_trainer.py``, TRL 1.16), one
  process, generation with ``transformers``' ``generate`` (no vLLM).

How they are matched (every knob comes from ``make_config("grpo", "cpu")``):

* model: the same randomly initialised ``Qwen2ForCausalLM`` of ``PRESETS["cpu"]``'s shape
  (``reference_impl/rlhf/model.py``, same seed, so the same initial weights), float32;
* tokenizer: a ``transformers`` fast tokenizer built here that gives every character the
  id :class:`~reference_impl.rlhf.tokenizer.CharTokenizer` gives it and prepends BOS
  once; prompts are plain text, no chat template;
* warm-up: TRL's model gets our supervised format warm-up before RL (same rows, same
  split into per-rank batches, same steps and learning rate), timed apart from RL;
* batch: ``train_batch_size`` prompts x ``n`` completions per RL step (TRL's
  ``generation_batch_size``, ``num_generations``); ``ppo_mini_batch_size`` prompts, i.e.
  ``mini_batch_responses = ppo_mini_batch_size * n`` completions, per optimiser step
  (``per_device_train_batch_size``, ``steps_per_generation``);
  ``ppo_epochs`` passes over each batch (``num_iterations``);
* loss: clipped surrogate with ``clip_ratio`` (``epsilon``), advantages normalised by the
  group's std (``scale_rewards="group"``), token-mean over each mini-batch
  (``loss_type="bnpo"``), k3 KL to the warmed-up reference with ``kl_loss_coef``
  (``beta``); the same optimiser as our actor's (``make_optimizer``: fused
  ``torch.optim.AdamW`` at ``actor_lr`` with torch's defaults, passed to TRL), a constant
  learning rate, gradient clipping at ``grad_clip``;
* rollout: ``max_new_tokens`` tokens (``max_completion_length``), temperature and top-p
  from the config, no top-k; the reward is ``DigitSumTask.score_responses`` on token ids.

What differs: ours runs ``world_size`` processes (one CPU and one torch thread each, as
Ray sets ``OMP_NUM_THREADS``) with a driver in between, TRL one process with torch's
default thread count; ours samples with its own KV-cache loop, TRL with ``generate``;
ours reshuffles mini-batches every epoch, TRL reuses one shuffle; the std epsilon is
1e-6 for ours, 1e-4 for TRL. Both stop at the first RL step that ends after the budget.

Figures: an RL step is one generation of ``train_batch_size * n`` completions and its
updates; tokens/s counts prompt and completion tokens (up to EOS) per second of RL wall
time; the reward is the mean score (``critic/score/mean``) of the last 5 steps, at equal
wall time and at equal RL steps (which separates sample efficiency from speed). One
seed's reward swings from step to step and can collapse and recover within a run, so
read the reward ratios as one sample. Only ratios and figures of this run are printed:
absolute speed on a shared machine is noise. A multi-threaded process (TRL's, by
default) slows down far more than single-threaded ones when other processes take its
cores, as its OpenMP threads wait for each other: the table prints the load average, and
``--trl-threads 1`` gives TRL one thread like each of our workers (steadier on a busy
machine, somewhat slower on an idle one).

Output: the table and its ratios on stdout. ``--plot PNG`` draws both reward curves
against seconds of RL into ``PNG`` with English labels and into its twin ``x.zh.png``
with Chinese ones (a font of ``CJK_FONTS`` in ``benchmarks/charts.py`` must be
installed, else the twin is skipped with a note). ``--record DIR`` keeps what the table
and the charts are made of: ``DIR/report.txt``, the printed table, and
``DIR/record.json``, the date, the CPU count, the budget and, for each run, its name in
both languages, its figures and its per-step curve (seconds of RL at the end of each
step, that step's score, and the mean of the last ``LAST`` scores). ``--redraw DIR
--plot PNG`` draws both charts from such a record without running anything.
"""

from __future__ import annotations

import os

# Set before transformers, trl or datasets are imported, here and in the Ray workers
# (which inherit this environment): nothing may be fetched from a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import math
import tempfile
import time
from dataclasses import dataclass, field

import ray
import torch
from charts import chinese_font_rc  # benchmarks/charts.py, beside this script

from reference_impl.rlhf.config import RLHFConfig, make_config
from reference_impl.rlhf.metrics import read_metrics
from reference_impl.rlhf.model import build_actor, load_model, qwen2_config
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer
from reference_impl.rlhf.trainer import RLHFTrainer
from reference_impl.rlhf.workers import format_loss, make_optimizer, warmup_rows

LAST = 5  # steps the final reward is averaged over, as the trainer's target_score


@dataclass
class Run:
    """What one system did; times in seconds."""

    name: str
    name_zh: str  # the chart's legend on the Chinese page
    warmup_s: float = 0.0
    warmup_loss: float = math.nan
    steps: int = 0
    completions: int = 0
    tokens: int = 0
    scores: list[float] = field(default_factory=list)
    exact: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)  # perf_counter() at the end of each RL step
    first_start: float = math.nan
    last_end: float = math.nan
    load: float = math.nan  # the 1-minute load average when RL ended, its own processes included

    @property
    def rl_s(self) -> float:
        return self.last_end - self.first_start

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.rl_s

    @property
    def reward(self) -> float:
        return self.reward_at(self.steps)

    def reward_at(self, step: int) -> float:
        """The mean score of the ``LAST`` RL steps ending with step ``step`` (1-based)."""
        window = self.scores[max(0, step - LAST) : step]
        return sum(window) / len(window)

    def record(self) -> dict:
        """Its name, figures and per-step curve, as ``--record`` writes them."""
        return {
            "name": self.name,
            "name_zh": self.name_zh,
            "warmup_s": self.warmup_s,
            "warmup_loss": self.warmup_loss,
            "rl_s": self.rl_s,
            "steps": self.steps,
            "completions": self.completions,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
            "reward": self.reward,
            "exact_match": self.exact_match,
            "load": self.load,
            # per RL step: seconds of RL at its end, its critic/score/mean, and the mean
            # of the last LAST scores (the chart's bold line)
            "seconds": [end - self.first_start for end in self.ends],
            "scores": self.scores,
            "reward_at": [self.reward_at(step) for step in range(1, self.steps + 1)],
        }

    @property
    def exact_match(self) -> float:
        return sum(self.exact[-LAST:]) / len(self.exact[-LAST:])


# --- ours ---------------------------------------------------------------------------


class TimedTrainer(RLHFTrainer):
    """Records when each RL step starts and ends, so RL wall time excludes start-up and warm-up."""

    def step(self) -> dict[str, float]:
        start = time.perf_counter()
        metrics = super().step()
        self.stamps.append((start, time.perf_counter()))
        return metrics


def run_ours(config: RLHFConfig) -> Run:
    workers = config.world_size
    run = Run(
        f"ours (Ray, {workers} workers x 1 thread)",
        f"我们的流水线（Ray，{workers} 个 Worker × 1 个线程）",
    )
    # One logical CPU per worker even where the machine has fewer cores, as __main__ does.
    ray.init(num_cpus=max(os.cpu_count() or 1, config.world_size), include_dashboard=False)
    trainer = TimedTrainer(config)
    trainer.stamps = []
    try:
        trainer.init_workers()
        history = trainer.fit(progress=False)
        run.load = os.getloadavg()[0]
    finally:
        trainer.shutdown()
        ray.shutdown()
    warm = read_metrics(os.path.join(config.output_dir, "metrics.jsonl"))[0]
    run.warmup_s, run.warmup_loss = warm["timing_s/warmup"], warm["warmup/loss"]
    run.steps = len(history)
    run.completions = run.steps * config.responses_per_step
    run.tokens = int(sum(m["perf/total_num_tokens"] for m in history))
    run.scores = [m["critic/score/mean"] for m in history]
    run.exact = [m["reward/exact_match"] for m in history]
    run.first_start, run.last_end = trainer.stamps[0][0], trainer.stamps[-1][1]
    run.ends = [end for _, end in trainer.stamps]
    return run


# --- TRL ------------------------------------------------------------------------------


def char_tokenizer_for_hf(tokenizer: CharTokenizer):
    """A ``transformers`` fast tokenizer with ``tokenizer``'s ids; it prepends BOS itself.

    TRL tokenizes plain-text prompts with ``processing_class(text=prompts)``, i.e. with
    special tokens added, so BOS comes from the post-processor and not from the prompt text.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(tokenizer.tokens)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.bos_token_id)]
    )
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",  # generation appends on the right
    )


def format_warmup(model, config: RLHFConfig, data_rng: torch.Generator) -> tuple[float, float]:
    """Our format warm-up (``RLHFTrainer.warmup`` + ``warmup_format``) in one process.

    Draws the same rows from a generator seeded like the trainer's, cuts them into the
    same per-rank shards and per-step slices, and averages the per-rank losses, which is
    the gradient FSDP2 averages over ranks. Returns (seconds, last step's loss).
    """
    tokenizer, task = CharTokenizer(), DigitSumTask(num_digits=config.num_digits)
    start = time.perf_counter()
    rows = config.warmup_steps * config.mini_batch_responses  # as RLHFTrainer.warmup
    ids, prompt_length = task.format_examples(tokenizer, rows, data_rng)
    shards = ids.chunk(config.world_size)  # each rank's share, as DP_COMPUTE_PROTO splits
    optimizer = make_optimizer(model, config.warmup_lr)
    model.train()
    for step in range(config.warmup_steps):
        losses = [
            format_loss(model, warmup_rows(shard, step, config.warmup_steps), prompt_length)
            for shard in shards
        ]
        loss = torch.stack(losses).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, loss.item()


def run_trl(config: RLHFConfig, seconds: float, workdir: str, threads: int = 0) -> Run:
    from dataclasses import fields

    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if threads:
        torch.set_num_threads(threads)
    count = torch.get_num_threads()
    run = Run(
        f"TRL GRPOTrainer (1 process, {count} thread{'s' if count > 1 else ''})",
        f"TRL GRPOTrainer（1 个进程，{count} 个线程）",
    )
    tokenizer, task = CharTokenizer(), DigitSumTask(num_digits=config.num_digits)
    hf_tokenizer = char_tokenizer_for_hf(tokenizer)
    for target in range(task.max_target + 1):
        text = task.prompt_text(target)
        got = hf_tokenizer(text=[text])["input_ids"][0]
        assert got == tokenizer.encode(text), (text, got)

    data_rng = torch.Generator().manual_seed(config.seed)
    model = build_actor(
        qwen2_config(
            config.model_shape,
            tokenizer.vocab_size,
            tokenizer.pad_token_id,
            tokenizer.bos_token_id,
            tokenizer.eos_token_id,
        ),
        config.seed,
    )
    run.warmup_s, run.warmup_loss = format_warmup(model, config, data_rng)
    # TRL loads the reference policy from the policy's path, so both come from this
    # directory: the reference is the warmed-up model, as in ours.
    model_dir = os.path.join(workdir, "warm_model")
    model.save_pretrained(model_dir)
    hf_tokenizer.save_pretrained(model_dir)

    # Enough prompts that no budget runs out of them; TRL shuffles and repeats each n times.
    _, targets = task.make_prompts(tokenizer, config.train_batch_size * 1000, data_rng)
    dataset = Dataset.from_dict(
        {
            "prompt": [task.prompt_text(int(t)) for t in targets],
            "target": targets.tolist(),
        }
    )

    def digit_sum_reward(prompts, completion_ids, target, **kwargs) -> list[float]:
        # TRL hands over each completion cut after its first EOS; our layout is a fixed
        # max_new_tokens, right-padded with <pad>, which score_responses expects.
        responses = torch.full((len(completion_ids), config.max_new_tokens), tokenizer.pad_token_id)
        for row, ids in enumerate(completion_ids):
            ids = ids[: config.max_new_tokens]
            responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        scores, exact = task.score_responses(responses, torch.tensor(target), tokenizer)
        # Called once per generation with the whole batch (one process): one RL step.
        run.scores.append(scores.mean().item())
        run.exact.append(exact.float().mean().item())
        run.completions += len(completion_ids)
        run.tokens += sum(len(tokenizer.encode(p)) for p in prompts)
        run.tokens += sum(len(ids) for ids in completion_ids)
        return scores.tolist()

    updates_per_generation = (
        config.responses_per_step // config.mini_batch_responses * config.ppo_epochs
    )

    class Budget(TrainerCallback):
        """Stops after the first whole RL step (generation and its updates) past the budget."""

        def on_step_begin(self, args, state, control, **kwargs):
            if math.isnan(run.first_start):
                run.first_start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            run.last_end = time.perf_counter()
            if state.global_step % updates_per_generation == 0:
                run.steps = state.global_step // updates_per_generation
                run.ends.append(run.last_end)
                if run.last_end - run.first_start >= seconds:
                    control.should_training_stop = True

    names = {f.name for f in fields(GRPOConfig)}
    checkpointing = next(
        n for n in ("activation_checkpointing", "gradient_checkpointing") if n in names
    )
    args = GRPOConfig(
        output_dir=os.path.join(workdir, "trl"),
        seed=config.seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        # TRL turns it on by default; ours does not recompute activations. transformers 5
        # renamed the field and warns about the old name.
        **{checkpointing: False},
        use_vllm=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        max_steps=10**9,  # the Budget callback ends training
        # batch: one generation of train_batch_size * n completions, mini-batches of
        # ppo_mini_batch_size prompts * n = mini_batch_responses completions
        num_generations=config.n,
        per_device_train_batch_size=config.mini_batch_responses,
        gradient_accumulation_steps=1,
        steps_per_generation=config.responses_per_step // config.mini_batch_responses,
        num_iterations=config.ppo_epochs,
        # rollout
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=0,
        # loss and optimiser
        loss_type="bnpo",
        scale_rewards="group",
        epsilon=config.clip_ratio,
        beta=config.kl_loss_coef if config.use_kl_loss else 0.0,
        learning_rate=config.actor_lr,
        lr_scheduler_type="constant",
        max_grad_norm=config.grad_clip,
    )
    # Loaded back so that its config names model_dir, where TRL loads the reference from.
    policy = load_model(model_dir)
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=digit_sum_reward,
        args=args,
        train_dataset=dataset,
        processing_class=hf_tokenizer,
        callbacks=[Budget()],
        # Our actor's optimiser (fused AdamW): Trainer's own would exempt biases and norms
        # from decay.
        optimizers=(make_optimizer(policy, config.actor_lr), None),
    )
    # With tqdm off, Trainer prints every step's log dict; the table is the output here.
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    run.load = os.getloadavg()[0]
    # Training stops only between RL steps, so every generation scored had all its updates.
    assert len(run.scores) == run.steps, (len(run.scores), run.steps)
    return run


# --- the table ------------------------------------------------------------------------


def report(ours: Run, trl: Run, config: RLHFConfig, seconds: float) -> list[str]:
    """The table and the ratios, one printed line each."""
    lines = [
        f"GRPO on digit-sum, {seconds:g} s of RL each: {config.train_batch_size} prompts x "
        f"{config.n} completions per step, mini-batches of {config.ppo_mini_batch_size} prompts "
        f"({config.mini_batch_responses} completions), "
        f"{config.ppo_epochs} epochs, {config.max_new_tokens} new tokens"
    ]
    width = max(len(ours.name), len(trl.name))
    lines.append(
        f"{'system':<{width}} {'warm-up s':>9} {'warm-up loss':>12} {'RL s':>7} {'RL steps':>8} "
        f"{'completions':>11} {'tokens/s':>9} {'reward':>7} {'exact':>6} {'load':>5}"
    )
    for run in (ours, trl):
        lines.append(
            f"{run.name:<{width}} {run.warmup_s:>9.1f} {run.warmup_loss:>12.4f} {run.rl_s:>7.1f} "
            f"{run.steps:>8d} {run.completions:>11d} {run.tokens_per_s:>9.0f} "
            f"{run.reward:>7.3f} {run.exact_match:>6.3f} {run.load:>5.1f}"
        )
    lines.append(
        f"(reward, exact: critic/score/mean and exact match over the last {LAST} RL steps; "
        f"load: 1-minute load average at the end of RL on {os.cpu_count()} CPUs)"
    )
    cpus = os.cpu_count() or 1
    if max(ours.load, trl.load) > 2 * cpus:
        # Each of our workers runs one torch thread; TRL's process runs one per core unless
        # --trl-threads says otherwise, and multi-threaded kernels stall when other
        # processes take their cores.
        lines.append(
            f"note: the load average reached {max(ours.load, trl.load):.1f} on {cpus} CPUs; "
            "other processes competed for the CPUs, so these ratios do not compare the systems"
        )
    lines.append(f"ours/TRL tokens/s: {ours.tokens_per_s / trl.tokens_per_s:.2f}x")
    lines.append(f"ours/TRL reward at equal wall time: {ours.reward / trl.reward:.2f}x")
    # Separates sample efficiency from speed: the same number of RL steps, not seconds.
    both = min(ours.steps, trl.steps)
    lines.append(
        f"ours/TRL reward at equal RL steps ({both}): "
        f"{ours.reward_at(both) / trl.reward_at(both):.2f}x"
    )
    if trl.exact_match > 0:
        ratio = ours.exact_match / trl.exact_match
        lines.append(f"ours/TRL exact match at equal wall time: {ratio:.2f}x")
    else:
        lines.append("ours/TRL exact match at equal wall time: n/a (TRL's is 0)")
    return lines


# --- the charts -----------------------------------------------------------------------


def zh_twin(path: str) -> str:
    """``x.png`` -> ``x.zh.png``, the file the site serves to the Chinese page."""
    root, ext = os.path.splitext(path)
    return f"{root}.zh{ext}"


def plot_curves(record: dict, path: str, language: str = "en") -> None:
    """Both reward curves of ``record`` against seconds of RL into ``path`` (PNG): each step's
    score, faint, and its mean over the last ``LAST`` steps (the figure the ratios compare).

    ``language="zh"`` labels it in Chinese (the metric name stays as it is logged), with
    the first installed font of ``CJK_FONTS``; RuntimeError when none is installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    zh = language == "zh"
    seconds, cpus, date, last = record["seconds"], record["cpus"], record["date"], record["last"]
    if zh:
        xlabel = "RL 的秒数（不含预热和启动）"
        ylabel = f"critic/score/mean（最近 {last} 步的平均值）"
        title = (
            f"数字求和任务上的 GRPO，各跑 {seconds:g} s RL，{cpus} 个 CPU，{date}"
            "（benchmarks/rlhf_vs_trl.py）"
        )
        labels = [f"{run['name_zh']}：{run['steps']} 步" for run in record["runs"]]
    else:
        xlabel = "seconds of RL (warm-up and start-up excluded)"
        ylabel = f"critic/score/mean (mean of {last} steps)"
        title = (
            f"GRPO on digit-sum, {seconds:g} s of RL each, {cpus} CPUs, {date} "
            "(benchmarks/rlhf_vs_trl.py)"
        )
        labels = [f"{run['name']}: {run['steps']} steps" for run in record["runs"]]
    colors = ("tab:blue", "tab:orange")
    with matplotlib.rc_context(chinese_font_rc() if zh else {}):
        fig, ax = plt.subplots(figsize=(7, 3.8), dpi=100)
        for run, label, color in zip(record["runs"], labels, colors, strict=True):
            ax.plot(run["seconds"], run["scores"], color=color, alpha=0.3, linewidth=0.8)
            ax.plot(run["seconds"], run["reward_at"], color=color, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="RL wall time per system")
    parser.add_argument("--world-size", type=int, default=2, help="our data-parallel workers")
    parser.add_argument("--quick", action="store_true", help="15 s per system (for the tests)")
    parser.add_argument(
        "--trl-threads", type=int, default=0, help="torch threads for TRL (default: torch's)"
    )
    parser.add_argument(
        "--plot",
        metavar="PNG",
        help="write both reward curves against wall time to this file, and in Chinese to x.zh.png",
    )
    parser.add_argument(
        "--trl-first",
        action="store_true",
        help="run TRL before ours (on a machine whose load drifts, alternate the order)",
    )
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="keep the table and the curves in DIR (report.txt, record.json)",
    )
    parser.add_argument(
        "--redraw", metavar="DIR", help="run nothing: draw --plot from DIR/record.json"
    )
    args = parser.parse_args(argv)
    if args.redraw:
        if not args.plot:
            parser.error("--redraw needs --plot")
        with open(os.path.join(args.redraw, "record.json"), encoding="utf-8") as file:
            record = json.load(file)
        plot_curves(record, args.plot)
        plot_curves(record, zh_twin(args.plot), language="zh")
        print(f"reward curves: {args.plot}, {zh_twin(args.plot)}")
        return 0
    seconds = 15.0 if args.quick else args.seconds

    with tempfile.TemporaryDirectory(prefix="rlhf_vs_trl_") as workdir:
        config = make_config(
            "grpo",
            "cpu",
            world_size=args.world_size,
            total_steps=10**9,  # time_limit_s ends the run
            time_limit_s=seconds,
            output_dir=os.path.join(workdir, "ours"),
            tensorboard=False,
        )
        if args.trl_first:
            trl = run_trl(config, seconds, workdir, args.trl_threads)
            ours = run_ours(config)
        else:
            ours = run_ours(config)
            trl = run_trl(config, seconds, workdir, args.trl_threads)
    lines = report(ours, trl, config, seconds)
    print("\n".join(lines))
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "seconds": seconds,
        "last": LAST,
        "runs": [ours.record(), trl.record()],
    }
    if args.record:
        os.makedirs(args.record, exist_ok=True)
        with open(os.path.join(args.record, "report.txt"), "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        with open(os.path.join(args.record, "record.json"), "w", encoding="utf-8") as file:
            json.dump(record, file, indent=1, ensure_ascii=False)
            file.write("\n")
        print(f"record: {args.record}")
    if args.plot:
        plot_curves(record, args.plot)
        print(f"reward curves: {args.plot}")
        try:
            plot_curves(record, zh_twin(args.plot), language="zh")
            print(f"reward curves in Chinese: {zh_twin(args.plot)}")
        except RuntimeError as err:  # no CJK font: the run is not lost, the record can redraw
            print(f"no Chinese chart: {err}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
