"""MaMuJoCo (gymnasium-robotics `mamujoco_v1`): one MuJoCo robot split between agents.

    from envs import make_env
    env = make_env("mamujoco:HalfCheetah-2x3", num_envs=4, seed=1)

A name is `mamujoco:<scenario>-<agent_conf>`, the two arguments of
`gymnasium_robotics.mamujoco_v1.parallel_env` (`HalfCheetah-2x3`: two agents of three joints
each; `Hopper-3x1`: one joint each). Each agent sees its own joints and their neighbours up to
`agent_obsk` hops (default 1), so agents of one robot can have different observation sizes;
the adapter pads them to the largest and keeps the true sizes in `obs_dims`. The global state
is the env's `state()` (the single-agent MuJoCo observation). Actions are each agent's joint
torques, continuous in [-1, 1] (Box); the episode is truncated at the MuJoCo env's limit (1000
steps; `--env-kwargs max_episode_steps=200` shortens it) and terminated where the robot falls
(Hopper, Walker2d, Ant, Humanoid). The env is a PettingZoo `ParallelEnv`, batched by
`PettingZooVecEnv` (copy i reset with seed + i).
"""
import importlib
import inspect
import re
from typing import Any, Dict, Optional, Tuple

from envs.errors import EnvError, EnvPackageMissing, did_you_mean
from envs.pettingzoo_vec import PettingZooVecEnv

PIP_LINE = 'pip install "gymnasium-robotics==1.4.2" "mujoco>=3.1,<5"'

# scenario -> the agent_conf values mamujoco_v1 1.4 accepts (gymnasium_robotics/.../obsk.py)
MAMUJOCO_CONFS = {
    "Ant": ("2x4", "2x4d", "4x2"),
    "HalfCheetah": ("2x3", "6x1"),
    "Hopper": ("3x1",),
    "Humanoid": ("9|8",),
    "HumanoidStandup": ("9|8",),
    "Reacher": ("2x1",),
    "Pusher": ("3p",),
    "Swimmer": ("2x1",),
    "Walker2d": ("2x3",),
    "CoupledHalfCheetah": ("1p1",),
    "ManySegmentSwimmer": ("<agents>x<segments per agent>, e.g. 10x2",),
    "ManySegmentAnt": ("<agents>x<segments per agent>, e.g. 2x3",),
}


def split_name(name: str) -> Tuple[str, str]:
    """'HalfCheetah-2x3' -> ('HalfCheetah', '2x3'), or fail with the accepted names."""
    scenario, _, conf = name.partition("-")
    if scenario not in MAMUJOCO_CONFS:
        names = [f"{s}-{c}" for s, cs in MAMUJOCO_CONFS.items() for c in cs if not c.startswith("<")]
        raise EnvError(f"unknown MaMuJoCo env {name!r}; {did_you_mean(name, names, 'mamujoco:')}names are "
                       f"mamujoco:<scenario>-<agent_conf>, scenarios: {', '.join(MAMUJOCO_CONFS)}")
    confs = MAMUJOCO_CONFS[scenario]
    many_segments = scenario.startswith("ManySegment") and re.fullmatch(r"[1-9]\d*x[1-9]\d*", conf)
    if conf not in confs and not many_segments:
        raise EnvError(f"MaMuJoCo {scenario} has no agent_conf {conf!r}; {did_you_mean(conf, confs, scenario + '-')}"
                       f"accepted: {', '.join(confs)} (e.g. mamujoco:{scenario}-{confs[0]})")
    return scenario, conf


def _module():
    try:
        from gymnasium_robotics import mamujoco_v1
    except ImportError as err:
        raise EnvPackageMissing(f"'mamujoco:' envs need gymnasium-robotics and mujoco: {PIP_LINE}") from err
    return mamujoco_v1


def arguments(name: str) -> Dict[str, Any]:
    """mamujoco_v1.parallel_env's own arguments, the time limit, and the single-agent MuJoCo env's."""
    import gymnasium

    scenario, _ = split_name(name)
    mamujoco_v1 = _module()
    params = dict(inspect.signature(mamujoco_v1.parallel_env).parameters)
    out = {k: p.default for k, p in params.items()
           if k not in ("scenario", "agent_conf", "render_mode", "gym_env") and p.kind != p.VAR_KEYWORD}
    if scenario == "CoupledHalfCheetah":  # built by mamujoco itself: it takes no MuJoCo arguments
        return out
    base = {"ManySegmentAnt": "Ant", "ManySegmentSwimmer": "Swimmer"}
    spec = gymnasium.spec(f"{base.get(scenario, scenario)}-v5")
    out["max_episode_steps"] = spec.max_episode_steps
    module, cls = str(spec.entry_point).split(":")
    single = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    out.update({k: p.default for k, p in single.items()
                if k not in ("self", "render_mode", "xml_file") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)})
    return out


def make(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
         render_mode: Optional[str] = None, device=None) -> PettingZooVecEnv:
    """E copies of `mamujoco_v1.parallel_env(scenario, agent_conf, **env_kwargs)`; MuJoCo steps on
    the CPU and the adapter returns numpy arrays whatever `device` is."""
    env_kwargs = dict(env_kwargs or {})  # checked against arguments() by envs.make_env
    scenario, conf = split_name(name)
    mamujoco_v1 = _module()

    def make_one():
        return mamujoco_v1.parallel_env(scenario, conf, render_mode=render_mode, **env_kwargs)

    return PettingZooVecEnv(make_one, num_envs, seed)
