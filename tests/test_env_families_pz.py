"""PettingZoo SISL, butterfly and MAgent2 behind the batched adapter: shapes, seeding, auto-reset,
dead-agent masking on MAgent2 and in the losses (QMIX, VDN, QPLEX, IQL, FACMAC), the CNN encoder
chosen from the observation shape, and smoke runs of IPPO, MAPPO (and QMIX where actions are
discrete) on every family, on reduced scenario sizes. Every other algorithm runs on every family
in tests/test_support_table.py.

A family's tests skip, saying what to install, only when its package is absent."""
import dataclasses
import importlib
import importlib.util
import math
import re
import warnings

import numpy as np
import pytest
import torch

import envs
from algos import ippo, mappo, qmix
from common.cli import ConfigError, make_args
from nets import Actor, CNNEncoder, Critic, FlatEncoder, MultiEncoder, QPolicy, encoder_for


def _have(*modules):
    return all(importlib.util.find_spec(m) is not None for m in modules)


NEEDS = {
    "sisl": pytest.mark.skipif(not _have("Box2D", "pymunk"), reason='needs pip install "pettingzoo[sisl]==1.27.0"'),
    "butterfly": pytest.mark.skipif(not _have("pymunk"), reason='needs pip install "pettingzoo[butterfly]==1.27.0"'),
    "magent2": pytest.mark.skipif(not _have("magent2"), reason="needs pip install magent2==0.3.4"),
}

# Reduced sizes: every episode a handful of steps, screens downsampled.
SMALL = {
    "sisl:multiwalker": {"max_cycles": 8},
    "sisl:pursuit": {"max_cycles": 6, "n_pursuers": 3, "n_evaders": 4, "x_size": 8, "y_size": 8},
    "butterfly:pistonball": {"n_pistons": 3, "max_cycles": 6, "image_stride": 8},
    "butterfly:cooperative_pong": {"max_cycles": 6, "image_stride": 8},
    "butterfly:knights_archers_zombies": {"max_cycles": 6},
    "magent2:battle": {"map_size": 12, "max_cycles": 6},
    "magent2:adversarial_pursuit": {"map_size": 10, "max_cycles": 6},
}
# name -> (agents, obs_shape, discrete, image obs dtype) with the SMALL arguments
EXPECTED = {
    "sisl:multiwalker": (3, (31,), False, np.float32),
    "sisl:pursuit": (3, (7, 7, 3), True, np.float32),
    "butterfly:pistonball": (3, (58, 15, 3), False, np.uint8),  # 457 x 120 strips, every 8th pixel
    "butterfly:cooperative_pong": (2, (35, 60, 3), True, np.uint8),  # 280 x 480 screen, every 8th pixel
    "butterfly:knights_archers_zombies": (4, (135,), True, np.float32),  # (27, 5) entity rows, flattened
    "magent2:battle": (4, (13, 13, 5), True, np.float32),
    "magent2:adversarial_pursuit": (3, (10, 10, 5), True, np.float32),  # prey's 9 x 9 view padded to 10 x 10
}
NAMES = [pytest.param(name, marks=NEEDS[name.split(":")[0]]) for name in SMALL]


def kwargs_pairs(name):
    return tuple(f"{k}={v}" for k, v in SMALL[name].items())


@pytest.fixture(autouse=True)
def quiet_single_thread():
    """The family modules warn about being built without the registry; and one torch thread, as the
    algorithms use (--torch-threads 1): on a busy 2-core machine a 2-thread QR init is 40x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "WARN: You are calling render method")  # cooperative_pong's reset
        yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- registry
def test_names_and_arguments():
    names = envs.known_envs()
    for name in SMALL:
        assert name in names
    with pytest.raises(ValueError, match="known: sisl:multiwalker, sisl:pursuit"):
        envs.make_env("sisl:waterworld", 1)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_argument_lists_the_accepted_ones(name):
    accepted = envs.env_arguments(name)
    assert "max_cycles" in accepted and accepted["image_stride"] == 1
    assert "seed" not in accepted and "render_mode" not in accepted  # set by the adapter
    with pytest.raises(ValueError, match=r"does not take argument\(s\) \['colour'\]; accepted: .*max_cycles"):
        envs.make_env(name, 1, env_kwargs={"colour": 3})


@NEEDS["magent2"]
def test_magent2_reward_arguments_are_accepted():
    """MAgent2 scenarios take their reward terms through **kwargs; the registry lists them."""
    assert envs.env_arguments("magent2:battle")["attack_opponent_reward"] == 0.2
    env = envs.make_env("magent2:battle", 1, env_kwargs={"map_size": 12, "step_reward": -1.0})
    env.reset()
    assert np.allclose(env.step(np.full((1, 4), 6)).reward, -1.0)


def test_missing_package_names_the_pip_line(monkeypatch):
    def absent(name, *args):
        raise ImportError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(envs.pz_families.importlib, "import_module", absent)
    with pytest.raises(ImportError, match=r"magent2:battle needs an optional package .* pip install magent2==0\.3\.4"):
        envs.make_env("magent2:battle", 1)
    with pytest.raises(ImportError, match=r'pip install "pettingzoo\[sisl\]==1\.27\.0"'):
        envs.env_arguments("sisl:multiwalker")


@NEEDS["sisl"]
def test_image_stride_on_vector_observations_fails():
    with pytest.raises(ValueError, match="image_stride=2 downsamples image observations"):
        envs.make_env("sisl:multiwalker", 1, env_kwargs={"image_stride": 2})


# ---------------------------------------------------------------------------- adapter
@pytest.mark.parametrize("name", NAMES)
def test_shapes_seeding_and_auto_reset(name):
    n_agents, obs_shape, discrete, dtype = EXPECTED[name]
    E = 2
    env = envs.make_env(name, E, seed=3, env_kwargs=SMALL[name])
    assert (env.n_agents, env.obs_shape, env.discrete) == (n_agents, obs_shape, discrete)
    assert env.obs_dim == math.prod(obs_shape) and env.state_dim == math.prod(env.state_shape)
    obs, state, mask = env.reset()
    assert obs.shape == (E, n_agents, *obs_shape) and obs.dtype == dtype
    assert state.shape == (E, env.state_dim) and state.dtype == np.float32
    assert (mask is None) == (not discrete)
    twin = envs.make_env(name, E, seed=3, env_kwargs=SMALL[name])
    assert np.array_equal(twin.reset()[0], obs)  # same seed, same first observations

    rng = np.random.default_rng(0)
    ended = np.zeros(E, int)
    for _ in range(SMALL[name]["max_cycles"] + 1):  # every copy ends an episode by the time limit
        actions = env.sample_actions(rng)
        step = env.step(actions)
        assert step.obs.shape == obs.shape and step.final_obs.shape == obs.shape
        assert step.reward.shape == step.alive.shape == (E, n_agents)
        # where an episode ended, obs is the next episode's start; final_obs its last observation
        assert np.all(step.episode_length[step.done] >= 1) and np.all(step.episode_length[~step.done] == 0)
        ended += step.done
    assert np.all(ended >= 1)


@NEEDS["magent2"]
def test_magent2_dead_agent_is_padded_and_masked():
    """red_0 walks up to blue_0 and attacks it until it dies: the step it dies in is its last with
    alive=1 (terminated there); from then on alive=0, a zero observation and zero reward, while
    the other agents play on."""
    env = envs.make_env("magent2:battle", 2, seed=0, env_kwargs={"map_size": 12, "max_cycles": 40})
    assert env.agents == ["red_0", "red_1", "blue_0", "blue_1"]
    env.reset()
    died_at, steps = None, []
    for t in range(20):
        actions = np.full((2, 4), 6)  # 6: in place, for blue
        actions[:, 0] = 7 if t < 8 else 17  # 7: one cell right; 17: attack the cell to the right
        step = env.step(actions)
        steps.append(step)
        if died_at is None and step.terminated[0, 2]:
            died_at = t
    assert died_at is not None, "blue_0 never died"
    assert steps[died_at].alive[0, 2] and not steps[died_at].done[0]
    for step in steps[died_at + 1:]:
        assert not step.alive[:, 2].any() and step.alive[:, [0, 1, 3]].all()
        assert step.reward[0, 2] == 0.0 and not step.obs[:, 2].any()
        assert not step.done.any()


@NEEDS["magent2"]
def test_dead_agents_are_left_out_of_the_ppo_loss():
    """mappo.masked_mean (the loss reduction of MAPPO and IPPO) ignores a dead agent's entries
    however large they are."""
    x = torch.tensor([[1.0, 2.0, 1e6]])
    alive = torch.tensor([[1.0, 1.0, 0.0]])
    assert mappo.masked_mean(x, alive).item() == 1.5
    assert ippo.masked_mean(x, alive).item() == 1.5


@NEEDS["magent2"]
def test_magent2_state_survives_a_wiped_out_group():
    """MAgent2's own state() fails once a group is empty (the end of a battle); the registry's
    wrapper draws only the groups that still have agents."""
    maker = envs.env_maker("magent2:tiger_deer")
    env = maker(map_size=10, max_cycles=20, tiger_step_recover=-6.0)  # the only tiger starves in 2 steps
    env.reset(seed=0)
    while env.agents:  # (stepping MAgent2 past its end crashes the process)
        env.step({a: 6 for a in env.agents})
    state = env.state()
    assert state.shape == (10, 10, 5) and not state[..., 3:].any()  # no tiger left to draw


# ---------------------------------------------------------------------------- encoders
def test_encoder_is_chosen_from_the_observation_shape():
    assert isinstance(encoder_for(18), FlatEncoder) and isinstance(encoder_for((18,)), FlatEncoder)
    small, big = encoder_for((7, 7, 3)), encoder_for((457, 120, 3))
    assert isinstance(small, CNNEncoder) and isinstance(big, CNNEncoder)
    with pytest.raises(ValueError, match=r"shape \(27, 5\).*images \(H, W, C\)"):
        encoder_for((27, 5))
    # pooled to at most 8 x 8 cells of 32 channels: the linear layer stays small for a big screen
    assert big.flat_dim <= 32 * 8 * 8
    assert sum(p.numel() for p in big.parameters()) < 300_000
    x = torch.randint(0, 256, (1, 2, 2, 457, 120, 3), dtype=torch.uint8)  # (L, B, N, H, W, C)
    assert big(x).shape == (1, 2, 2, 128)
    flat = x.reshape(1, 2, 2, -1)  # a flattened image (a centralised critic's state) is reshaped
    assert torch.equal(big(flat), big(x))


def test_separate_cnn_weights_keep_agents_apart():
    """With one group of channels per agent, agent n's features depend on agent n's image only."""
    torch.manual_seed(0)
    enc = CNNEncoder((9, 9, 5), feature_dim=16, n_agents=3)
    x = torch.rand(4, 3, 9, 9, 5)
    y = x.clone()
    y[:, 1] = torch.rand(4, 9, 9, 5)  # change agent 1's input only
    fx, fy = enc(x), enc(y)
    assert torch.equal(fx[:, [0, 2]], fy[:, [0, 2]]) and not torch.allclose(fx[:, 1], fy[:, 1])
    # the same image in every agent's slot gives different features: the weights are separate
    same = x[:, :1].expand(4, 3, 9, 9, 5)
    assert not torch.allclose(enc(same)[:, 0], enc(same)[:, 1])


def test_actor_critic_and_qpolicy_take_images():
    mask = torch.ones(2, 5, dtype=torch.bool)
    actor = Actor((13, 13, 5), 2, True, 5, mask)
    critic = Critic((12, 12, 5), 2)
    agents = QPolicy((13, 13, 5), 5, 2, recurrent="gru", last_action_input=True)
    obs = torch.rand(1, 3, 2, 13, 13, 5)  # (L, B, N, H, W, C)
    assert actor(obs)[0].sample().shape == (1, 3, 2)
    assert critic(torch.rand(1, 3, 2, 12 * 12 * 5))[0].shape == (1, 3, 2)  # flat state, image encoder
    q, _ = agents.q_values(obs, torch.zeros(1, 3, 2, 5), agents.net.initial_state(3), torch.ones(1, 3, 2))
    assert q.shape == (1, 3, 2, 5)
    for net in (actor, critic, agents):
        assert isinstance(net.net.encoder, CNNEncoder)
    assert isinstance(Actor(18, 2, True, 5, mask).net.encoder, FlatEncoder)
    # a network built from obs_dim alone (not from the env's obs_shape) says what went wrong
    with pytest.raises(ValueError, match=r"flat inputs of size 845 got inputs shaped \(1, 3, 2, 13, 13, 5\)"):
        Actor(13 * 13 * 5, 2, True, 5, mask)(obs)


def test_several_inputs_are_encoded_apart_then_concatenated():
    """A tuple of shapes gives one encoder per input (a critic on an image state and the joint
    action): the image through its CNN, uint8 pixels scaled as alone; flat parts alone give exactly
    their concatenation, so flat-input critics compute what torch.cat(parts) gave them."""
    torch.manual_seed(0)
    enc = encoder_for(((9, 9, 5), (4,)), feature_dim=16)
    assert isinstance(enc, MultiEncoder) and isinstance(enc.parts[0], CNNEncoder) and enc.out_dim == 16 + 4
    image = torch.randint(0, 256, (3, 2, 9, 9, 5), dtype=torch.uint8)  # (B, N, H, W, C)
    action = torch.rand(3, 2, 4)
    out = enc((image, action))
    assert out.shape == (3, 2, 20)
    assert torch.equal(out[..., :16], enc.parts[0](image)) and torch.equal(out[..., 16:], action)
    assert torch.equal(enc((image.reshape(3, 2, -1), action)), out)  # a flattened image is reshaped
    flat = encoder_for(((3,), (4,)))
    x, y = torch.rand(3, 2, 3), torch.rand(3, 2, 4)
    assert torch.equal(flat((x, y)), torch.cat([x, y], dim=-1)) and not list(flat.parameters())
    critic = Critic(((9, 9, 5), (4,)), 2, hidden_sizes=(8,))
    assert critic((image, action))[0].shape == (3, 2)
    with pytest.raises(ValueError, match="built for 2 inputs"):
        enc(action)


def test_unsupported_spaces_fail_naming_them():
    from gymnasium import spaces

    class OneAgent:
        possible_agents = agents = ["a"]

        def __init__(self, obs_space, act_space):
            self.obs_space, self.act_space = obs_space, act_space

        def observation_space(self, agent):
            return self.obs_space

        def action_space(self, agent):
            return self.act_space

    box = spaces.Box(0, 1, (3,))
    with pytest.raises(TypeError, match=r"observation space Box\(0\.0, 1\.0, \(2, 3, 4, 5\)"):
        envs.PettingZooVecEnv(lambda: OneAgent(spaces.Box(0, 1, (2, 3, 4, 5)), spaces.Discrete(2)), 1)
    with pytest.raises(TypeError, match=r"observation space Discrete\(4\)"):
        envs.PettingZooVecEnv(lambda: OneAgent(spaces.Discrete(4), spaces.Discrete(2)), 1)
    with pytest.raises(TypeError, match=r"action spaces \[MultiDiscrete\(\[2 3\]\)\] are not supported"):
        envs.PettingZooVecEnv(lambda: OneAgent(box, spaces.MultiDiscrete([2, 3])), 1)


# ---------------------------------------------------------------------------- smoke runs
TINY = dict(num_envs=2, num_steps=4, total_timesteps=16, update_epochs=1, hidden_sizes=(16,), eval_every=0,
            eval_episodes=1, eval_num_envs=1, checkpoint_every=0, cuda=False)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("algo", [mappo, ippo], ids=["mappo", "ippo"])
def test_ppo_smoke(algo, name, tmp_path):
    args = make_args(algo.Args, env=name, env_kwargs=kwargs_pairs(name), run_dir=str(tmp_path), **TINY)
    summary = algo.main(args)
    assert summary["global_step"] == 16
    for key, value in summary["final_losses"].items():
        if key != "explained_variance":  # nan where a 16-step rollout's returns do not vary
            assert math.isfinite(value), (key, value)
    assert math.isfinite(summary["eval_return_mean"])


DISCRETE = [p for p in NAMES if EXPECTED[p.values[0]][2]]


@pytest.mark.parametrize("name", DISCRETE)
def test_qmix_smoke(name, tmp_path):
    args = make_args(qmix.Args, env=name, env_kwargs=kwargs_pairs(name), run_dir=str(tmp_path), num_envs=2,
                     batch_size=2, updates_per_iteration=1, hidden_dim=16, eval_every=0, eval_episodes=1,
                     eval_num_envs=1, checkpoint_every=0, total_timesteps=24, cuda=False)
    summary = qmix.main(args)
    assert summary["global_step"] >= 24
    assert math.isfinite(summary["final_losses"]["td_loss"])


CONCAT_OBS = [pytest.param(a, "sisl:pursuit", "(7, 7, 3)", marks=NEEDS["sisl"])
              for a in ("mappo", "maa2c", "matrpo", "maddpg")] \
    + [pytest.param(a, "butterfly:pistonball", "(58, 15, 3)", marks=NEEDS["butterfly"]) for a in ("matd3", "masac", "hasac")]


@pytest.mark.parametrize("algo,name,shape", CONCAT_OBS)
def test_concat_obs_rejects_images(algo, name, shape, tmp_path):
    """Every file with --critic-input refuses all observations concatenated when they are images,
    naming the alternative, before the run folder is written."""
    module = importlib.import_module(f"algos.{algo}")
    fields = {f.name for f in dataclasses.fields(module.Args)}
    settings = {k: v for k, v in dict(TINY, hidden_dim=16, batch_size=2, learning_starts=0).items() if k in fields}
    args = make_args(module.Args, env=name, env_kwargs=kwargs_pairs(name), critic_input="concat_obs",
                     run_dir=str(tmp_path / "runs"), **settings)
    with pytest.raises(ConfigError, match=rf"concat_obs needs flat observations; {name} has images "
                                          rf"{re.escape(shape)}: use --critic-input state"):
        module.main(args)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


class LeavingAgent:
    """Two agents, 4-step episodes; agent "b" dies in step 2 (terminated there, gone after)."""

    possible_agents = ["a", "b"]

    def __init__(self, continuous: bool = False):
        from gymnasium import spaces
        self.obs_space = spaces.Box(-1, 1, (3,))
        self.act_space = spaces.Box(-1, 1, (2,)) if continuous else spaces.Discrete(2)
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent):
        return self.obs_space

    def action_space(self, agent):
        return self.act_space

    def _obs(self):
        return {a: self.rng.uniform(-1, 1, 3).astype(np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t, self.agents = 0, ["a", "b"]
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        live = list(self.agents)
        reward = {a: 1.0 for a in live}
        term = {a: a == "b" and self.t == 2 for a in live}
        trunc = {a: self.t == 4 for a in live}
        self.agents = [a for a in live if not term[a] and not trunc[a]]
        return self._obs(), reward, term, trunc, {a: {} for a in live}

    def close(self):
        pass


@pytest.mark.parametrize("name,mixer", [("qmix", "QMixer"), ("vdn", "VDNMixer"), ("qplex", "QPLEXMixer")])
def test_mixers_leave_dead_agents_out_of_the_mix(name, mixer, tmp_path, monkeypatch):
    """Every Q_i the mixers see is 0 where the agent is not alive (agent b from step 3 on), in
    the online mix of Q_i(s_t) and the target mix of Q_i(s_{t+1}), and only there (QPLEX: its
    greedy value and its action one-hot too)."""
    module = importlib.import_module(f"algos.{name}")
    seen = []
    original = getattr(module, mixer).forward

    def spy(self, q, state, *rest):
        seen.append((q.detach().clone(), *(r.detach().clone() for r in rest)))  # (T, B, N), ...
        return original(self, q, state, *rest)

    monkeypatch.setattr(getattr(module, mixer), "forward", spy)
    monkeypatch.setattr(module, "make_env", lambda name, num_envs, seed, *a, **k:
                        envs.PettingZooVecEnv(LeavingAgent, num_envs, seed))
    args = make_args(module.Args, env="simple_spread", run_dir=str(tmp_path), num_envs=2, batch_size=2,
                     updates_per_iteration=1, hidden_dim=16, eval_every=0, eval_episodes=1, eval_num_envs=1,
                     checkpoint_every=0, total_timesteps=16, cuda=False,
                     agent_groups=("b=a",))  # one team, one mixer (agents named a and b are two groups by default)
    module.main(args)
    online, target = seen[0][0], seen[1][0]  # the first update's two mixer calls
    assert online.shape == target.shape == (4, 2, 2)
    assert online[2:, :, 1].eq(0).all() and online[:2].ne(0).all() and online[:, :, 0].ne(0).all()
    # target row t values s_{t+1}: b is gone from s_2 on (row 1); the last row is the episode's end
    assert target[1:, :, 1].eq(0).all() and target[0].ne(0).all() and target[:3, :, 0].ne(0).all()
    if name == "qplex":  # (q, actions one-hot, greedy values) per call
        for (_, onehot, greedy), gone in ((seen[0], slice(2, None)), (seen[1], slice(1, None))):
            assert onehot[gone, :, 1].eq(0).all() and greedy[gone, :, 1].eq(0).all()
            assert onehot[:, :, 0].sum(-1).eq(1).all()


def test_iql_leaves_dead_agents_out_of_the_loss(tmp_path, monkeypatch):
    """IQL's TD loss averages over live agents' real steps only: agent b's steps after its death
    (steps 2 and 3 of 4) have weight 0, everyone else's weight 1."""
    from algos import iql

    masks = []
    original = iql.masked_mean

    def spy(x, mask):
        masks.append(mask.detach().clone())
        return original(x, mask)

    monkeypatch.setattr(iql, "masked_mean", spy)
    monkeypatch.setattr(iql, "make_env", lambda name, num_envs, seed, *a, **k:
                        envs.PettingZooVecEnv(LeavingAgent, num_envs, seed))
    args = make_args(iql.Args, env="simple_spread", run_dir=str(tmp_path), num_envs=2, batch_size=2,
                     updates_per_iteration=1, hidden_dim=16, eval_every=0, eval_episodes=1, eval_num_envs=1,
                     checkpoint_every=0, total_timesteps=8, cuda=False)
    iql.main(args)
    loss_mask = masks[0]  # the first update's loss
    assert loss_mask.shape == (4, 2, 2)
    assert loss_mask[2:, :, 1].eq(0).all() and loss_mask[:2].eq(1).all() and loss_mask[:, :, 0].eq(1).all()


@pytest.mark.parametrize("mixer", ["qmix", "nonmonotonic", "vdn"])
def test_facmac_leaves_dead_agents_out_of_the_mix(tmp_path, monkeypatch, mixer):
    """FACMAC's mixer (each kind) sees Q_i = 0 where agent b is gone (online: steps 2 and 3; target:
    s_2 on), and its team episode goes on past b's death: only the clock ends it (no termination,
    so every target bootstraps)."""
    from algos import facmac

    mixer_class = {"qmix": facmac.QMixer, "nonmonotonic": facmac.NonMonotonicMixer, "vdn": facmac.VDNMixer}[mixer]
    seen, targets = [], []
    original, original_targets = mixer_class.forward, facmac.td_lambda_targets

    def spy(self, q, state):
        seen.append(q.detach().clone())  # (B, N), rows t * B_seq + j
        return original(self, q, state)

    def spy_targets(rewards, next_q, terminated, ended, gamma, lam):
        targets.append((terminated.clone(), ended.clone()))
        return original_targets(rewards, next_q, terminated, ended, gamma, lam)

    monkeypatch.setattr(mixer_class, "forward", spy)
    monkeypatch.setattr(facmac, "td_lambda_targets", spy_targets)
    monkeypatch.setattr(facmac, "make_env", lambda name, num_envs, seed, *a, **k:
                        envs.PettingZooVecEnv(LeavingAgent, num_envs, seed))
    args = make_args(facmac.Args, env="simple_spread", run_dir=str(tmp_path), num_envs=2, num_steps=4,
                     batch_size=2, updates_per_iteration=1, learning_starts=0, hidden_sizes=(16,), eval_every=0,
                     eval_episodes=1, eval_num_envs=1, checkpoint_every=0, total_timesteps=8, cuda=False, mixer=mixer,
                     agent_groups=("b=a",))  # one team: "a" and "b" have no _<index> suffix, so each is its own group
    facmac.main(args)
    target, online = seen[0].view(4, -1, 2), seen[1].view(4, -1, 2)  # (T, B_seq, N): targets come first
    assert online[2:, :, 1].eq(0).all() and online[:2].ne(0).all() and online[:, :, 0].ne(0).all()
    assert target[1:, :, 1].eq(0).all() and target[0].ne(0).all() and target[:, :, 0].ne(0).all()
    terminated, ended = targets[0]  # (T, B_seq)
    assert terminated.eq(0).all() and ended[:3].eq(0).all() and ended[3].eq(1).all()
