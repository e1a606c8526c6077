"""IQL, VDN, QMIX, QPLEX: targets worked by hand, replay masks, exploration, learning a matrix game."""
import importlib
import os

import numpy as np
import pytest
import torch

from common.cli import ConfigError, make_args
from nets import QPolicy

ALGOS = ["iql", "vdn", "qmix", "qplex"]
MODULES = {name: importlib.import_module(f"algos.{name}") for name in ALGOS}
REFERENCE = MODULES["qmix"]  # the other files carry copies of its short functions: they must agree


def tiny(algo, tmp_path, **overrides):
    """Settings small enough for a test: a feed-forward 16-unit agent, few updates."""
    base = dict(num_envs=4, batch_size=4, updates_per_iteration=1, hidden_dim=16, eval_every=0, eval_episodes=4,
                eval_num_envs=2, checkpoint_every=0, run_dir=str(tmp_path), total_timesteps=200)
    base.update(overrides)
    return make_args(MODULES[algo].Args, **base)


# ---------------------------------------------------------------------------- TD(lambda) targets
def test_td_lambda_one_step_by_hand():
    """lambda = 0: y_t = r_t + gamma (1 - term_t) Q'(s_{t+1})."""
    r = torch.tensor([[1.0], [2.0], [3.0]])  # (T=3, B=1)
    next_q = torch.tensor([[10.0], [20.0], [30.0]])
    term = torch.tensor([[0.0], [0.0], [1.0]])
    ended = torch.tensor([[0.0], [0.0], [1.0]])
    y = REFERENCE.td_lambda_targets(r, next_q, term, ended, gamma=0.5, lam=0.0)
    assert torch.allclose(y[:, 0], torch.tensor([1 + 0.5 * 10, 2 + 0.5 * 20, 3.0]))


def test_td_lambda_termination_vs_truncation_by_hand():
    """lambda = 1 gives the discounted return; at the last step a truncation bootstraps from
    Q'(s_T) and a termination does not."""
    r = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])  # (T=3, B=2): column 0 terminates, 1 truncates
    next_q = torch.full((3, 2), 8.0)
    ended = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    term = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    y = REFERENCE.td_lambda_targets(r, next_q, term, ended, gamma=0.5, lam=1.0)
    assert torch.allclose(y[:, 0], torch.tensor([1 + 0.5 + 0.25, 1 + 0.5, 1.0]))
    assert torch.allclose(y[:, 1], torch.tensor([1 + 0.5 + 0.25 * (1 + 0.5 * 8), 1 + 0.5 * (1 + 0.5 * 8), 1 + 0.5 * 8]))


def test_td_lambda_mixes_and_ignores_padding():
    """Intermediate lambda mixes the one-step bootstrap and the next target; a sequence that
    ended at t=1 is not influenced by the padded (garbage) step after it."""
    r = torch.tensor([[1.0], [1.0], [99.0]])
    next_q = torch.tensor([[4.0], [6.0], [99.0]])
    ended = torch.tensor([[0.0], [1.0], [0.0]])  # last real step is t=1; t=2 is padding
    term = torch.tensor([[0.0], [0.0], [0.0]])  # truncated at t=1
    lam, gamma = 0.6, 0.9
    y = REFERENCE.td_lambda_targets(r, next_q, term, ended, gamma, lam)
    y1 = 1 + gamma * 6
    assert torch.allclose(y[1, 0], torch.tensor(y1))
    assert torch.allclose(y[0, 0], torch.tensor(1 + gamma * ((1 - lam) * 4 + lam * y1)))


def test_episode_ends_stop_the_bootstrap_at_the_clock_by_default():
    """QMIX and QPLEX end every episode's targets at its last real step, as EPyMARL does on MPE: a
    clock truncation is no bootstrap by default. Bootstrapping there let the mixer-amplified max
    overestimation compound over 1/(1-gamma) steps; Q_tot climbed far above the returns (5 -> 152
    in 160k env steps on torch:simple_spread, with discounted returns near 0)."""
    step_mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])  # (T=3, B=2): lengths 3 and 2
    dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # column 0 cut by the clock, 1 terminated
    ended, term = REFERENCE.episode_ends(step_mask, dones, bootstrap_time_limit=False)
    assert torch.equal(ended, torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    assert torch.equal(term, ended)
    _, term_boot = REFERENCE.episode_ends(step_mask, dones, bootstrap_time_limit=True)
    assert torch.equal(term_boot, torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    r, next_q = torch.ones(3, 2), torch.full((3, 2), 50.0)  # a large (overestimated) bootstrap value
    y = REFERENCE.td_lambda_targets(r, next_q, term, ended, gamma=0.9, lam=0.6)
    assert y[2, 0] == 1.0 and y[1, 1] == 1.0  # the last targets are the rewards alone
    for name in ("qmix", "qplex"):
        assert MODULES[name].Args().bootstrap_time_limit is False
        got_ended, got_term = MODULES[name].episode_ends(step_mask, dones, False)
        assert torch.equal(got_ended, ended) and torch.equal(got_term, term)
        assert torch.equal(MODULES[name].episode_ends(step_mask, dones, True)[1], term_boot)


def test_with_final_step_places_each_final_observation():
    x = torch.arange(6.0).view(3, 2, 1)  # (T=3, B=2, 1)
    nxt = x + 100
    lengths = torch.tensor([3, 1])
    out = REFERENCE.with_final_step(x, nxt, lengths)
    assert out.shape == (4, 2, 1)
    assert out[3, 0, 0] == nxt[2, 0, 0] and out[1, 1, 0] == nxt[0, 1, 0]
    assert torch.equal(out[:3, 0], x[:, 0])


@pytest.mark.parametrize("algo", ["iql", "vdn", "qplex"])
def test_copied_functions_agree_with_qmix(algo):
    """STYLE.md allows short algorithmic copies across files, checked against one reference."""
    m = MODULES[algo]
    g = torch.Generator().manual_seed(0)
    r, q = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    term = (torch.rand(6, 4, generator=g) < 0.2).float()
    ended = torch.maximum(term, (torch.rand(6, 4, generator=g) < 0.2).float())
    assert torch.equal(m.td_lambda_targets(r, q, term, ended, 0.9, 0.6),
                       REFERENCE.td_lambda_targets(r, q, term, ended, 0.9, 0.6))
    x, lengths = torch.randn(5, 3, 2, generator=g), torch.tensor([5, 2, 1])
    assert torch.equal(m.with_final_step(x, x + 1, lengths), REFERENCE.with_final_step(x, x + 1, lengths))
    mask = torch.rand(6, 4, generator=g) < 0.5
    assert torch.equal(m.masked_mean(r, mask.float()), REFERENCE.masked_mean(r, mask.float()))


def test_iql_team_reward_gives_every_agent_the_sum():
    r = torch.tensor([[[1.0, -2.0, 4.0]], [[0.5, 0.0, 0.0]]])  # (T=2, B=1, N=3)
    m = MODULES["iql"]
    assert torch.equal(m.learned_rewards(r, False), r)
    assert torch.equal(m.learned_rewards(r, True), torch.tensor([[[3.0] * 3], [[0.5] * 3]]))


def test_iql_credits_a_units_rewards_after_its_death_to_its_last_action():
    """A SMAX unit dies in step 1 and stays in the battle (alive 0, the team's reward) to its end at step 5:
    its target at step 1 takes the rewards after the death, discounted per step, not the Q of its zero
    view; where the clock cut the battle, that action is left out."""
    m = MODULES["iql"]
    T, gamma = 6, 0.5
    rewards = torch.arange(1.0, 7.0).view(T, 1, 1).expand(T, 1, 2).clone()  # (T, B=1, N=2): 1..6, both units
    alive = torch.ones(T, 1, 2)
    alive[2:, 0, 1] = 0.0  # unit 1 acts at steps 0 and 1, then is dead
    step_mask, ended = torch.ones(T, 1), torch.zeros(T, 1)
    ended[-1] = 1.0
    won = torch.zeros(T, 1, 2)
    won[-1] = 1.0  # the battle's end terminates both units
    death, tail, keep = m.after_death(rewards, alive, step_mask, ended, won, gamma)
    assert death.nonzero().tolist() == [[1, 0, 1]]
    assert tail[1, 0, 1] == 3 + 0.5 * 4 + 0.25 * 5 + 0.125 * 6  # G_2 = 7
    assert torch.equal(keep, torch.ones(T, 1, 2))
    # Through IQL's targets: whatever Q' says (100 everywhere, zero views included), y_1 = r_1 + gamma G_2.
    next_q = torch.where(death > 0, tail, torch.full((T, 1, 2), 100.0))
    y = m.td_lambda_targets(rewards, next_q, won, torch.maximum(torch.maximum(ended[..., None], won), death),
                            gamma, 0.6)
    assert y[1, 0, 1] == 2 + 0.5 * 7
    assert y[1, 0, 0] != y[1, 0, 1]  # the live unit still bootstraps from Q'
    cut = torch.zeros(T, 1, 2)  # the same battle ended by the clock: no return after the death is known
    death, _, keep = m.after_death(rewards, alive, step_mask, ended, cut, gamma)
    assert keep[1, 0, 1] == 0 and keep.sum() == T * 2 - 1
    no_deaths = m.after_death(rewards, torch.ones(T, 1, 2), step_mask, ended, won, gamma)
    assert no_deaths[0].sum() == 0 and torch.equal(no_deaths[2], torch.ones(T, 1, 2))
    leaves = won.clone()
    leaves[1, 0, 1] = 1.0  # an agent that leaves for good (MAgent2) is terminated at its death: nothing to do
    assert m.after_death(rewards, alive, step_mask, ended, leaves, gamma)[0].sum() == 0


# ---------------------------------------------------------------------------- acting
def test_epsilon_greedy_honours_masks():
    q = torch.tensor([[[5.0, 1.0, 9.0]]]).expand(200, 1, 3)  # (E, N, A): action 2 is best but unavailable
    mask = torch.tensor([True, True, False]).expand(200, 1, 3)
    greedy = REFERENCE.epsilon_greedy(q, mask, 0.0)
    assert (greedy == 0).all()
    random = REFERENCE.epsilon_greedy(q, mask, 1.0)
    assert set(random.unique().tolist()) == {0, 1}


def test_qpolicy_carries_and_resets_the_last_action():
    torch.manual_seed(0)
    policy = QPolicy(obs_dim=3, n_actions=4, n_agents=2, hidden_dim=8, recurrent="gru", last_action_input=True)
    state = policy.initial_state(5)
    assert len(state) == 2 and state[1].shape == (5, 2, 4)
    obs = torch.randn(1, 5, 2, 3)
    greedy, state = policy(obs, state, torch.ones(1, 5, 2))
    state = policy.remember(state, greedy.mode()[0])
    assert (state[1].sum(-1) == 1).all()  # one-hot of the chosen actions
    # Same obs with the last action zeroed at an episode start equals a fresh start.
    fresh, _ = policy(obs, policy.initial_state(5), torch.ones(1, 5, 2))
    restarted, _ = policy(obs, (torch.zeros_like(state[0]), state[1]), torch.ones(1, 5, 2))
    assert torch.allclose(fresh.q, restarted.q)


# ---------------------------------------------------------------------------- replay
def test_replay_padding_lines_up_with_stored_episodes():
    from buffers import MultiAgentRolloutBuffer

    buf = MultiAgentRolloutBuffer(2, capacity=10)
    for T in (3, 5):
        buf.reset_current_episode()
        for t in range(T):
            step = torch.full((4, 2), float(T * 10 + t))  # (E=4, N=2): value encodes (episode, step)
            buf.add_transition(obs=step[..., None], actions=step, rewards=step, next_obs=step[..., None],
                               terminated=torch.zeros(4, 2), valid=torch.ones(4, 2))
        buf.end_episode()
    b = buf.sample_episodes(64, torch.Generator().manual_seed(1))
    assert b["rewards"].shape == (64, 5, 2) and b["filled"].shape == (64, 5)
    lengths = b["filled"].sum(1)
    assert set(lengths.tolist()) == {3.0, 5.0}
    for seq, n in zip(b["rewards"], lengths.long()):
        T = int(n)
        assert torch.equal(seq[:T, 0], torch.arange(T) + T * 10.0)  # real steps in order
        assert (seq[T:] == 0).all()  # padding
    state = buf.state_dict()
    again = MultiAgentRolloutBuffer(1)
    again.load_state_dict(state)
    assert len(again.episodes) == 2 and torch.equal(again.episodes[1]["rewards"][1][4], buf.episodes[1]["rewards"][1][4])


def test_replayed_utilities_equal_acting_step_by_step(monkeypatch):
    """What every gradient step computes: the agents' utilities over whole drawn episodes (padded to the
    longest drawn one, each episode's final observation after its last step) in one call of the fused
    GRU. They must equal the utilities of acting through the episode one step at a time, the previous
    action carried in the state, on every real step and at the final observation."""
    from buffers import MultiAgentRolloutBuffer
    from nets.recurrent import RecurrentCore

    torch.manual_seed(0)
    N, A, D, E = 2, 4, 3, 2
    policy = QPolicy(obs_dim=D, n_actions=A, n_agents=N, hidden_dim=16, recurrent="gru", last_action_input=True)
    buf = MultiAgentRolloutBuffer(N, capacity=10)
    for T in (3, 6, 4):  # episodes of different lengths: a batch is padded to its longest
        buf.reset_current_episode()
        for _ in range(T):
            buf.add_transition(obs=torch.randn(E, N, D), actions=torch.randint(A, (E, N)),
                               rewards=torch.randn(E, N), next_obs=torch.randn(E, N, D),
                               terminated=torch.zeros(E, N), valid=torch.ones(E, N))
        buf.end_episode()
    b = buf.sample_episodes(8, torch.Generator().manual_seed(2))
    b = {k: v.transpose(0, 1) for k, v in b.items()}  # (T, B, N, ...) as in the files
    lengths = b["filled"].sum(0).long()  # (B,)
    T, B = b["filled"].shape
    assert T == int(lengths.max())  # padding trimmed to the longest drawn episode
    obs_all = REFERENCE.with_final_step(b["obs"], b["next_obs"], lengths)  # (T+1, B, N, D)
    actions = b["actions"].long()
    last_all = torch.cat([torch.zeros(1, B, N, A), torch.nn.functional.one_hot(actions, A).float()])
    starts_all = torch.zeros(T + 1, B, N)
    starts_all[0] = 1.0
    original, fused = RecurrentCore._fused, []

    def counted(self, *args):
        fused.append(1)
        return original(self, *args)

    monkeypatch.setattr(RecurrentCore, "_fused", counted)
    q_all, _ = policy.q_values(obs_all, last_all, policy.net.initial_state(B), starts_all)  # (T+1, B, N, A)
    assert fused  # one call of torch's GRU over the whole batch, no loop over steps
    for seq in range(B):
        state, starts = policy.initial_state(1), torch.ones(1, 1, N)
        for t in range(int(lengths[seq]) + 1):
            greedy, state = policy(obs_all[t:t + 1, seq:seq + 1], state, starts)
            torch.testing.assert_close(q_all[t, seq], greedy.q[0, 0], rtol=1e-5, atol=1e-5)
            if t < lengths[seq]:
                state = policy.remember(state, actions[t, seq:seq + 1])
            starts = torch.zeros(1, 1, N)


def test_speed_benchmark_times_each_part_of_a_gradient_step():
    """benchmarks/speed_value_based.py times the file's own update by wrapping the calls it is made of:
    each part that QMIX's gradient step certainly does gets time, the parts fit in the step, and the
    wrappers are gone after."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import speed_value_based

    q_values, backward = QPolicy.q_values, torch.Tensor.backward
    (row,) = speed_value_based.main(["--algos", "qmix", "--iterations", "1", "--algo-flags",
                                     "--num-envs 2 --batch-size 2 --updates-per-iteration 2 --hidden-dim 8"])
    assert row["gradient_steps"] == 2 and row["loop_sps"] > 0
    assert all(row[part] > 0 for part in speed_value_based.PARTS)
    assert sum(row[part] for part in speed_value_based.PARTS) <= row["step"]  # two steps: medians are means
    assert QPolicy.q_values is q_values and torch.Tensor.backward is backward


# ---------------------------------------------------------------------------- learning
@pytest.mark.parametrize("algo", ["vdn", "qmix"])
def test_learns_the_optimal_joint_action_of_a_matrix_game(algo, tmp_path):
    """Coordination game: (0, 0) pays 10 to both agents (return 20), every other pair at most 5."""
    torch.manual_seed(0)
    args = tiny(algo, tmp_path, env="matrix_game", num_envs=16, batch_size=32, updates_per_iteration=2,
                total_timesteps=1600, eps_anneal_steps=800, learning_rate=5e-3, recurrent="none",
                last_action_input=False, eval_episodes=8)
    summary = MODULES[algo].main(args)
    assert summary["eval_return_mean"] == 20.0


# ---------------------------------------------------------------------------- runs
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", ["torch:simple_spread", "simple_reference"])
def test_smoke(algo, env, tmp_path):
    args = tiny(algo, tmp_path, env=env, num_envs=2, batch_size=2, total_timesteps=100, eval_every=50)
    summary = MODULES[algo].main(args)
    assert summary["global_step"] == 100 and np.isfinite(summary["eval_return_mean"])
    assert np.isfinite(summary["final_losses"]["td_loss"])
    assert len(summary["eval_history"]) == 2


@pytest.mark.parametrize("algo", ALGOS)
def test_continuous_env_is_rejected_with_the_algorithms_that_fit(algo, tmp_path):
    args = tiny(algo, tmp_path, env="simple_spread", env_kwargs=("continuous_actions=true",))
    with pytest.raises(ConfigError, match="mappo"):
        MODULES[algo].main(args)


def test_iql_with_the_team_reward_runs(tmp_path):
    summary = MODULES["iql"].main(tiny("iql", tmp_path, env="torch:simple_spread", team_reward=True))
    assert summary["global_step"] == 200 and np.isfinite(summary["final_losses"]["td_loss"])


def test_resume_restores_replay_and_counters(tmp_path):
    m = MODULES["qmix"]
    first = m.main(tiny("qmix", tmp_path, env="torch:simple_spread", total_timesteps=200))
    ckpt = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)
    assert len(ckpt["replay"]["episodes"]) == 2 and ckpt["updates"] == 2
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=300))
    assert resumed["global_step"] == 300 and resumed["run_dir"] == first["run_dir"]


@pytest.mark.parametrize("algo", ["qmix", "qplex"])
def test_state_norm_standardises_the_mixers_state_and_resumes(algo, tmp_path):
    """--state-norm: the running statistics come from the states played, are saved, and a resumed run
    carries them on (SMAX's raw coordinates are the case it is for)."""
    m = MODULES[algo]
    first = m.main(tiny(algo, tmp_path, env="torch:smax_3m", state_norm=True, total_timesteps=300))
    ckpt = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)
    saved = ckpt["state_norm"]
    assert saved["count"] >= 300 // 3 and saved["mean"].abs().max() > 1.0  # map coordinates, not fractions
    assert (saved["var"] > 0).any()
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=600))
    later = torch.load(os.path.join(resumed["run_dir"], "checkpoint.pt"), weights_only=True)["state_norm"]
    assert later["count"] > saved["count"]
    off = m.main(tiny(algo, tmp_path / "off", env="torch:smax_3m", total_timesteps=300))
    assert torch.load(os.path.join(off["run_dir"], "checkpoint.pt"), weights_only=True)["state_norm"]["count"] == 0


def test_same_seed_same_losses(tmp_path):
    m = MODULES["qmix"]
    a = m.main(tiny("qmix", tmp_path / "a", env="torch:simple_spread"))
    b = m.main(tiny("qmix", tmp_path / "b", env="torch:simple_spread"))
    assert a["final_losses"] == b["final_losses"]
