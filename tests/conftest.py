"""Shared test helpers: tiny, CPU-only algorithm settings that finish in well under a second."""
import pytest

from common.cli import make_args

TINY = dict(num_envs=2, num_steps=5, total_timesteps=20, eval_episodes=2, eval_num_envs=1, hidden_sizes=(16,),
            update_epochs=2, cuda=False)  # 20 env steps = 2 iterations of 2 envs x 5 steps


@pytest.fixture
def tiny(tmp_path):
    """tiny(module, **overrides) -> module.Args with tiny settings and a run_dir under tmp_path."""

    def build(module, **overrides):
        settings = {**TINY, "run_dir": str(tmp_path / "runs"), **overrides}
        return make_args(module.Args, **settings)

    return build
