"""tests/verl_run/ checks the runs of veRL's real trainer that `nox -s verl_run` makes.

They read runs/verl_run/{grpo,ppo}/run.json (examples/verl_on_cpu/run.py writes them), so they
are collected only where ``VERL_RUN_DIR`` names those runs: `nox -s verl_run` sets it. The default
sessions (`nox`, `pytest`) skip this folder at collection, and neither installs veRL's own
environment nor spends the ~5 minutes the runs take.
"""

import os

collect_ignore_glob = [] if os.environ.get("VERL_RUN_DIR") else ["test_*.py"]
