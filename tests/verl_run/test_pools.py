"""The pools of docs/verl/run-layout.md#own-pool against veRL 0.9.1's own method.

The page builds a trainer's `resource_pool_spec` and `mapping` with a function of its own,
`pools(conf)`, because the tests environment cannot import veRL's trainer (it lacks the
trainer's serving dependencies). Here, in the environment of `nox -s verl_run`, which has them,
that function (read from the page) must give what `PPOTrainer._init_resource_pool_mgr`
(`verl/trainer/ppo/v1/trainer_base.py`) gives for the same Hydra-composed configurations.
"""

import ast
import inspect
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

PAGE = Path(__file__).resolve().parents[2] / "docs/verl/run-layout.md"
CONFIG = Path(inspect.getfile(verl)).parent / "trainer/config"
OWN_REWARD_GPU = [
    "reward.reward_model.enable=True",
    "reward.reward_model.enable_resource_pool=True",
    "reward.reward_model.n_gpus_per_node=1",
    "reward.reward_model.nnodes=1",
]
TEACHER = ["distillation.enabled=True", "distillation.nnodes=1", "distillation.n_gpus_per_node=2"]
CASES = {
    "default": [],
    "reward model on its own GPU": OWN_REWARD_GPU,
    "colocated reward model": ["reward.reward_model.enable=True"],
    "teacher": TEACHER,
    "reward model and teacher": [*OWN_REWARD_GPU, *TEACHER],
}


def page_pools():
    """The `pools` function of the page's own-pool section, compiled from the page."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("{#own-pool}") :]
    block = section[section.index("```python\n") + len("```python\n") :]
    block = block[: block.index("```")]
    tree = ast.parse(block)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pools")
    namespace: dict = {}
    exec(compile(ast.Module([function], type_ignores=[]), str(PAGE), "exec"), namespace)
    return namespace["pools"]


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_page_pools_are_verls(overrides):
    with initialize_config_dir(config_dir=str(CONFIG), version_base=None):
        conf = compose(
            config_name="ppo_trainer",
            overrides=["algorithm.adv_estimator=grpo", "trainer.n_gpus_per_node=2", *overrides],
        )
    on_page = page_pools()(conf)  # before veRL's method, which writes into conf
    trainer = object.__new__(PPOTrainerSync)  # only the method, not a trainer
    trainer.config = conf
    trainer._init_resource_pool_mgr()
    manager = trainer.resource_pool_manager
    mapping = {str(role): pool for role, pool in manager.mapping.items()}
    assert on_page == (manager.resource_pool_spec, mapping)
