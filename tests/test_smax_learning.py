"""A learning smoke on the torch SMAX port: MAPPO learns to win `torch:smax_3m` battles.

Three marines against three marines driven by SMAX's heuristic enemy. A uniformly random legal
policy (`env.sample_actions`) won 0 of 1,005 battles (seed 0, the default 100-step limit). MAPPO
with its defaults, 128 copies and 200k env steps (20-40 s on the loaded 2-core CPU) reached greedy
evaluation win rates of 0.39-0.49 with seeds 1-6 (100 evaluation battles each); the test asks for
0.25 with seed 1, so a win rate far above the random policy's and well below what the seeds reached.
It checks that the observations, masks, rewards and deaths of the port carry what a policy needs to
win, and that `eval_win_rate` reaches summary.json; the learning bars themselves live in benchmarks/.
"""
import json
import os

from algos import mappo
from common.cli import make_args

MIN_WIN_RATE = 0.25  # a random policy: 0.0 (0 of 1,005 battles)


def test_mappo_wins_smax_3m(tmp_path):
    args = make_args(mappo.Args, env="torch:smax_3m", seed=1, num_envs=128, total_timesteps=200_000,
                     eval_every=0, eval_episodes=100, eval_num_envs=50, checkpoint_every=0, cuda=False,
                     run_dir=str(tmp_path))
    summary = mappo.main(args)
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk["eval_episodes"] == 100
    win_rate = on_disk["eval_win_rate"]
    assert win_rate >= MIN_WIN_RATE, \
        f"MAPPO won {win_rate:.2f} of its evaluation battles after 200k env steps (seeds 1-6 reached 0.39-0.49)"
