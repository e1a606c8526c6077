"""The command line: real calls of the scripts, YAML presets, unknown keys and flags, and
option combinations that are rejected before anything runs."""
import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

from algos import ippo, mappo
from common.cli import ConfigError, load_preset, make_args, parse_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = {"mappo": mappo, "ippo": ippo}


def run_script(script, *flags, timeout=120):
    return subprocess.run([sys.executable, os.path.join("algos", script), *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def flat(text):
    """Help text without box characters and line wrapping."""
    return " ".join(text.replace("│", " ").split())


# ----------------------------------------------------------------------------- real command lines
@pytest.mark.parametrize("algo", ALGOS)
def test_real_command_line_run(tmp_path, algo):
    proc = run_script(f"{algo}.py", "--total-timesteps", "100", "--num-envs", "2", "--num-steps", "5",
                      "--eval-episodes", "1", "--eval-num-envs", "1", "--hidden-sizes", "16", "--run-dir",
                      str(tmp_path), "--no-cuda")
    assert proc.returncode == 0, proc.stderr
    summaries = glob.glob(str(tmp_path / "*" / "summary.json"))
    assert len(summaries) == 1
    with open(summaries[0]) as f:
        summary = json.load(f)
    assert summary["algo"] == algo and summary["global_step"] == 100 and summary["eval_episodes"] == 1
    with open(os.path.join(os.path.dirname(summaries[0]), "args.json")) as f:
        saved = json.load(f)
    assert saved["hidden_sizes"] == [16] and saved["cuda"] is False  # the resolved args are saved


def test_help_mentions_units():
    proc = run_script("mappo.py", "--help")
    assert proc.returncode == 0, proc.stderr
    text = flat(proc.stdout)
    assert "env steps" in text and "--total-timesteps" in text and "--no-cuda" in text


def test_unknown_flag_fails_with_message():
    proc = run_script("mappo.py", "--no-such-flag", "1")
    assert proc.returncode != 0
    assert "--no-such-flag" in proc.stdout + proc.stderr


def test_unknown_env_lists_known_envs(tmp_path):
    proc = run_script("mappo.py", "--env", "nosuch", "--run-dir", str(tmp_path), "--no-cuda", "--num-envs", "1",
                      "--eval-num-envs", "1")
    assert proc.returncode != 0
    assert "known envs" in proc.stderr and "simple_spread" in proc.stderr


# ----------------------------------------------------------------------------- presets
def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_preset_is_applied_and_command_line_wins(tmp_path):
    path = write(tmp_path, "preset.yaml", "learning_rate: 0.001\nnum-envs: 3\nhidden_sizes: [8, 8]\n")
    args = parse_args(mappo.Args, ["--config", path])
    assert (args.learning_rate, args.num_envs, args.hidden_sizes) == (0.001, 3, (8, 8))
    assert args.gamma == mappo.Args().gamma  # untouched fields keep their defaults
    args = parse_args(mappo.Args, ["--config", path, "--num-envs", "5"])
    assert args.num_envs == 5 and args.learning_rate == 0.001
    args = parse_args(mappo.Args, [f"--config={path}", "--learning-rate", "0.5"])
    assert args.learning_rate == 0.5 and args.num_envs == 3
    args = make_args(mappo.Args, config=path, num_envs=7)
    assert (args.learning_rate, args.num_envs, args.hidden_sizes) == (0.001, 7, (8, 8))


def test_unknown_preset_key_fails(tmp_path):
    path = write(tmp_path, "bad.yaml", "learning_rat: 0.001\n")
    with pytest.raises(ConfigError) as err:
        parse_args(mappo.Args, ["--config", path])
    msg = str(err.value)
    assert "learning_rat" in msg and "accepted keys" in msg and "did you mean 'learning_rate'" in msg
    with pytest.raises(ConfigError, match="learning_rat") as err:
        make_args(mappo.Args, config=path)
    assert "accepted keys" in str(err.value)


def test_preset_key_of_another_algorithm_fails(tmp_path):
    path = write(tmp_path, "mappo_only.yaml", "critic_input: concat_obs\n")
    assert load_preset(mappo.Args, path) == {"critic_input": "concat_obs"}
    with pytest.raises(ConfigError, match="critic_input"):
        load_preset(ippo.Args, path)


def test_preset_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "list.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_preset(mappo.Args, path)


def test_missing_preset_file_fails(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml"):
        parse_args(mappo.Args, ["--config", str(tmp_path / "nope.yaml")])


def test_make_args_rejects_unknown_names():
    with pytest.raises(ConfigError, match="no_such_field"):
        make_args(mappo.Args, no_such_field=1)
    with pytest.raises(ConfigError, match="critic_input"):
        make_args(ippo.Args, critic_input="state")  # IPPO has no centralised critic


# ----------------------------------------------------------------------------- rejected combinations
BAD = {
    "chunk_len": dict(recurrent="gru", num_steps=5, chunk_len=3),
    "minibatches_over_steps": dict(num_envs=2, num_steps=5, num_minibatches=11),
    "minibatches_over_chunks": dict(recurrent="lstm", num_envs=2, num_steps=6, chunk_len=3, num_minibatches=5),
    "render_gif": dict(render_gif="episode.gif"),
    "zero_envs": dict(num_envs=0),
}


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("case", BAD)
def test_unsupported_combination_fails_at_once(tmp_path, algo, case):
    run_dir = tmp_path / "runs"
    with pytest.raises(ConfigError):  # from make_args' range checks or from main's validate
        ALGOS[algo].main(make_args(ALGOS[algo].Args, run_dir=str(run_dir), cuda=False, **BAD[case]))
    assert not run_dir.exists()  # nothing was started


@pytest.mark.parametrize("algo", ALGOS)
def test_boundary_combinations_are_accepted(algo):
    module = ALGOS[algo]
    module.validate(make_args(module.Args, num_envs=2, num_steps=5, num_minibatches=10))
    module.validate(make_args(module.Args, recurrent="gru", num_envs=2, num_steps=6, chunk_len=3, num_minibatches=4))
    module.validate(make_args(module.Args, recurrent="gru", num_steps=6, chunk_len=6))


# ----------------------------------------------------------------------------- tuned presets
PRESETS = sorted(glob.glob(os.path.join(REPO, "configs", "*", "*.yaml")))


def test_config_folders_name_algorithms():
    for folder in glob.glob(os.path.join(REPO, "configs", "*")):
        if os.path.isdir(folder):
            name = os.path.basename(folder)
            assert os.path.isfile(os.path.join(REPO, "algos", f"{name}.py")), f"configs/{name} has no algos/ file"


@pytest.mark.parametrize("path", PRESETS, ids=[os.path.relpath(p, REPO) for p in PRESETS])
def test_every_preset_loads(path):
    algo = os.path.basename(os.path.dirname(path))
    module = importlib.import_module(f"algos.{algo}")
    preset = load_preset(module.Args, path)
    args = make_args(module.Args, **preset)
    module.validate(args)


# ----------------------------------------------------------------------------- validate() order
@pytest.mark.parametrize("module", [mappo, ippo])
def test_zero_chunk_len_is_a_config_error(module):
    with pytest.raises(ConfigError, match="chunk-len"):
        module.validate(make_args(module.Args, recurrent="gru", chunk_len=0))


@pytest.mark.parametrize("module", [mappo, ippo])
def test_zero_envs_message_names_num_envs(module):
    with pytest.raises(ConfigError, match="num-envs"):
        make_args(module.Args, num_envs=0)


def test_resume_brings_back_the_saved_settings(tiny, tmp_path):
    """--resume continues the run that was started: its saved Args come back underneath the
    flags given with --resume (defaults < preset < checkpoint < command line)."""
    from common.cli import parse_args

    first = mappo.main(tiny(mappo, learning_rate=1e-3, hidden_sizes=(8,)))
    args = parse_args(mappo.Args, ["--resume", first["run_dir"], "--total-timesteps", "40"])
    assert args.learning_rate == 1e-3 and args.hidden_sizes == (8,) and args.num_envs == 2
    assert args.total_timesteps == 40 and args.resume == first["run_dir"]
    resumed = mappo.main(args)
    assert resumed["global_step"] == 40 and resumed["run_dir"] == first["run_dir"]
