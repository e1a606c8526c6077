"""Cross-play between runs (common/league.py, `run.py crossplay`): the Elo fit, the outcome of a
game, a table over real runs through the command line, and the errors it gives before writing."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from common import league
from common.cli import make_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(num_envs=4, num_steps=8, total_timesteps=64, eval_every=0, eval_episodes=2, eval_num_envs=2,
            hidden_sizes=(16,), cuda=False, torch_threads=1)


def tiny_run(algo, root, env="classic:tictactoe", **settings):
    import importlib
    module = importlib.import_module(f"algos.{algo}")
    return module.main(make_args(module.Args, env=env, run_dir=str(root), **{**TINY, **settings}))["run_dir"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("league")
    return {"both": tiny_run("ippo", root / "both"),
            "first_only": tiny_run("mappo", root / "first", share_params="none", train_groups=("player_1",)),
            "spread": tiny_run("ippo", root / "spread", env="torch:simple_spread", env_kwargs=("max_cycles=4",))}


def cli(*argv):
    return subprocess.run([sys.executable, "run.py", "crossplay", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_elo_recovers_known_ratings():
    """Games drawn from Bradley-Terry with ratings 1200, 1000, 800: the fit finds them within 40."""
    rng = np.random.default_rng(0)
    true = np.array([1200.0, 1000.0, 800.0])
    pairs = np.array([(a, b) for a in range(3) for b in range(3) if a != b] * 2000)
    p = 1 / (1 + 10 ** ((true[pairs[:, 1]] - true[pairs[:, 0]]) / 400))
    scores = (rng.random(len(pairs)) < p).astype(float)
    fitted = league.fit_ratings(pairs, scores, 3)
    assert np.abs(fitted - true).max() < 40 and fitted.mean() == pytest.approx(1000.0)
    always = league.fit_ratings(np.array([[0, 1]] * 50), np.ones(50), 2)  # a clean sweep: finite, far apart
    assert np.isfinite(always).all() and always[0] - always[1] > 400


def test_outcomes_zero_sum_and_median_split():
    zero_sum = {"sides": ["a", "b"], "cells": [{"side_0": "x", "side_1": "y", "returns": [[1, -1], [0, 0], [-1, 1]]}]}
    assert league.outcomes(zero_sum)[0].tolist() == [1.0, 0.5, 0.0]
    general = {"sides": ["a", "b"], "cells": [  # side 0's returns 30, 0, 60 / 90, 30, 0: median 30
        {"side_0": "x", "side_1": "y", "returns": [[30, -5], [0, 0], [60, -10]]},
        {"side_0": "z", "side_1": "y", "returns": [[90, -20], [30, -5], [0, 0]]}]}
    assert [s.tolist() for s in league.outcomes(general)] == [[0.5, 0.0, 1.0], [1.0, 0.5, 0.0]]


def test_crossplay_table_through_the_command_line(runs, tmp_path):
    out = tmp_path / "table"
    result = cli(runs["both"], runs["first_only"], "--random", "--games", "20", "--bootstrap", "20", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table = json.load(open(out / "crossplay.json"))
    assert table["env"] == "classic:tictactoe" and table["sides"] == ["player_1", "player_2"]
    # player_1: both, first_only, random; player_2: both, random (first_only learned player_1 only)
    pairs = {(c["side_0"].split("_s")[0], c["side_1"].split("_s")[0]) for c in table["cells"]}
    assert len(table["cells"]) == 6 and ("mappo", "mappo") not in pairs and ("ippo", "mappo") not in pairs
    for row in table["pairings"]:
        assert row["games"] == 20 and row["win"] + row["draw"] + row["loss"] == pytest.approx(1.0)
        assert row["return_player_1"] == pytest.approx(-row["return_player_2"])  # zero-sum
    assert len(table["elo"]) == 5 and all(e["low"] <= e["rating"] <= e["high"] for e in table["elo"].values())
    with open(out / "crossplay.csv") as f:
        assert len(f.read().strip().splitlines()) == 7
    assert (out / "crossplay.png").stat().st_size > 0 and (out / "elo.png").stat().st_size > 0


def test_crossplay_over_runs_of_different_envs_fails_before_writing(runs, tmp_path):
    out = tmp_path / "nothing"
    result = cli(runs["both"], runs["spread"], "--out", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert "differ in env" in result.stderr and "classic:tictactoe" in result.stderr
    assert not out.exists()
    missing = cli(str(tmp_path / "no_such_run"), "--out", str(out))
    assert missing.returncode == 2 and "no such run folder" in missing.stderr and not out.exists()


# ---------------------------------------------------------------------------------------------- leagues
LEAGUE = ["--env", "classic:tictactoe", "--side", "player_1=ippo", "--side", "player_2=ippo,mappo", "--games", "10",
          "--bootstrap", "10", "--workers", "1"]
RUN_FLAGS = ["--", "--num-envs", "4", "--num-steps", "8", "--eval-every", "0", "--hidden-sizes", "16",
             "--torch-threads", "1"]


def league_cli(folder, *argv, steps=256):
    return subprocess.run([sys.executable, "run.py", "league", *LEAGUE, "--league-dir", str(folder),
                           "--phase-steps", str(steps), *argv, *RUN_FLAGS], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def phase_runs(folder, k):
    return sorted(str(p) for p in (folder / f"phase_{k:02d}").glob("*/*/*") if (p / "args.json").exists())


def test_a_league_alternates_grows_its_pools_and_extends(tmp_path):
    folder = tmp_path / "league"
    first = league_cli(folder, "--phases", "1")
    assert first.returncode == 0, first.stderr
    before = phase_runs(folder, 1)
    second = league_cli(folder, "--phases", "2")  # the same league, one phase more: phase 1 is not run again
    assert second.returncode == 0, second.stderr
    state = json.load(open(folder / "league.json"))
    assert [p["side"] for p in state["phases"]] == ["player_1", "player_2"] and all(p["done"] for p in state["phases"])
    assert phase_runs(folder, 1) == before and len(phase_runs(folder, 2)) == 2
    assert [m["name"] for m in state["pool"]["player_1"]] == ["random", "ippo@1"]
    assert [m["name"] for m in state["pool"]["player_2"]] == ["random", "ippo@2", "mappo@2"]
    ippo_2 = next(p for p in state["phases"][1]["plan"] if p["algo"] == "ippo")
    args = json.load(open(os.path.join(ippo_2["run"], "args.json")))
    assert args["train_groups"] == ["player_2"] and args["share_params"] == "group"
    assert ippo_2["opponent"] in ("random", "ippo@1")
    if ippo_2["opponent"] != "random":
        assert f"player_1={state['pool']['player_1'][1]['path']}" in args["load_group"]
    table = json.load(open(folder / "crossplay" / "crossplay.json"))
    assert len(table["cells"]) == 2 * 3 and (folder / "crossplay" / "league_elo.png").exists()


def test_a_killed_league_resumes_where_it_stopped(tmp_path):
    """SIGTERM during phase 2: its runs save and the league exits 143 naming the command; the same
    command then finishes phase 2 from those checkpoints (no new run folders, the same opponents)."""
    folder = tmp_path / "league"
    argv = [sys.executable, "run.py", "league", *LEAGUE, "--league-dir", str(folder), "--phase-steps", "4096",
            "--phases", "2", *RUN_FLAGS]
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in child.stdout:
        if "phase 2/2" in line:
            break
    for line in child.stdout:  # a step line of phase 2: training is under way
        if "step " in line:
            break
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 143 and "Traceback" not in err and "run.py league" in err
    state = json.load(open(folder / "league.json"))
    plan, runs = state["phases"][1]["plan"], phase_runs(folder, 2)
    assert not state["phases"][1]["done"] and runs
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    state = json.load(open(folder / "league.json"))
    assert state["phases"][1]["done"] and [p["opponent"] for p in state["phases"][1]["plan"]] == [
        p["opponent"] for p in plan]
    assert set(runs) <= set(phase_runs(folder, 2)) and len(phase_runs(folder, 2)) == 2


def test_league_bad_input_fails_before_writing(runs, tmp_path):
    folder = tmp_path / "league"
    for argv, message in (
            (["--pool", f"player_2={runs['spread']}"], "that run played torch:simple_spread"),
            (["--phases", "0"], "--phases must be at least 1")):
        out = league_cli(folder, *argv)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not folder.exists()
    wrong_side = subprocess.run([sys.executable, "run.py", "league", "--env", "classic:tictactoe", "--side",
                                 "predator=ippo", "--league-dir", str(folder)], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
    assert wrong_side.returncode == 2 and "player_1, player_2" in wrong_side.stderr and not folder.exists()
    set_by_league = subprocess.run([sys.executable, "run.py", "league", *LEAGUE, "--league-dir", str(folder), "--",
                                    "--train-groups", "player_1"], cwd=ROOT, capture_output=True, text=True,
                                   timeout=120)
    assert set_by_league.returncode == 2 and "--train-groups is set by the league" in set_by_league.stderr


def test_league_refuses_learners_that_cannot_play_the_game(tmp_path):
    for side, message in (("player_2=qmix", "qmix does not learn from each agent's own moves"),
                          ("player_2=qmixx", "unknown algorithm 'qmixx'")):
        out = subprocess.run([sys.executable, "run.py", "league", "--env", "classic:tictactoe", "--side",
                              "player_1=ippo", side, "--league-dir", str(tmp_path / "l"), "--dry-run"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "l").exists()


def test_league_learners_must_play_one_env(tmp_path):
    """MADDPG switches continuous actions on by default; beside MAPPO it must be told not to."""
    base = [sys.executable, "run.py", "league", "--env", "torch:simple_tag", "--side", "adversary=mappo,maddpg",
            "agent=iql", "--league-dir", str(tmp_path / "l"), "--dry-run"]
    mixed = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert mixed.returncode == 2 and "would play different envs" in mixed.stderr and "continuous_actions=false" in \
        mixed.stderr
    one = subprocess.run([*base, "--algo-flags", "iql=--hidden-dim 16", "--", "--env-kwargs",
                          "continuous_actions=false"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and "phase 1 would train adversary" in one.stdout, one.stderr
    wrong = subprocess.run([*base, "--algo-flags", "qmix=--hidden-dim 16"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert wrong.returncode == 2 and "--algo-flags takes ALGO=FLAGS for a learner" in wrong.stderr
    assert not (tmp_path / "l").exists()


def test_a_pairing_of_one_repeated_game_counts_once():
    """Greedy players in a game without chance play one game over and over: 200 copies of it are one
    game of evidence for the ratings, not 200."""
    won = {"sides": ["a", "b"], "cells": [{"side_0": "x", "side_1": "y", "returns": [[1, -1]] * 200}]}
    once = {"sides": ["a", "b"], "cells": [{"side_0": "x", "side_1": "y", "returns": [[1, -1]]}]}
    assert league.elo(won, samples=10) == league.elo(once, samples=10)
    varied = {"sides": ["a", "b"], "cells": [{"side_0": "x", "side_1": "y", "returns": [[1, -1]] * 199 + [[0, 0]]}]}
    rating = league.elo(varied, samples=10)
    assert rating["x/a"][0] - rating["y/b"][0] > league.elo(won, samples=10)["x/a"][0] - 1000 > 0


def test_a_match_that_does_not_end_stops_with_an_error(runs):
    with pytest.raises(league.ConfigError, match="without ending"):
        league.play("classic:tictactoe", (), {"player_1": runs["both"], "player_2": league.RANDOM}, 4, max_steps=3)


def test_league_sides_one_learner_per_algorithm():
    with pytest.raises(league.ConfigError, match="appears twice"):
        league.league_sides(["player_1=ippo,ippo", "player_2=mappo"], "classic:tictactoe")
    assert list(league.league_sides(["player_2=mappo", "player_1=ippo"], "classic:tictactoe")) == [
        "player_2", "player_1"]  # the order given: phase 1 trains player_2


def test_every_learner_plays_the_final_crossplay_whatever_the_snapshot_schedule(tmp_path):
    folder = tmp_path / "league"
    out = league_cli(folder, "--phases", "2", "--snapshot-every", "2")
    assert out.returncode == 0, out.stderr
    table = json.load(open(folder / "crossplay" / "crossplay.json"))
    assert {"ippo@1", "ippo@2", "mappo@2", "random"} == set(table["members"])


def test_a_pool_plays_copy_e_with_member_e_mod_m_and_random_plays_legal_moves():
    import torch
    from common.groups import PoolPolicy, RandomPolicy, group_mask
    names, group_of_agent = ["a", "b"], [0, 1]

    class Fixed(RandomPolicy):  # always action k; its state counts the copies it was given
        def __init__(self, k):
            self.k, self.agent_mask = k, group_mask("b", group_of_agent, names, "cpu")

        def initial_state(self, batch, device=None):
            return batch

        def act(self, obs, state, starts, mask=None):
            assert obs.shape[0] == state
            return torch.full(starts.shape, self.k), state

    class Env:
        discrete, n_actions, action_dim = True, 5, 1

    mask = torch.zeros(7, 2, 5, dtype=torch.bool)
    mask[..., 3] = True
    mask[:, 1, 1] = True
    pool = PoolPolicy("b", [Fixed(7), Fixed(8), RandomPolicy("b", Env, group_of_agent, names, "cpu")])
    state = pool.initial_state(7)
    assert state[:2] == [3, 2] and pool.algo == "random"
    for _ in range(20):
        action, state = pool.act(torch.zeros(7, 2, 4), state, torch.zeros(7, 2), mask)
        assert (action[0::3] == 7).all() and (action[1::3] == 8).all()
        assert (action[2::3, 0] == 3).all() and set(action[2::3, 1].tolist()) <= {1, 3}
    assert pool.rows(action).tolist() == [False, True]


def test_a_group_played_by_a_pool_of_runs_and_random(runs, tmp_path):
    """An algorithm file trains player_1 against a pool (a run and random moves): it runs to the end and
    its evaluation plays the pool too; a pool member of another env fails naming it, before a run folder."""
    pool = f"player_2={runs['both']},random"
    run = tiny_run("mappo", tmp_path / "pool", share_params="group", train_groups=("player_1",), load_group=(pool,),
                   eval_every=32)
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["status"] == "finished" and "eval_return_mean" in json.dumps(summary)
    with pytest.raises(league.ConfigError, match="that run played torch:simple_spread"):
        tiny_run("mappo", tmp_path / "bad", share_params="group", train_groups=("player_1",),
                 load_group=(f"player_2=random,{runs['spread']}",))
    assert not (tmp_path / "bad").exists()


def test_a_mixed_league_splits_each_learner_among_opponents(tmp_path):
    """--mix 2: a learner faces two members of the other side's pool at once (none twice), its run loading
    them as one pool; where the pool holds one member (random, in phase 1) it faces that one."""
    folder = tmp_path / "league"
    out = league_cli(folder, "--phases", "3", "--mix", "2")
    assert out.returncode == 0, out.stderr
    state = json.load(open(folder / "league.json"))
    first, third = state["phases"][0]["plan"], state["phases"][2]["plan"]
    assert [p["opponent"] for p in first] == ["random"]
    args = json.load(open(os.path.join(first[0]["run"], "args.json")))
    assert "player_2=random" in args["load_group"]
    for p in third:  # player_1 against random, ippo@2 and mappo@2
        names, paths = p["opponent"].split("+"), p["opponent_path"].split(",")
        assert len(set(names)) == 2 == len(paths), p
        args = json.load(open(os.path.join(p["run"], "args.json")))
        assert f"player_2={p['opponent_path']}" in args["load_group"]
    bad = league_cli(tmp_path / "other", "--mix", "0")
    assert bad.returncode == 2 and "--mix must be at least 1" in bad.stderr and not (tmp_path / "other").exists()


class _UnevenGames:
    """Two copies of a two-player game: copy 0's games last 1 step and side 0 wins them, copy 1's
    last 3 steps and side 0 loses them."""
    agents, n_agents, num_envs = ["a_0", "b_0"], 2, 2

    def __init__(self):
        self.t = np.zeros(2, np.int64)

    def reset(self):
        return np.zeros((2, 2, 1), np.float32), None, None

    def sample_actions(self, rng):
        return np.zeros((2, 2), np.int64)

    def step(self, actions):
        from types import SimpleNamespace
        self.t += 1
        done = self.t >= np.array([1, 3])
        self.t[done] = 0
        ret = np.array([[1.0, -1.0], [-1.0, 1.0]], np.float32) * done[:, None]
        return SimpleNamespace(obs=np.zeros((2, 2, 1), np.float32), action_mask=None, done=done, episode_return=ret)

    def close(self):
        pass


def test_every_copy_plays_an_equal_share_of_a_match(monkeypatch):
    """Counting the first games to end would give copy 0's quick wins 3 of the first 4 games."""
    monkeypatch.setattr(league, "make_env", lambda *a, **k: _UnevenGames())
    returns = league.play("uneven", (), {}, games=4, copies=2)
    assert returns.shape == (4, 2) and sorted(returns[:, 0].tolist()) == [-1.0, -1.0, 1.0, 1.0]


def test_scripted_players_in_a_crossplay_and_a_league_pool(runs, tmp_path):
    """`--scripted win_or_block` and `--pool SIDE=scripted:win_or_block` seat connect four's scripted
    player; on another game both fail before anything is written."""
    wrong = cli(runs["both"], "--scripted", "win_or_block", "--out", str(tmp_path / "table"))
    assert wrong.returncode == 2 and "plays connect_four, not classic:tictactoe" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr and not (tmp_path / "table").exists()
    bad = league_cli(tmp_path / "bad", "--pool", "player_2=scripted:win_or_block")
    assert bad.returncode == 2 and "plays connect_four" in bad.stderr and not (tmp_path / "bad").exists()
    folder = tmp_path / "c4"
    out = subprocess.run([sys.executable, "run.py", "league", "--env", "torch:connect_four", "--side", "player_0=ippo",
                          "--side", "player_1=ippo", "--phases", "2", "--phase-steps", "256", "--games", "10",
                          "--bootstrap", "10", "--workers", "1", "--pool", "player_1=scripted:win_or_block",
                          "player_0=scripted:win_or_block", "--league-dir", str(folder), *RUN_FLAGS], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    state = json.load(open(folder / "league.json"))
    assert [m["name"] for m in state["pool"]["player_1"]][:2] == ["random", "scripted:win_or_block"]
    table = json.load(open(folder / "crossplay" / "crossplay.json"))
    wob = [c for c in table["cells"] if c["side_0"] == "scripted:win_or_block" and c["side_1"] == "random"]
    assert len(wob) == 1 and np.mean(np.array(wob[0]["returns"])[:, 0] > 0) >= 0.7  # it beats random moves
