"""veRL 0.9.1's real trainer (`python -m verl.trainer.main_ppo`) on a CPU-only machine.

A harness, not a port: veRL's controller, TransferQueue, worker groups, agent loop and reward
loop run unmodified from the PyPI wheel; this package only adds what veRL loads through its own
extension points, plus a CPU stand-in for vLLM. One concept per module:

    platform.py   the CPU platform plugin and the four patches it needs (loaded into every process)
    rollout.py    the rollout backend ``hfcpu``: Hugging Face ``generate`` in one Ray actor
    probe.py      snapshots Ray's state from inside the trainer, mid-training
    fixture.py    a tiny random Qwen2-shaped model, a local tokenizer, gsm8k-shaped parquet files
    reward.py     a test reward with non-zero gradients on a random model
    run.py        the entry point: ``python -m examples.verl_on_cpu.run --algo grpo --out DIR``

See README.md in this folder for what it shows and what it cannot.
"""
