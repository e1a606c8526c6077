"""Turn-based games: the AEC adapter (envs/aec_vec.py) against a hand-played game of tic-tac-toe,
GAE over each agent's own moves (common/turns.py) against hand-computed values and against plain
GAE where every step is a move, and the files that refuse turn-based games."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import envs
from algos.mappo import compute_gae
from common.turns import negamax_targets, turn_gae, turn_td_targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def board(obs_row):
    """A flat tic-tac-toe view (18) -> (3, 3, 2): channel 0 the viewer's pieces, 1 the opponent's."""
    return np.asarray(obs_row).reshape(3, 3, 2)


def test_a_hand_played_game_of_tictactoe():
    """player_1 plays cells 0, 1, 2 (a line), player_2 plays 3 and 4; the other seat's entries of
    every action are nonsense (an occupied cell) and must be ignored."""
    env = envs.make_env("classic:tictactoe", 1, seed=0)
    assert env.turn_based and env.agents == ["player_1", "player_2"] and env.obs_dim == 18 and env.n_actions == 9
    obs, state, mask = env.reset()
    assert env.acting.tolist() == [[True, False]] and mask[0, 0].all() and not obs.any()
    assert state.shape == (1, 36)
    moves = [(0, 0), (1, 3), (0, 1), (1, 4), (0, 2)]  # (seat, cell)
    for k, (seat, cell) in enumerate(moves):
        actions = np.full((1, 2), moves[0][1])  # the other seat asks for cell 0: ignored
        actions[0, seat] = cell
        assert env.acting[0, seat]
        step = env.step(actions)
        last = k == len(moves) - 1
        if not last:
            assert step.reward.tolist() == [[0.0, 0.0]] and not step.done[0]
            mover_next = 1 - seat
            assert step.acting.tolist()[0] == [mover_next == 0, mover_next == 1]
            played = {c for _, c in moves[: k + 1]}
            assert step.action_mask[0, mover_next].tolist() == [c not in played for c in range(9)]
            own = board(step.obs[0, mover_next])[..., 0]
            assert own.sum() == sum(1 for s, _ in moves[: k + 1] if s == mover_next)
    # the winning move: +1 to player_1, the -1 of player_2 arrives on this same step (not its move)
    assert step.reward.tolist() == [[1.0, -1.0]] and step.done[0] and step.terminated.all()
    assert step.episode_return.tolist() == [[1.0, -1.0]] and step.episode_length.tolist() == [5]
    final = board(step.final_obs[0, 0])  # player_1's view of the final board: its line of three
    assert final[..., 0].sum() == 3 and final[..., 1].sum() == 2
    assert not step.obs.any() and step.acting.tolist() == [[True, False]]  # reset: a new game, player_1 first
    env.close()


def test_boards_flat_and_as_planes():
    c4 = envs.make_env("classic:connect_four", 2, seed=0)
    assert c4.obs_shape == (84,) and c4.n_actions == 7 and c4.reset()[2].shape == (2, 2, 7)
    go = envs.make_env("classic:go", 1, seed=0, env_kwargs={"board_size": 5})
    assert go.obs_shape == (5, 5, 17) and go.image_obs and go.n_actions == 26  # 25 points and a pass
    flat = envs.make_env("classic:go", 1, seed=0, env_kwargs={"board_size": 5, "board": "flat"})
    assert flat.obs_shape == (425,)
    with pytest.raises(envs.EnvError, match="board must be"):
        envs.make_env("classic:tictactoe", 1, env_kwargs={"board": "cube"})
    if importlib.util.find_spec("rlcard"):  # the classic extra: poker observations are vectors
        with pytest.raises(envs.EnvError, match="needs 3-D observations"):
            envs.make_env("classic:leduc_holdem", 1, env_kwargs={"board": "image"})


def test_random_games_run_through_many_resets():
    env = envs.make_env("classic:connect_four", 4, seed=3)
    env.reset()
    rng, games = np.random.default_rng(0), 0
    for _ in range(200):
        movers = env.acting.copy()
        step = env.step(env.sample_actions(rng))
        assert movers.sum(1).tolist() == [1] * 4  # one mover per copy
        games += int(step.done.sum())
        ended = step.done
        assert (step.episode_return[ended].sum(1) == 0).all()  # zero-sum: a win, a loss, or a draw
    assert games > 0


# ---------------------------------------------------------------------------- GAE over each agent's moves
def test_turn_gae_by_hand():
    """Two agents alternate; agent 0 moves at t = 0, 2, 4, agent 1 at t = 1, 3. The game ends at t = 3
    (agent 1's move wins: +1 to it, -1 to agent 0, which did not move); a new game starts at t = 4
    and the rollout ends with agent 1 to move. gamma 0.9, lambda 0.5."""
    g, lam = 0.9, 0.5
    T, V = 5, torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8], [0.15, 0.25]])  # V[t, agent]
    acting = torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1], [1, 0]], dtype=torch.float)
    rewards = torch.zeros(T, 2)
    rewards[3] = torch.tensor([-1.0, 1.0])
    rewards[1, 0] = 0.05  # a small reward to agent 0 on agent 1's move: credited to agent 0's move at t = 0
    terminated = torch.zeros(T, 2)
    terminated[3] = 1.0
    next_values = torch.full((T, 2), 99.0)  # only read where an episode ends (terminated: ignored) and at T - 1
    next_values[-1] = torch.tensor([0.33, 0.44])  # after the rollout: agent 1 is to move
    b = {k: v[:, None] for k, v in dict(rewards=rewards, terminated=terminated, truncated=torch.zeros(T, 2),
                                         acting=acting, alive=torch.ones(T, 2)).items()}
    adv, ret, moves = turn_gae(b, V[:, None], next_values[:, None], torch.tensor([[False, True]]), g, lam)
    adv, moves = adv[:, 0], moves[:, 0]
    # agent 0: move t=2 gets the -1 of t=3 and ends the game; move t=0 gets 0.05 and looks to t=2
    a0_2 = -1.0 - V[2, 0]
    a0_0 = 0.05 + g * V[2, 0] - V[0, 0] + g * lam * a0_2
    # agent 1: move t=3 wins; move t=1 looks to t=3
    a1_3 = 1.0 - V[3, 1]
    a1_1 = 0.0 + g * V[3, 1] - V[1, 1] + g * lam * a1_3
    # agent 0's move t=4 is in a new game whose next move lies beyond the rollout: left out
    expected = torch.tensor([[a0_0, 0], [0, a1_1], [a0_2, 0], [0, a1_3], [0, 0]])
    torch.testing.assert_close(adv, expected)
    assert moves.tolist() == [[1, 0], [0, 1], [1, 0], [0, 1], [0, 0]]
    torch.testing.assert_close(ret[:, 0], adv + V)


def test_turn_gae_credits_a_dead_units_team_rewards_to_its_last_action():
    """SMAX: a unit acts while alive, and after its death keeps receiving the team's reward until the
    battle ends. Copy 0: unit 1 dies in step 1 (alive 0 from step 2) and the battle is won in step 3;
    a new battle starts at step 4. Copy 1: the same, but the battle is cut by the time limit in step 3.
    gamma 0.9, lambda 0.5."""
    g, lam = 0.9, 0.5
    T, E, N = 6, 2, 2
    torch.manual_seed(0)
    V = torch.rand(T, E, N)
    r = torch.tensor([0.1, 0.2, 0.3, 1.3, 0.1, 0.1])[:, None, None].expand(T, E, N).clone()
    alive = torch.ones(T, E, N)
    alive[2:4, :, 1] = 0.0
    ends = torch.zeros(T, E, N)
    ends[3] = 1.0
    terminated, truncated = ends * torch.tensor([1.0, 0.0])[:, None], ends * torch.tensor([0.0, 1.0])[:, None]
    next_values = torch.full((T, E, N), 99.0)  # read only at ends and at T - 1
    next_values[3, 1] = torch.tensor([0.5, 77.0])  # copy 1's cut: V of each unit's final view (unit 1's: a zero view)
    next_values[-1] = 0.25
    b = dict(rewards=r, terminated=terminated, truncated=truncated, acting=alive, alive=alive)
    adv, ret, moves = turn_gae(b, V, next_values, torch.ones(E, N, dtype=torch.bool), g, lam)
    # copy 0, unit 1: its last action (step 1) earns the rewards of steps 1-3, discounted per step, win included
    a1 = r[1, 0, 1] + g * r[2, 0, 1] + g * g * r[3, 0, 1] - V[1, 0, 1]
    torch.testing.assert_close(adv[1, 0, 1], a1)
    torch.testing.assert_close(adv[0, 0, 1], r[0, 0, 1] + g * V[1, 0, 1] - V[0, 0, 1] + g * lam * a1)
    # unit 0 lived on: plain GAE to the win
    a0_3 = r[3, 0, 0] - V[3, 0, 0]
    a0_2 = r[2, 0, 0] + g * V[3, 0, 0] - V[2, 0, 0] + g * lam * a0_3
    torch.testing.assert_close(adv[2, 0, 0], a0_2)
    # copy 1: unit 0 bootstraps the cut from its final view; unit 1's last action has no known return
    # (not the value of its zero view): left out, and step 0 bootstraps from V(step 1) without a tail
    torch.testing.assert_close(adv[3, 1, 0], r[3, 1, 0] + g * 0.5 - V[3, 1, 0])
    torch.testing.assert_close(adv[0, 1, 1], r[0, 1, 1] + g * V[1, 1, 1] - V[0, 1, 1])
    assert moves[:, :, 1].tolist() == [[1, 1], [1, 0], [0, 0], [0, 0], [1, 1], [1, 1]]
    assert moves[:, :, 0].all()
    torch.testing.assert_close(ret, adv + V)


def test_smax_says_which_units_act_next():
    """torch:smax_ gives `acting` (the units alive in the coming step), which sends the files whose
    critic sees a unit's own view through turn_gae: after reset every unit, after each step the live ones
    (a new battle's all)."""
    from envs import make_env

    env = make_env("torch:smax_3m", num_envs=8, seed=0)
    env.reset()
    assert env.acting.all()
    for _ in range(80):
        step = env.step(env.sample_actions())
        nxt = env.step(env.sample_actions())
        live_next = nxt.alive.bool()
        assert torch.equal(step.acting, live_next)  # who acts next is who is alive in the next step
        assert not (step.acting & ~step.alive.bool() & ~step.done[:, None]).any()  # no unit comes back mid-battle


def test_turn_gae_is_plain_gae_when_every_step_is_a_move():
    torch.manual_seed(0)
    T, E, N = 7, 3, 2
    rewards, values, next_values = torch.randn(T, E, N), torch.randn(T, E, N), torch.randn(T, E, N)
    terminated = (torch.rand(T, E, 1) < 0.2).float().expand(T, E, N)
    truncated = ((torch.rand(T, E, 1) < 0.2).float() * (1 - terminated[..., :1])).expand(T, E, N)
    ends = torch.maximum(terminated, truncated).bool()
    # plain GAE's next_values: the next step's value, or the final one where the episode ended
    chained = torch.where(ends, next_values, torch.cat([values[1:], next_values[-1:]]))
    expected = compute_gae(rewards, values, chained, terminated, truncated, 0.95, 0.9)
    b = dict(rewards=rewards, terminated=terminated, truncated=truncated, acting=torch.ones(T, E, N),
             alive=torch.ones(T, E, N))
    adv, ret, moves = turn_gae(b, values, chained, torch.ones(E, N, dtype=torch.bool), 0.95, 0.9)
    torch.testing.assert_close(adv, expected[0])
    torch.testing.assert_close(ret, expected[1])
    assert moves.all()


def two_stored_games(small_reward: float):
    """Two stored games (B = 2) of two agents, 5 steps, time first: agent 0 moves at steps 0, 2, 4, agent 1
    at 1, 3. Game 1 ends by agent 0's win at step 4 (+1 to it, -1 to agent 1); game 2 is cut by the clock
    after step 2 (ended, not terminated). `small_reward` reaches agent 0 on agent 1's move at step 1.
    Returns rewards, next_q (random: the value of the input after step t), acting, ended, terminated."""
    T, B, N = 5, 2, 2
    acting = torch.zeros(T, B, N)
    acting[0::2, :, 0] = 1.0
    acting[1::2, :, 1] = 1.0
    rewards = torch.zeros(T, B, N)
    rewards[1, :, 0] = small_reward
    rewards[4, 0] = torch.tensor([1.0, -1.0])
    ended = torch.zeros(T, B)
    ended[4, 0] = ended[2, 1] = 1.0
    terminated = torch.zeros(T, B, N)
    terminated[4, 0] = 1.0
    torch.manual_seed(0)
    return rewards, torch.rand(T, B, N), acting, ended, terminated


def test_turn_td_targets_by_hand():
    """IQL's targets over each agent's own moves. Game 1 of two agents: agent 0 moves at steps 0, 2, 4,
    agent 1 at 1, 3; agent 0 wins at step 4 (+1 to it, -1 to agent 1 on agent 0's move), and a small
    reward 0.05 reaches agent 0 on agent 1's move at step 1. Game 2 is the same but cut by the clock after
    step 2: agent 0's move at 2 and agent 1's at 1 have no known successor. gamma 0.9, lambda 0.5."""
    g, lam = 0.9, 0.5
    rewards, next_q, acting, ended, terminated = two_stored_games(small_reward=0.05)
    y, keep = turn_td_targets(rewards, next_q, acting, ended, terminated, g, lam)
    # game 1: agent 0's winning move; its move at 2 looks to 4; its move at 0 gets 0.05 and looks to 2
    y0_4 = torch.tensor(1.0)
    y0_2 = 0.0 + g * ((1 - lam) * next_q[3, 0, 0] + lam * y0_4)
    y0_0 = 0.05 + g * ((1 - lam) * next_q[1, 0, 0] + lam * y0_2)
    # agent 1: its move at 3 gets the -1 of step 4 (the loss arrives on the winner's move), its move at 1 looks to 3
    y1_3 = torch.tensor(-1.0)
    y1_1 = 0.0 + g * ((1 - lam) * next_q[2, 0, 1] + lam * y1_3)
    for (t, n), want in {(4, 0): y0_4, (2, 0): y0_2, (0, 0): y0_0, (3, 1): y1_3, (1, 1): y1_1}.items():
        torch.testing.assert_close(y[t, 0, n], want)
    assert keep[:, 0][acting[:, 0].bool()].tolist() == [1.0] * 5
    # game 2, cut after step 2: agent 0's move at 0 looks to its move at 2; the moves at 1 and 2 are left out
    torch.testing.assert_close(y[0, 1, 0], 0.05 + g * ((1 - lam) * next_q[1, 1, 0] + lam * y[2, 1, 0]))
    assert keep[0, 1, 0] == 1.0 and keep[1, 1, 1] == 0.0 and keep[2, 1, 0] == 0.0
    # lambda 0: one-step targets over moves, each bootstrapping from the agent's next move's value
    y_0, _ = turn_td_targets(rewards, next_q, acting, ended, terminated, g, 0.0)
    torch.testing.assert_close(y_0[0, 0, 0], 0.05 + g * next_q[1, 0, 0])
    torch.testing.assert_close(y_0[1, 0, 1], g * next_q[2, 0, 1])


def test_negamax_targets_by_hand():
    """IQL's --zero-sum-targets: a move is worth its reward minus the next mover's value of the position it
    leaves, lambda-mixed with the reply's target, one discount per ply. The games of the test above: agent 0
    moves at 0, 2, 4 and wins at 4; game 2 is cut by the clock after step 2. gamma 0.9, lambda 0.5."""
    g, lam = 0.9, 0.5
    rewards, next_q, acting, ended, terminated = two_stored_games(small_reward=0.0)
    y, keep = negamax_targets(rewards, next_q, acting, ended, terminated, g, lam)
    y0_4 = torch.tensor(1.0)
    y1_3 = -g * ((1 - lam) * next_q[3, 0, 0] + lam * y0_4)  # agent 0 moves next: its value, with a minus sign
    y0_2 = -g * ((1 - lam) * next_q[2, 0, 1] + lam * y1_3)
    y1_1 = -g * ((1 - lam) * next_q[1, 0, 0] + lam * y0_2)
    y0_0 = -g * ((1 - lam) * next_q[0, 0, 1] + lam * y1_1)
    for (t, n), want in {(4, 0): y0_4, (3, 1): y1_3, (2, 0): y0_2, (1, 1): y1_1, (0, 0): y0_0}.items():
        torch.testing.assert_close(y[t, 0, n], want)
    assert keep[:, 0][acting[:, 0].bool()].tolist() == [1.0] * 5
    # the cut game: its last move (t = 2) has no known target; the move before it bootstraps from the value alone
    assert keep[2, 1, 0] == 0.0 and keep[1, 1, 1] == 1.0
    y1_1_cut = -g * next_q[1, 1, 0]
    torch.testing.assert_close(y[1, 1, 1], y1_1_cut)
    torch.testing.assert_close(y[0, 1, 0], -g * ((1 - lam) * next_q[0, 1, 1] + lam * y1_1_cut))


# ---------------------------------------------------------------------------- the files
@pytest.mark.parametrize("algo", ["ippo", "mappo"])
@pytest.mark.parametrize("env,seats", [("classic:tictactoe", ("player_1", "player_2")),
                                       ("torch:connect_four", ("player_0", "player_1"))])
def test_self_play_runs_learn_only_from_moves(algo, env, seats, tmp_path):
    """Both seats share one policy (the default): a few iterations, finite losses, one return per seat."""
    import importlib
    from common.cli import make_args
    module = importlib.import_module(f"algos.{algo}")
    args = make_args(module.Args, env=env, num_envs=4, num_steps=16, total_timesteps=256,
                     eval_every=0, eval_episodes=4, eval_num_envs=2, hidden_sizes=(16,), cuda=False,
                     run_dir=str(tmp_path))
    summary = module.main(args)
    assert all(np.isfinite(v) for k, v in summary["final_losses"].items() if k != "explained_variance")
    returns = summary["eval_group_returns"]
    assert set(returns) == set(seats)
    assert returns[seats[0]] == pytest.approx(-returns[seats[1]])  # zero-sum


@pytest.mark.parametrize("env,seats", [("classic:tictactoe", ("player_1", "player_2")),
                                       ("torch:connect_four", ("player_0", "player_1"))])
@pytest.mark.parametrize("zero_sum", [False, True])
def test_iql_self_play_learns_only_from_moves(env, seats, zero_sum, tmp_path, monkeypatch):
    """IQL stores whole games and takes its targets over each agent's own moves (turn_td_targets; negamax_targets
    with --zero-sum-targets), its loss only on the moves: a few iterations, finite losses, one return per seat."""
    import algos.iql as iql
    from common.cli import make_args
    seen = []

    def recording(rewards, next_q, acting, *rest):
        seen.append(acting.clone())
        return (negamax_targets if zero_sum else turn_td_targets)(rewards, next_q, acting, *rest)

    monkeypatch.setattr(iql, "negamax_targets" if zero_sum else "turn_td_targets", recording)
    args = make_args(iql.Args, env=env, zero_sum_targets=zero_sum, num_envs=4, batch_size=4, updates_per_iteration=2, total_timesteps=300,
                     eval_every=0, eval_episodes=4, eval_num_envs=2, hidden_dim=16, hidden_layers=2, recurrent="none",
                     last_action_input=False, cuda=False, run_dir=str(tmp_path))
    summary = iql.main(args)
    game = envs.make_env(env, 1, seed=0)
    shapes = [tuple(p.shape) for p in iql.build_networks(args, game, torch.device("cpu")).parameters()]
    assert shapes.count((16, 16)) == 1  # --hidden-layers 2: two linear layers of width 16 before the head
    assert seen and all(a.sum(-1).max() == 1.0 for a in seen)  # one mover per step
    assert np.isfinite(summary["final_losses"]["td_loss"])
    returns = summary["eval_group_returns"]
    assert set(returns) == set(seats) and returns[seats[0]] == pytest.approx(-returns[seats[1]])


def test_zero_sum_targets_need_a_two_player_turn_based_game(tmp_path):
    run_dir = tmp_path / "runs"
    out = subprocess.run([sys.executable, "algos/iql.py", "--env", "torch:simple_spread", "--zero-sum-targets",
                          "--run-dir", str(run_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
    assert "--zero-sum-targets is for two-player turn-based games" in out.stderr and not run_dir.exists()


@pytest.mark.parametrize("algo,own_view", [("ippo", True), ("ia2c", True), ("mappo", False), ("maa2c", False)])
def test_on_smax_only_own_view_critics_credit_rewards_after_death(algo, own_view, tmp_path, monkeypatch):
    """A critic of the unit's own view (IPPO, IA2C, ITRPO) cannot value a dead unit's zero view, so its file
    credits the team's rewards after a death to the unit's last live action (turn_gae); a critic of the
    team's state (MAPPO, MAA2C, MATRPO) bootstraps a dead unit from it, with plain GAE."""
    import importlib
    from common.cli import make_args
    module = importlib.import_module(f"algos.{algo}")
    calls = []

    def recording(*a, **k):
        calls.append(1)
        return turn_gae(*a, **k)

    monkeypatch.setattr(module, "turn_gae", recording)
    args = make_args(module.Args, env="torch:smax_3m", num_envs=4, num_steps=16, total_timesteps=128,
                     eval_every=0, eval_episodes=2, eval_num_envs=2, hidden_sizes=(16,), cuda=False,
                     run_dir=str(tmp_path))
    module.main(args)
    assert bool(calls) == own_view


def test_other_files_refuse_turn_based_games_clearly(tmp_path):
    run_dir = tmp_path / "runs"
    out = subprocess.run([sys.executable, "algos/qmix.py", "--env", "classic:tictactoe", "--run-dir", str(run_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
    assert "turn-based" in out.stderr and "algos/ippo.py" in out.stderr and "algos/mappo.py" in out.stderr
    assert not run_dir.exists()


def test_seats_are_sides_except_in_cooperative_games():
    from common.groups import assign_groups
    assert assign_groups(["player_1", "player_2"], (), "classic:tictactoe") == (["player_1", "player_2"], [0, 1])
    assert assign_groups(["player_0", "player_1"], (), "classic:hanabi") == (["player"], [0, 0])  # one shared reward
