"""The README's table of env families x algorithm families, kept true by running the algorithms.

Every cell says, for every algorithm of its column, on which of the family's envs it runs:
"works" (all of them), "works with discrete actions only" (the discrete ones; the others are
refused), "does not apply: <reason>" (none), then exceptions of single algorithms
("coma: discrete actions only (...)", "matd3, masac: does not apply: ..."). For each cell and
each algorithm of its column, on each small env of the family (the reduced sizes of
tests/test_env_families*.py):

- "does not apply" there: the algorithm must stop with a ConfigError before training, with no
  run folder written. These checks run the family's own env (they stop at once).
- "works" there: a tiny run (2 copies, a few env steps, 16-unit nets) must finish with finite
  losses. Running all 22 files on all 16 envs would take minutes, so each algorithm runs once on
  one *carrier* env per property (the adapter with flat discrete or continuous actions, image
  observations, heterogeneous observation sizes, the env's own action masks, agents that die),
  and a family's env is covered by the carriers of the properties it has: the test asserts that
  the env really has them (image obs: a (H, W, C) obs_shape; ...) and that each of them has a
  carrier for its action type.

A family's checks skip, naming the package, only when that package is not installed.
"""
import dataclasses
import importlib
import importlib.util
import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
import envs
import run
from common.cli import ConfigError, make_args
from tests.test_env_families_pz import LeavingAgent  # two agents, the second dies in step 2 of 4

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")

# ---------------------------------------------------------------------------- the family's small envs
# family -> its envs: (name, env_kwargs, action type). Families with both action types list one env of each.
D, C = "discrete", "continuous"
INSTANCES = {
    "mpe2": [("simple_spread", ("max_cycles=4", "continuous_actions=false"), D),
             ("simple_spread", ("max_cycles=4", "continuous_actions=true"), C)],
    "torch:": [("torch:simple_spread", ("max_cycles=4", "continuous_actions=false"), D),
               ("torch:simple_spread", ("max_cycles=4", "continuous_actions=true"), C)],
    "matrix_game": [("matrix_game", (), D)],
    "lbf:": [("lbf:Foraging-8x8-2p-3f-v3", ("max_episode_steps=4",), D)],
    "rware:": [("rware:rware-tiny-2ag-v2", ("max_steps=4",), D)],
    "mamujoco:": [("mamujoco:Hopper-3x1", ("max_episode_steps=4",), C)],
    "vmas:": [("vmas:balance", ("max_steps=4",), C), ("vmas:balance", ("max_steps=4", "continuous_actions=false"), D)],
    "sisl:": [("sisl:pursuit", ("max_cycles=4", "n_pursuers=3", "n_evaders=4", "x_size=8", "y_size=8"), D),
              ("sisl:multiwalker", ("max_cycles=4",), C)],
    "butterfly:": [("butterfly:pistonball", ("n_pistons=3", "max_cycles=4", "image_stride=8"), C),
                   ("butterfly:cooperative_pong", ("max_cycles=4", "image_stride=8"), D),
                   ("butterfly:knights_archers_zombies", ("max_cycles=4",), D)],
    "magent2:": [("magent2:battle", ("map_size=12", "max_cycles=4"), D)],
    "classic:": [("classic:tictactoe", (), D)],
    "torch:smax_": [("torch:smax_3m", ("max_steps=4", "map_width=8", "map_height=8"), D)],  # small: units die
    "jaxmarl:": [("jaxmarl:smax_3m", ("max_steps=4", "map_width=8", "map_height=8", "continuous_actions=false"), D),
                 ("jaxmarl:smax_3m", ("max_steps=4", "map_width=8", "map_height=8", "continuous_actions=true"), C),
                 ("jaxmarl:MPE_simple_spread_v3", ("max_steps=4", "continuous_actions=true"), C)],
}
PACKAGES = {"lbf:": ["lbforaging"], "rware:": ["rware"], "mamujoco:": ["gymnasium_robotics", "mujoco"],
            "vmas:": ["vmas"], "sisl:": ["Box2D", "pymunk"], "butterfly:": ["pymunk"], "magent2:": ["magent2"],
            "jaxmarl:": ["jaxmarl"]}
# Envs whose agents die mid-episode (padded with alive = 0): MAgent2's (tests/test_env_families_pz.py
# kills one), knights_archers_zombies' knights and archers (killable: checked in describe), and SMAX's units
# (on an 8 x 8 map some die within the first episode: checked in describe).
DIES = {"magent2:battle", "butterfly:knights_archers_zombies", "torch:smax_3m", "jaxmarl:smax_3m"}

# The carriers: one env per (adapter, action type, property), on which every algorithm runs once.
# "leaving" is a two-agent PettingZoo env whose second agent dies in step 2 of 4 (LeavingAgent below):
# a death in every episode, which a few random steps of MAgent2 would not give.
CARRIERS = {
    ("PettingZooVecEnv", D, None): INSTANCES["mpe2"][0],
    ("PettingZooVecEnv", C, None): INSTANCES["mpe2"][1],
    ("TorchMPE", D, None): INSTANCES["torch:"][0],
    ("TorchMPE", C, None): INSTANCES["torch:"][1],
    ("MatrixGame", D, None): INSTANCES["matrix_game"][0],
    ("VMASVecEnv", C, None): INSTANCES["vmas:"][0],
    ("VMASVecEnv", D, None): INSTANCES["vmas:"][1],
    ("PettingZooVecEnv", D, "env action masks"): INSTANCES["lbf:"][0],
    ("PettingZooVecEnv", C, "heterogeneous obs sizes"): INSTANCES["mamujoco:"][0],
    ("PettingZooVecEnv", D, "image obs"): INSTANCES["sisl:"][0],
    ("PettingZooVecEnv", C, "image obs"): INSTANCES["butterfly:"][0],
    ("PettingZooVecEnv", D, "agents die"): ("leaving", (), D),
    ("PettingZooVecEnv", C, "agents die"): ("leaving", (), C),
    ("AECVecEnv", D, None): INSTANCES["classic:"][0],
    ("AECVecEnv", D, "env action masks"): INSTANCES["classic:"][0],
    ("TorchSMAX", D, None): INSTANCES["torch:smax_"][0],  # one small battle carries all three: each file runs once
    ("TorchSMAX", D, "env action masks"): INSTANCES["torch:smax_"][0],
    ("TorchSMAX", D, "agents die"): INSTANCES["torch:smax_"][0],
    # the same for JaxMARL, whose envs compile once per env and number of copies (10-25 s each)
    ("JaxMARLVecEnv", D, None): INSTANCES["jaxmarl:"][0],
    ("JaxMARLVecEnv", C, None): INSTANCES["jaxmarl:"][2],
    ("JaxMARLVecEnv", D, "env action masks"): INSTANCES["jaxmarl:"][0],
    ("JaxMARLVecEnv", D, "agents die"): INSTANCES["jaxmarl:"][0],
    ("JaxMARLVecEnv", C, "agents die"): INSTANCES["jaxmarl:"][1],
}

# The adapter classes (envs/)
ADAPTERS = {"PettingZooVecEnv", "TorchMPE", "MatrixGame", "VMASVecEnv", "AECVecEnv", "TorchSMAX", "JaxMARLVecEnv"}
# The files that show the groups and loading columns on a family: one trains a group, the other loads it.
GROUP_ALGOS = {"classic:": ("ippo", "mappo")}  # turn-based: the files that learn from each agent's own moves

# Tiny settings, each given to the algorithms whose Args have the field.
TINY = dict(num_envs=2, num_steps=4, total_timesteps=8, eval_every=0, eval_episodes=1, eval_num_envs=1,
            checkpoint_every=0, cuda=False, torch_threads=1, hidden_sizes=(16,), hidden_dim=16,
            critic_hidden_sizes=(16,), mixer_embed_dim=8, hypernet_hidden=16, mixer_hidden=16, update_epochs=1,
            num_minibatches=1, critic_minibatches=1, chunk_len=4, batch_size=2, buffer_size=64, learning_starts=0,
            updates_per_iteration=1, policy_delay=1, bootstrap_cut=True)
# JaxMARL compiles an env's step for each number of copies (10-25 s each): its envs are evaluated (and
# described) on as many copies as they train on, so each compiles once.
JAX_COPIES = dict(eval_num_envs=TINY["num_envs"], eval_episodes=TINY["num_envs"])


def tiny_settings(module, name: str) -> dict:
    """TINY's settings that the algorithm's Args have, for a run on env `name`."""
    fields = {f.name for f in dataclasses.fields(module.Args)}
    settings = {**TINY, **JAX_COPIES} if name.startswith("jaxmarl:") else TINY
    return {k: v for k, v in settings.items() if k in fields}


def make_instance(name, env_kwargs, kind, num_envs=1, seed=0):
    if name == "leaving":
        return envs.PettingZooVecEnv(lambda: LeavingAgent(kind == C), num_envs, seed)
    return envs.make_env(name, num_envs, seed, envs.parse_env_kwargs(env_kwargs))


# ---------------------------------------------------------------------------- the README table
def read_table():
    """-> (columns: [[algo names]], rows: {family: [cell per column]}) of the table whose header
    starts with "env family" in README.md."""
    with open(README) as f:
        lines = [line.strip() for line in f]
    start = next(i for i, line in enumerate(lines) if line.startswith("| env family |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    columns = [re.findall(r"`([a-z0-9_]+)`", cell) for cell in header[1:]]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        family = re.match(r"`([^`]+)`", cells[0]).group(1)
        rows[family] = cells[1:]
    return columns, rows


VERDICT = re.compile(r"^(works)(?: with (discrete|continuous) actions only)?(?: \(.*\))?$|^does not apply: .+$")
EXCEPTION = re.compile(r"^([a-z0-9_]+(?:, [a-z0-9_]+)*): (?:(discrete|continuous) actions only(?: \(.*\))?"
                       r"|(does not apply): .+|(works)(?: \(.*\))?|(refuses image observations)(?: \(.*\))?)$")
BOTH = frozenset({D, C})


def parse_cell(cell: str, algos):
    """A cell -> {algo: the action types it runs with on the family}, e.g. {"coma": {"discrete"}, ...}."""
    verdict, *exceptions = cell.split("; ")
    m = VERDICT.match(verdict)
    assert m, f"cell {cell!r} must start with 'works', 'works with <discrete|continuous> actions only' " \
              f"or 'does not apply: <reason>'"
    default = (frozenset({m.group(2)}) if m.group(2) else BOTH) if m.group(1) else frozenset()
    kinds = {algo: default for algo in algos}
    for part in exceptions:
        e = EXCEPTION.match(part)
        assert e, f"exception {part!r} in cell {cell!r} must read '<algos>: <discrete|continuous> actions only " \
                  "(...)', '<algos>: does not apply: <reason>' or '<algos>: works (...)'"
        for algo in e.group(1).split(", "):
            assert algo in kinds, f"{algo} is named in cell {cell!r} but is not in its column"
            if not e.group(5):  # "refuses image observations": its action types stay, image_refusers says the rest
                kinds[algo] = BOTH if e.group(4) else frozenset() if e.group(3) else frozenset({e.group(2)})
    return kinds


def image_refusers(cell: str):
    """The algorithms a cell says refuse the family's envs with image observations (MAT: flat embeddings)."""
    return {algo for part in cell.split("; ")[1:] if part.split(": ", 1)[-1].startswith("refuses image observations")
            for algo in part.split(": ", 1)[0].split(", ")}


COLUMNS, ROWS = read_table()
ALGO_COLUMN = {algo: i for i, column in enumerate(COLUMNS) for algo in column}
CELLS = [(family, algo) for family in INSTANCES for algo in sorted(ALGO_COLUMN)]


def test_the_table_has_every_family_and_every_algorithm_once():
    assert list(ROWS) == list(INSTANCES), "rows: one per family, in this order"
    assert sorted(ALGO_COLUMN) == sorted(run.ALGOS) and sum(map(len, COLUMNS)) == len(run.ALGOS)
    for family, cells in ROWS.items():
        assert len(cells) == len(COLUMNS), family
        for cell, algos in zip(cells, COLUMNS):
            kinds = parse_cell(cell, algos)
            restricted = [algo for algo, k in kinds.items() if k and k != BOTH]
            if restricted:  # "X actions only" says something only where the family has both
                assert BOTH <= {kind for _, _, kind in INSTANCES[family]}, (family, cell)


def test_cell_grammar():
    kinds = parse_cell("works; coma: discrete actions only (the default); x: does not apply: why", ["a", "coma", "x"])
    assert kinds == {"a": BOTH, "coma": {"discrete"}, "x": frozenset()}
    assert parse_cell("works with continuous actions only (multiwalker)", ["a"]) == {"a": {"continuous"}}
    assert parse_cell("does not apply: continuous actions only", ["a"]) == {"a": frozenset()}
    assert parse_cell("does not apply: turn-based; b: works (its moves)", ["a", "b"]) == {"a": frozenset(), "b": BOTH}
    cell = "works; b: refuses image observations (pistonball)"
    assert parse_cell(cell, ["a", "b"]) == {"a": BOTH, "b": BOTH} and image_refusers(cell) == {"b"}
    for bad in ("runs", "works; y: fine", "works; a: sometimes"):
        with pytest.raises(AssertionError):
            parse_cell(bad, ["a"])


# ---------------------------------------------------------------------------- running the algorithms
_ENVS, _RUNS = {}, {}  # caches: env properties by instance, outcomes by (algo, carrier)


def describe(name, env_kwargs, kind):
    """(adapter class, properties) of one small env, read from the env itself; checks its action type."""
    key = (name, env_kwargs, kind)
    if key not in _ENVS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copies = JAX_COPIES["eval_num_envs"] if name.startswith("jaxmarl:") else 1
            env = make_instance(name, env_kwargs, kind, copies)
        assert env.discrete == (kind == D), f"{name} {env_kwargs} should have {kind} actions"
        props = set()
        if len(env.obs_shape) == 3:
            props.add("image obs")
        if len(set(env.obs_dims)) > 1:
            props.add("heterogeneous obs sizes")
        if env.has_action_mask:
            props.add("env action masks")
        if name in DIES or name == "leaving":
            props.add("agents die")
        if name == "butterfly:knights_archers_zombies":
            arguments = envs.env_arguments(name)
            assert arguments["killable_knights"] and arguments["killable_archers"]
        if "smax_" in name:  # a unit dies within two battles: not alive in the steps after, and not terminated
            rng, died = np.random.default_rng(0), False
            env.reset()
            for _ in range(2 * (envs.parse_env_kwargs(env_kwargs)["max_steps"] + 1)):
                out = env.step(env.sample_actions(rng))
                assert not (out.terminated & ~out.done[:, None]).any(), "a dead unit stays in the team to the end"
                died |= bool((~out.alive).any())
            assert died, f"no unit of {name} {env_kwargs} died in its first two battles"
        adapter = next(c.__name__ for c in type(env).__mro__ if c.__name__ in ADAPTERS)  # LBF's is a PettingZooVecEnv
        _ENVS[key] = (adapter, frozenset(props))
        env.close()
    return _ENVS[key]


def skip_if_missing(family):
    """Skip, naming the package, where the family's package is not installed."""
    missing = [p for p in PACKAGES.get(family, []) if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"{family} needs {', '.join(missing)} (pip install -e '.[all]' installs it)")


def run_tiny(algo: str, name: str, env_kwargs, kind: str, run_dir: str):
    """Run the algorithm on one small env: its summary, or the ConfigError it stopped with."""
    module = importlib.import_module(f"algos.{algo}")
    fields = {f.name for f in dataclasses.fields(module.Args)}
    settings = tiny_settings(module, name)
    env = "simple_spread" if name == "leaving" else name  # the leaving env replaces make_env below
    if "agent_groups" in fields and "iql_group" in fields:  # ppo_iql: one policy per group, so two groups
        agents = envs.make_env(env, 1, 0, envs.parse_env_kwargs(env_kwargs)).agents if name != "leaving" else ["a", "b"]
        if len({re.sub(r"_\d+$", "", a) for a in agents}) == 1:  # one group by name: the first agent leads one
            settings["agent_groups"] = (f"{agents[0]}=lead",)
    args = make_args(module.Args, env=env, env_kwargs=env_kwargs, run_dir=run_dir, **settings)
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "leaving":
            patch.setattr(module, "make_env", lambda _name, num_envs, seed, *a, **k:
                          make_instance("leaving", (), kind, num_envs, seed))
        try:
            return module.main(args)
        except ConfigError as err:
            return err


def check_works(algo: str, carrier, tmp_path_factory):
    """The tiny run on a carrier finishes with finite losses (run once per algorithm and carrier)."""
    if (algo, carrier) not in _RUNS:
        _RUNS[(algo, carrier)] = run_tiny(algo, *carrier, str(tmp_path_factory.mktemp("runs")))
    summary = _RUNS[(algo, carrier)]
    assert not isinstance(summary, ConfigError), f"{algo} refused {carrier}: {summary}"
    losses = summary["final_losses"]
    assert losses, f"{algo} on {carrier} made no update"
    for key, value in losses.items():
        if key != "explained_variance":  # nan where a few steps' returns do not vary
            assert math.isfinite(value), (algo, carrier, key, value)
    assert math.isfinite(summary["eval_return_mean"])


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("family,algo", CELLS, ids=[f"{f.rstrip(':')}-{a}" for f, a in CELLS])
def test_cell_holds(family, algo, tmp_path, tmp_path_factory):
    skip_if_missing(family)
    column = ALGO_COLUMN[algo]
    allowed = parse_cell(ROWS[family][column], COLUMNS[column])[algo]
    for instance in INSTANCES[family]:
        name, _, kind = instance
        if kind not in allowed:  # does not apply: refused before training, nothing written
            run_dir = tmp_path / f"{name}-{kind}".replace(":", "_")
            outcome = run_tiny(algo, *instance, str(run_dir))
            assert isinstance(outcome, ConfigError), \
                f"the table says {algo} does not run on {name} ({kind} actions), but it ran"
            assert not run_dir.exists() or not any(run_dir.iterdir()), "a refused run wrote its folder"
            continue
        adapter, props = describe(*instance)
        if "image obs" in props and algo in image_refusers(ROWS[family][column]):  # refused, nothing written
            run_dir = tmp_path / f"{name}-{kind}-image".replace(":", "_")
            assert isinstance(run_tiny(algo, *instance, str(run_dir)), ConfigError), \
                f"the table says {algo} refuses image observations, but it ran on {name}"
            assert not run_dir.exists() or not any(run_dir.iterdir()), "a refused run wrote its folder"
            continue
        for prop in [None, *sorted(props)]:  # the adapter itself, then each property the env has
            carrier = CARRIERS.get((adapter, kind, prop))
            assert carrier is not None, f"no carrier env for {adapter}, {kind} actions, {prop}: add one"
            skip_if_missing(next((f for f, listed in INSTANCES.items() if carrier in listed), None))
            carrier_adapter, carrier_props = describe(*carrier)  # it really has what it stands for
            assert carrier_adapter == adapter and carrier[2] == kind and (prop is None or prop in carrier_props)
            check_works(algo, carrier, tmp_path_factory)


# ---------------------------------------------------------------------------- the groups and loading columns
@pytest.mark.parametrize("family", list(INSTANCES))
def test_groups_and_loading_hold(family, tmp_path):
    """The last two columns: on the family's first env a run trains one group and keeps the other
    fixed (IA2C, --share-params group --train-groups), and a MAPPO run loads that trained group from
    it (another algorithm's run: the group acts as that run); on turn-based games IPPO, then MAPPO."""
    skip_if_missing(family)
    assert all(cell.startswith("works") for cell in ROWS[family][-2:]), ROWS[family][-2:]
    assert not any(COLUMNS[-2:]), "the last two columns are the groups and loading columns, for every algorithm"
    name, env_kwargs, kind = next((i for i in INSTANCES[family] if i[2] == D), INSTANCES[family][0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = make_instance(name, env_kwargs, kind).agents
    split = () if len({re.sub(r"_\d+$", "", a) for a in agents}) > 1 else (f"{agents[0]}=lead",)
    first = "lead" if split else re.sub(r"_\d+$", "", agents[0])
    runs = {}
    trainer, loader = GROUP_ALGOS.get(family, ("ia2c", "mappo"))
    for algo, extra in ((trainer, {"train_groups": (first,)}), (loader, {"load_group": None})):
        module = importlib.import_module(f"algos.{algo}")
        if algo == loader:
            extra = {"load_group": (f"{first}={runs[trainer]['run_dir']}",)}
        args = make_args(module.Args, env=name, env_kwargs=env_kwargs, run_dir=str(tmp_path / algo),
                         share_params="group", agent_groups=split, **extra,
                         **tiny_settings(module, name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs[algo] = module.main(args)
        assert all(math.isfinite(v) for k, v in runs[algo]["final_losses"].items() if k != "explained_variance")
        assert first in runs[algo]["eval_group_returns"] and len(runs[algo]["eval_group_returns"]) >= 2
