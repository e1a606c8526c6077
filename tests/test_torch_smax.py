"""The torch port of SMAX (envs/torch_smax.py): step for step against JaxMARL's SMAX, and the unit rules by hand.

The step-for-step test drives `torch:smax_<map>` and JaxMARL's `HeuristicEnemySMAX` from the same
start with the same actions for every ally, hands the port the random numbers JaxMARL draws
(start positions and unit types, weapon-cooldown jitter, the enemy's choices), and checks
observations, states, rewards, ends and action masks. It runs where `jaxmarl` is installed
(`pip install -e ".[jaxmarl]"`, which CI does) and skips elsewhere; the rule tests need only torch.
"""
import numpy as np
import pytest
import torch

from envs import EnvError, make_env
from envs.torch_smax import MAPS, N_MOVES, OWN_FEATURES, TorchSMAX

ATOL = 1e-5


# ----------------------------------------------------------------------------- step for step against JaxMARL
def _jax_twin(map_name: str):
    """JaxMARL's SMAX on `map_name` and jitted, vmapped functions for E copies: reset draws
    (pre-push positions, types), step draws (what the port's `step_draws` holds), the step without
    its auto-reset, the reset, and the action masks."""
    jaxmarl = pytest.importorskip("jaxmarl", reason='jaxmarl is not installed: pip install -e ".[jaxmarl]"')
    import jax
    import jax.numpy as jnp
    from jaxmarl.environments.smax import map_name_to_scenario

    env = jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(map_name))
    smax = env._env
    A, K = smax.num_allies, smax.num_enemies

    def reset_draws(key_reset):
        # HeuristicEnemySMAX.reset splits once, then SMAX.reset: team noises, SMACv2 positions, SMACv2 types
        _, reset_key = jax.random.split(key_reset)
        key, team_0_key, team_1_key = jax.random.split(reset_key, num=3)
        pos = jnp.concatenate([
            jnp.array([smax.map_width / 4, smax.map_height / 2]) + jax.random.uniform(
                team_0_key, (A, 2), minval=-2, maxval=2),
            jnp.array([smax.map_width / 4 * 3, smax.map_height / 2]) + jax.random.uniform(
                team_1_key, (K, 2), minval=-2, maxval=2)])
        key, pos_key = jax.random.split(key)
        pos = jax.lax.select(smax.smacv2_position_generation, smax.position_generator.generate(pos_key), pos)
        key, type_key = jax.random.split(key)
        types = jax.lax.select(smax.smacv2_unit_type_generation, smax.unit_type_generator.generate(type_key),
                               smax.scenario)
        return pos, types

    def step_draws(key):
        # MultiAgentEnv.step: (key, key_reset); EnemySMAX.step_env: (key, action_key); one key per enemy,
        # each split into (walk key, shoot key); then the world ticks split (carry, tick key) -> one key per unit
        key, key_reset = jax.random.split(key)
        step_key = key
        key, action_key = jax.random.split(key)
        walk_keys, shoot_keys = jax.vmap(jax.random.split, out_axes=1)(jax.random.split(action_key, K))
        walk_to = jax.vmap(jax.random.uniform)(walk_keys)
        shoot_at = jax.vmap(jax.random.uniform)(shoot_keys)

        def tick(step_key, _):
            step_key, tick_key = jax.random.split(step_key)
            return step_key, jax.vmap(jax.random.uniform)(jax.random.split(tick_key, A + K))

        _, cooldown = jax.lax.scan(tick, key, None, length=smax.world_steps_per_env_step)
        return step_key, key_reset, {"cooldown": cooldown, "walk_to": walk_to, "shoot_at": shoot_at}

    def step(key, state, actions):
        key, key_reset, draws = step_draws(key)  # key: what MultiAgentEnv.step hands step_env
        obs, state, reward, dones, _ = env.step_env(key, state, {a: actions[i] for i, a in enumerate(env.agents)})
        return obs, state, reward, dones, key_reset, draws

    def masks(state):
        avail = env.get_avail_actions(state)
        return jnp.stack([avail[a] for a in env.agents])

    def merge(done, new, old):  # the reset copies' new state where done, the old elsewhere
        return jax.tree.map(lambda x, y: jax.vmap(jax.lax.select)(done, x, y), new, old)

    return env, jax, {"reset_draws": jax.jit(jax.vmap(reset_draws)), "step": jax.jit(jax.vmap(step)),
                      "reset": jax.jit(jax.vmap(env.reset)), "masks": jax.jit(jax.vmap(masks)),
                      "split": jax.jit(jax.vmap(jax.random.split)), "merge": jax.jit(merge)}


def _take_state(port: TorchSMAX, state) -> None:
    """Put JaxMARL's battles (a vmapped HeuristicEnemySMAX state) into the port."""
    battle, enemy, ours_now = state.state, state.enemy_policy_state, {}
    for ours, theirs in (("pos", battle.unit_positions), ("health", battle.unit_health),
                         ("alive", battle.unit_alive), ("types", battle.unit_types),
                         ("cooldown", battle.unit_weapon_cooldowns), ("last_move", battle.prev_movement_actions),
                         ("last_attack", battle.prev_attack_actions), ("steps", battle.step),
                         ("enemy_target", enemy.default_target), ("enemy_last_shot", enemy.last_attacked_enemy)):
        current = getattr(port, ours)
        ours_now[ours] = torch.tensor(np.asarray(theirs)).to(current.dtype).reshape(current.shape)
    port.load_state_dict(ours_now)


def _agents(env, obs):
    return np.stack([np.asarray(obs[a]) for a in env.agents], 1)


def _check(what: str, ours: torch.Tensor, theirs, rows=None):
    ours, theirs = ours.detach().cpu().numpy(), np.asarray(theirs)
    if rows is not None:
        ours, theirs = ours[rows], theirs[rows]
    np.testing.assert_allclose(ours, theirs.astype(ours.dtype), atol=ATOL, rtol=0, err_msg=what)


@pytest.mark.parametrize("map_name", list(MAPS))
def test_step_for_step_against_jaxmarl(map_name):
    """Every step starts from JaxMARL's state (copied into the port), so each transition is checked
    alone: on maps with many touching units, one-ulp differences (overlaps summed in another order)
    grow through the collisions if the two run freely."""
    _compare(map_name, resync=True)


def test_3m_runs_free_from_the_same_start():
    """On 3m the port and JaxMARL stay together for 150 steps from the same start, with no resync."""
    _compare("3m", resync=False)


def _compare(map_name: str, resync: bool):
    E = 8 if len(MAPS[map_name].allies) < 20 else 2
    env, jax, f = _jax_twin(map_name)
    rng = np.random.default_rng(0)
    port = TorchSMAX(map_name, E, seed=0)
    # the state holds positions in map units (0 to 32): they are compared as fractions of the map, as the
    # observations hold them, so that the tolerance means the same for every feature
    scale = torch.ones(port.n_units, OWN_FEATURES)
    scale[:, 1:3] = port.map_size
    scale_t = torch.cat([scale.reshape(-1), torch.ones(2 * port.n_units)])
    scale = scale_t.numpy()

    def start(idx, key_reset, check_obs=True):
        obs, state = f["reset"](key_reset)
        pos, types = f["reset_draws"](key_reset)
        port.reset_copies(torch.as_tensor(idx), torch.as_tensor(np.asarray(pos)[idx]),
                          torch.as_tensor(np.asarray(types)[idx].astype(np.int64)))
        ours_obs, ours_state, ours_mask = port.observe()
        _check("obs after reset", ours_obs, _agents(env, obs), idx)
        _check("state after reset", ours_state / scale_t, np.asarray(obs["world_state"]) / scale, idx)
        _check("action mask after reset", ours_mask, f["masks"](state), idx)
        return state

    keys = np.asarray(jax.random.split(jax.random.PRNGKey(0), E))
    state = start(np.arange(E), keys)
    episodes = 0
    for t in range(150):
        mask = np.asarray(f["masks"](state)).astype(bool)
        # random legal actions, attacks made likelier so that battles end well within the time limit
        weights = mask * np.where(np.arange(mask.shape[-1]) >= N_MOVES, 4.0, 1.0)
        actions = np.array([[rng.choice(len(w), p=w / w.sum()) for w in copy] for copy in weights])
        keys, next_keys = np.moveaxis(np.asarray(f["split"](keys)), 1, 0)
        if resync:
            _take_state(port, state)
        obs, new_state, reward, dones, key_reset, draws = f["step"](keys, state, actions)
        result = port.step(torch.as_tensor(actions), {k: torch.tensor(np.asarray(v)) for k, v in draws.items()})
        at = f"{map_name}, step {t}"
        _check(f"obs, {at}", result.final_obs, _agents(env, obs))
        _check(f"state, {at}", result.final_state / scale_t, np.asarray(obs["world_state"]) / scale)
        _check(f"reward, {at}", result.reward, np.stack([np.asarray(reward[a]) for a in env.agents], 1))
        _check(f"done, {at}", result.done, dones["__all__"])
        going_on = ~np.asarray(dones["__all__"])  # the port has started new battles in the others already
        _check(f"alive, {at}", port.alive[:, :len(env.agents)],
               ~np.stack([np.asarray(dones[a]) for a in env.agents], 1), going_on)
        _check(f"mask, {at}", result.final_action_mask, f["masks"](new_state))
        enemies_dead = ~np.asarray(new_state.state.unit_alive)[:, len(env.agents):].any(1)
        allies_alive = np.asarray(new_state.state.unit_alive)[:, :len(env.agents)].any(1)
        _check(f"won, {at}", result.episode_won, np.asarray(dones["__all__"]) & enemies_dead & allies_alive)
        wiped_out = (enemies_dead | ~allies_alive)[:, None]
        ended = np.asarray(dones["__all__"])[:, None].repeat(len(env.agents), 1)  # every unit ends with the battle
        _check(f"terminated, {at}", result.terminated, ended & wiped_out)
        _check(f"truncated, {at}", result.truncated, ended & ~wiped_out)
        state = new_state
        done = np.flatnonzero(np.asarray(dones["__all__"]))
        if done.size:
            episodes += done.size
            state = f["merge"](dones["__all__"], start(done, key_reset), state)
        keys = next_keys
        if episodes >= 2 * E and t >= 50:  # enough battles seen whole: ends, resets and starts of each kind
            break
    assert episodes >= E, f"only {episodes} battles ended in 150 steps of {E} copies"


def test_move_vectors_are_jaxmarls():
    env, jax, _ = _jax_twin("3m")
    import jax.numpy as jnp

    move, _ = env._env._decode_discrete_actions(jnp.arange(N_MOVES))
    _check("movement vectors", TorchSMAX("3m", 1).move_vectors, move)


# ----------------------------------------------------------------------------- unit rules by hand
def _duel(distance: float, ally="3m") -> TorchSMAX:
    """One copy of `ally` with ally 0 facing enemy 0 at `distance` in the middle of the map, every
    other unit far away in a corner (alive, out of sight)."""
    env = TorchSMAX(ally, 1, seed=0)
    pos = torch.full((1, env.n_units, 2), 2.0)
    pos[0, :, 1] = torch.linspace(2.0, 6.0, env.n_units)  # spread out so nothing overlaps
    pos[0, 0] = torch.tensor([16.0 - distance / 2, 16.0])
    pos[0, env.n_allies] = torch.tensor([16.0 + distance / 2, 16.0])
    env.reset_copies(torch.tensor([0]), pos)
    env.observe()
    return env


def _no_jitter(env):
    draws = env.step_draws()
    draws["cooldown"].fill_(1 / 3)  # a jitter of 0: dt * (3 * u - 1)
    return draws


def test_attack_in_range_lowers_health_by_the_damage_and_cooldown_blocks_the_next():
    env = _duel(4.0)  # marine range 5
    env.enemy_shoots = False
    stop = torch.full((1, env.n_allies), N_MOVES - 1)
    attack = stop.clone()
    attack[0, 0] = N_MOVES + 0  # ally 0 attacks enemy 0
    assert env.action_mask()[0, 0, N_MOVES].item()
    env.step(attack, _no_jitter(env))
    # 8 ticks of 1/16 s = 0.5 s < the marine's 0.61 s cooldown: exactly one shot of 9 in the first step
    assert env.health[0, env.n_allies].item() == pytest.approx(45.0 - 9.0)
    assert env.cooldown[0, 0].item() == pytest.approx(0.61 - 7 / 16)
    env.step(attack, _no_jitter(env))  # ready again after 0.61 s: the second shot lands in the second step
    assert env.health[0, env.n_allies].item() == pytest.approx(45.0 - 18.0)


def test_out_of_range_attack_is_not_legal_and_does_nothing():
    assert not _duel(5.5).action_mask()[0, 0, N_MOVES].item()  # beyond the marine's range of 5
    env = _duel(12.0)  # far enough that the enemy walking closer stays out of range for the whole step
    env.enemy_shoots = False
    attack = torch.full((1, env.n_allies), N_MOVES - 1)
    attack[0, 0] = N_MOVES
    env.step(attack, _no_jitter(env))
    assert env.health[0, env.n_allies].item() == 45.0


def test_a_dead_unit_is_masked_and_not_alive():
    env = _duel(4.0)
    env.health[0, 0] = 1.0  # one hit from the enemy marine kills ally 0
    stop = torch.full((1, env.n_allies), N_MOVES - 1)
    first = env.step(stop, _no_jitter(env))
    assert first.alive[0, 0].item(), "alive says who acted in the step: ally 0 was alive when it began"
    assert not first.done.item() and not first.terminated.any(), "a unit's death ends neither the battle nor its episode"
    assert first.reward[0, 0].item() == first.reward[0, 1].item(), "the reward is the team's"
    assert first.acting[0].tolist() == [False] + [True] * (env.n_allies - 1), "acting: who acts in the next step"
    second = env.step(stop, _no_jitter(env))
    assert not second.alive[0, 0].item()
    mask = second.action_mask[0, 0]
    assert mask.tolist() == [False] * (N_MOVES - 1) + [True] + [False] * env.n_enemies, "a dead unit may only stop"
    assert second.obs[0, 0].abs().sum().item() == 0.0, "a dead unit sees nothing"


def test_win_loss_and_time_limit():
    env = _duel(4.0)
    env.health[0, env.n_allies:] = 0.0  # every enemy dead but one about to be
    env.health[0, env.n_allies] = 1.0
    env.alive = env.health > 0
    attack = torch.full((1, env.n_allies), N_MOVES - 1)
    attack[0, 0] = N_MOVES
    env.enemy_shoots = False
    won = env.step(attack, _no_jitter(env))
    assert won.done.item() and won.terminated.all() and not won.truncated.any()
    assert won.episode_won.item()
    assert won.reward[0, 0].item() == pytest.approx(1 / 45 / 3 + 1.0)  # the last 1 health of 45, over 3 enemies, + win
    assert env.take_episode_wins() == (1, 1) and env.take_episode_wins() == (0, 0)

    lost = _duel(4.0)
    lost.health[0, :lost.n_allies] = 0.0
    lost.health[0, 0] = 1.0
    lost.alive = lost.health > 0
    step = lost.step(torch.full((1, lost.n_allies), N_MOVES - 1), _no_jitter(lost))
    assert step.done.item() and step.terminated.all() and not step.episode_won.item()
    assert step.reward[0, 0].item() == 0.0

    timed = TorchSMAX("3m", 2, seed=0, max_steps=3, enemy_shoots=False)
    stop = torch.full((2, 3), N_MOVES - 1)
    ends = [timed.step(stop) for _ in range(4)]
    assert [bool(s.done.all()) for s in ends] == [False, False, False, True], "ends after max_steps + 1 steps"
    assert ends[-1].truncated.all() and not ends[-1].terminated.any() and not ends[-1].episode_won.any()


def test_auto_reset_keeps_copies_independent():
    env = TorchSMAX("3m", 2, seed=0)
    env.health[1, env.n_allies:] = 0.0  # copy 1's enemies are all dead: it ends at its next step
    env.alive = env.health > 0
    env.observe()
    before = env.pos[0].clone()
    step = env.step(torch.full((2, 3), N_MOVES - 1))
    assert step.done.tolist() == [False, True]
    assert env.steps.tolist() == [1, 0], "only the finished copy starts over"
    assert (env.health[1] == 45.0).all() and not torch.equal(env.pos[0], before)
    assert not torch.equal(step.final_obs[1], step.obs[1]), "final_obs is the end of the battle, obs the new one"


def test_same_seed_same_battles_and_exact_resume():
    g = torch.Generator().manual_seed(0)

    def legal(env):  # random legal actions from a generator of the test's own
        mask = env.action_mask().float().reshape(-1, env.n_actions)
        return torch.multinomial(mask, 1, generator=g).reshape(env.num_envs, env.n_agents)

    a, b = TorchSMAX("2s3z", 4, seed=3), TorchSMAX("2s3z", 4, seed=3)
    for _ in range(30):
        actions = legal(a)
        assert torch.equal(a.step(actions).obs, b.step(actions).obs)
    c = TorchSMAX("2s3z", 4, seed=99)
    c.load_state_dict(a.state_dict())
    for _ in range(30):
        actions = legal(a)
        ours, theirs = a.step(actions), c.step(actions)
        assert torch.equal(ours.obs, theirs.obs) and torch.equal(ours.reward, theirs.reward)


def test_bad_input_fails_clearly():
    with pytest.raises(EnvError, match="unknown SMAX map '3mm'.*smax_3m"):
        make_env("torch:smax_3mm", 2)
    with pytest.raises(EnvError, match="at least one unit"):
        make_env("torch:smax_smacv2_0_units", 2)
    with pytest.raises(EnvError, match="map_width must be at least 1"):
        make_env("torch:smax_3m", 2, env_kwargs={"map_width": -4})
    with pytest.raises(EnvError, match="attack_mode must be one of closest, random"):
        make_env("torch:smax_3m", 2, env_kwargs={"attack_mode": "nearest"})
    with pytest.raises(EnvError, match="does not take argument"):
        make_env("torch:smax_3m", 2, env_kwargs={"num_allies": 4})
    assert make_env("torch:smax_smacv2_7_units", 2).n_agents == 7
