"""Every mistake in an env name or env argument raises one EnvError, before any env is built, that
says what was wrong and what is accepted (the closest accepted spelling first). A family's cases
skip, saying what to install, only where its package is absent."""
import importlib.util

import pytest

import envs
from envs import EnvError, EnvPackageMissing, make_env


NEEDS = {
    "lbf": ("lbforaging",), "rware": ("rware",), "vmas": ("vmas",), "mamujoco": ("gymnasium_robotics", "mujoco"),
    "sisl": ("Box2D", "pymunk"), "butterfly": ("pymunk",), "magent2": ("magent2",),
}


def missing(name: str) -> tuple:
    """The packages env `name` needs that are not installed."""
    return tuple(m for m in NEEDS.get(name.partition(":")[0], ()) if importlib.util.find_spec(m) is None)


def case(name, *rest):
    """One parametrised case, skipped where the family's package is absent."""
    return pytest.param(name, *rest, marks=pytest.mark.skipif(bool(missing(name)), reason=f"needs {missing(name)}"))


BAD_NAMES = [
    case("simple_spred", {}, "did you mean 'simple_spread'?"),
    case("simple_spread_v2", {}, "did you mean 'simple_spread'?"),
    case("mpe2:simple_sprad", {}, "did you mean 'mpe2:simple_spread'?"),
    case("torch:simple_sprad", {}, "did you mean 'torch:simple_spread'?"),
    case("torch:simple_world_comm", {}, "has no torch port yet"),
    case("pursuit", {}, "did you mean 'sisl:pursuit'?"),
    case("lbff:Foraging-8x8-2p-3f-v3", {}, "did you mean 'lbf:Foraging-8x8-2p-3f-v3'?"),
    case("lbf:Foraging-8x8-2p-3f-v9", {}, "did you mean 'lbf:Foraging-8x8-2p-3f-v3'"),
    case("lbf:CartPole-v1", {}, "is not a lbforaging env"),
    case("rware:rware-tiny-2ag-v9", {}, "did you mean 'rware:rware-tiny-2ag-v2'"),
    case("sisl:pursui", {}, "did you mean 'sisl:pursuit'?"),
    case("butterfly:pistonbal", {}, "did you mean 'butterfly:pistonball'?"),
    case("vmas:balanc", {}, "did you mean 'vmas:balance'?"),
    case("mamujoco:Cheetah-2x3", {}, "did you mean 'mamujoco:HalfCheetah-2x3'?"),
    case("mamujoco:Hopper-2x3", {}, "accepted: 3x1"),
    case("mamujoco:ManySegmentAnt-2xfoo", {}, "has no agent_conf '2xfoo'"),
]

BAD_ARGUMENTS = [
    case("simple_spread", {"n": 5}, "did you mean 'N'?"),
    case("simple_spread", {"N": 0}, "N must be at least 1, got 0"),
    case("simple_spread", {"N": -2}, "N must be at least 1, got -2"),
    case("simple_spread", {"N": "abc"}, "N must be an integer (default 3), got 'abc'"),
    case("simple_spread", {"N": 2.5}, "N must be an integer"),
    case("simple_spread", {"max_cycles": 0}, "max_cycles must be at least 1"),
    case("simple_spread", {"max_cycles": -5}, "max_cycles must be at least 1"),
    case("simple_spread", {"max_cycles": 2.5}, "max_cycles must be an integer"),
    case("simple_spread", {"continuous_actions": "maybe"}, "continuous_actions must be true or false"),
    case("simple_spread", {"local_ratio": 2}, "local_ratio must be in [0, 1], got 2"),
    case("simple_spread", {"local_ratio": "half"}, "local_ratio must be a number"),
    case("simple_tag", {"num_good": 0}, "num_good must be at least 1"),
    case("simple_tag", {"num_obstacles": -1}, "num_obstacles must be at least 0"),
    case("simple_world_comm", {"num_food": 0}, "num_food must be at least 1"),
    case("simple_adversary", {"N": 0}, "N must be at least 1"),
    case("collect_treasure", {"num_collectors": 0}, "num_collectors must be at least 1"),
    case("torch:simple_spread", {"N": 0}, "N must be at least 1"),
    case("torch:simple_spread", {"nn": 3}, "did you mean 'N'?"),
    case("torch:simple_tag", {"num_adversaries": 0}, "num_adversaries must be at least 1"),
    case("torch:simple_tag", {"continuous_actions": 1}, "continuous_actions must be true or false"),
    case("torch:simple_tag", {"curriculum": True}, "not ported"),
    case("matrix_game", {"game": "coordnation"}, "did you mean 'coordination'?"),
    case("matrix_game", {"gmae": "climbing"}, "did you mean 'game'?"),
    case("lbf:Foraging-8x8-2p-3f-v3", {"players": 0}, "players must be at least 1"),
    case("lbf:Foraging-8x8-2p-3f-v3", {"max_episode_steps": 0}, "max_episode_steps must be at least 1"),
    case("lbf:Foraging-8x8-2p-3f-v3", {"force_coop": "yes"}, "force_coop must be true or false"),
    case("rware:rware-tiny-2ag-v2", {"n_agents": 2.5}, "n_agents must be an integer"),
    case("vmas:balance", {"n_agents": 0}, "n_agents must be at least 1"),
    case("vmas:balance", {"n_agent": 3}, "did you mean 'n_agents'?"),
    case("vmas:balance", {"max_steps": 0}, "max_steps must be at least 1"),
    case("vmas:balance", {"continuous_actions": "maybe"}, "continuous_actions must be true or false"),
    case("mamujoco:Hopper-3x1", {"max_episode_steps": 2.5}, "max_episode_steps must be an integer"),
    case("mamujoco:Hopper-3x1", {"frame_skp": 2}, "did you mean 'frame_skip'?"),
    case("sisl:pursuit", {"n_pursuers": 0}, "n_pursuers must be at least 1"),
    case("sisl:pursuit", {"max_cycles": 0}, "max_cycles must be at least 1"),
    case("sisl:multiwalker", {"shared_reward": "no"}, "shared_reward must be true or false"),
    case("butterfly:pistonball", {"n_pistons": 1}, "n_pistons must be at least 2"),
    case("butterfly:pistonball", {"image_stride": 0}, "image_stride must be at least 1"),
    case("magent2:battle", {"map_size": 11}, "map_size must be at least 12"),
    case("magent2:battlefield", {"map_size": 45}, "map_size must be at least 46"),
]


@pytest.fixture
def nothing_built(monkeypatch):
    """Every adapter fails the test if it is constructed: the mistake must be found before."""
    def built(*args, **kwargs):
        raise AssertionError("an env was built before the mistake was reported")

    for module, cls in [(envs, "PettingZooVecEnv"), (envs.pz_families, "PettingZooVecEnv"),
                        (envs.mamujoco, "PettingZooVecEnv"), (envs.gym_multiagent, "PettingZooVecEnv"),
                        (envs.gym_multiagent, "LBFVecEnv"), (envs.vmas_vec, "VMASVecEnv")]:
        monkeypatch.setattr(module, cls, built)


@pytest.mark.parametrize("name, kwargs, hint", BAD_NAMES + BAD_ARGUMENTS)
def test_mistakes_raise_one_clear_env_error(name, kwargs, hint, nothing_built):
    with pytest.raises(EnvError) as err:
        make_env(name, 2, env_kwargs=kwargs)
    assert hint in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["simple_spred", "torch:simple_sprad", "mpe2:simple_sprad", "simple_tga",
                                  case("sisl:pursui"), case("lbf:Foraging-8x8-2p-3f-v9")])
def test_name_typos_get_short_messages(name):
    with pytest.raises(EnvError) as err:
        make_env(name, 2)
    assert "did you mean" in str(err.value) and len(str(err.value)) < 400, str(err.value)


def test_unknown_name_without_a_close_match_says_where_to_look():
    with pytest.raises(EnvError) as err:
        make_env("nosuch", 2)
    msg = str(err.value)
    assert "did you mean" not in msg and "simple_spread" in msg and "lbf:" in msg and "envs.known_envs()" in msg
    assert len(msg) < 600


def test_bad_key_value_pair():
    with pytest.raises(EnvError, match="KEY=VALUE"):
        envs.parse_env_kwargs(["N5"])
    with pytest.raises(EnvError, match="KEY=VALUE"):
        envs.parse_env_kwargs(["=5"])


def test_env_error_is_a_value_error_and_missing_packages_are_import_errors(monkeypatch):
    assert issubclass(EnvError, ValueError) and issubclass(EnvPackageMissing, ImportError)

    def absent(name, *args):
        raise ImportError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(envs.pz_families.importlib, "import_module", absent)
    with pytest.raises(EnvPackageMissing, match="pip install magent2"):
        make_env("magent2:battle", 2)


@pytest.mark.parametrize("name, kwargs", [
    ("simple_spread", {"N": 2, "local_ratio": 1, "max_cycles": 5, "continuous_actions": True}),
    ("simple_spread", {"num_agent_neighbors": None}),
    ("torch:simple_tag", {"num_good": 2, "curriculum": False}),
    ("matrix_game", {"game": "penalty"}),
    case("lbf:Foraging-8x8-2p-3f-v3", {"max_episode_steps": 5, "penalty": 0}),
    case("rware:rware-tiny-2ag-v2", {"max_steps": None}),
    case("vmas:balance", {"n_agents": 2, "package_mass": 2.5, "max_steps": None}),
    case("mamujoco:Hopper-3x1", {"max_episode_steps": 5, "forward_reward_weight": 2}),
])
def test_good_arguments_still_build(name, kwargs):
    env = make_env(name, 2, seed=0, env_kwargs=kwargs)
    obs, _, _ = env.reset()
    assert obs.shape[:2] == (2, env.n_agents)


@pytest.mark.parametrize("name, continuous, expected", [
    ("simple_spread", True, "pass --env-kwargs continuous_actions=true"),
    ("torch:simple_spread", False, "pass --env-kwargs continuous_actions=false"),
    ("matrix_game", True, "matrix_game has discrete actions only; envs with continuous ones: mamujoco:"),
    case("lbf:Foraging-8x8-2p-3f-v3", True, "lbf:Foraging-8x8-2p-3f-v3 has discrete actions only"),
    case("vmas:balance", True, "pass --env-kwargs continuous_actions=true"),
    case("butterfly:pistonball", False, "pass --env-kwargs continuous=false"),
    case("mamujoco:Hopper-3x1", False, "has continuous actions only; envs with discrete ones: lbf:"),
])
def test_action_hints_are_true_for_the_env(name, continuous, expected):
    hint = envs.continuous_hint(name) if continuous else envs.discrete_hint(name)
    assert expected in hint
    if "continuous_actions" not in envs.env_arguments(name):  # never advise an argument the env does not take
        assert "pass --env-kwargs continuous_actions" not in hint
