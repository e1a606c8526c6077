"""--track: every scalar, the run's args and an evaluation's video go to Weights & Biases as well.

The runs here are real command lines in W&B's offline mode (WANDB_MODE=offline: no network), and
what they tracked is read back from the W&B run files inside the run folder
(<run>/wandb/offline-run-<time>-<id>/run-<id>.wandb) and compared with scalars.csv."""
import csv
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from algos import mappo
from common.cli import parse_args, report_errors
from common.run_utils import wandb_id

wandb_internal_pb2 = pytest.importorskip("wandb.proto.wandb_internal_pb2",  # W&B's record format
                                         reason='--track needs Weights & Biases (pip install -e ".[track]")')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--total-timesteps", "1000", "--num-envs", "4", "--num-steps", "25", "--eval-every", "500",
        "--eval-episodes", "2", "--eval-num-envs", "2", "--hidden-sizes", "16", "--no-cuda"]
PROJECT = "marl-clean-test"


def offline_env(tmp) -> dict:
    """W&B offline and quiet, its own settings and caches in `tmp` rather than the home folder."""
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "COLUMNS": "200",
            **{var: os.path.join(tmp, name) for var, name in (("WANDB_CONFIG_DIR", "config"),
                                                                ("WANDB_CACHE_DIR", "cache"),
                                                                ("WANDB_DATA_DIR", "data"))}}


def call(*argv, env, timeout=180):
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


# ----------------------------------------------------------------------------- reading W&B's run file
def wandb_records(path: str):
    """The records of a .wandb file: a header, then LevelDB's log format (32 KiB blocks of records,
    each with a 7-byte header: crc32, length, type 1 full / 2 first / 3 middle / 4 last)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:7] == b":W&B\xe1\xbe\x00", f"{path} does not start with W&B's header"
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding: the file was preallocated this far
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


def read_wandb(path: str) -> dict:
    """{"run": the run record, "config": {key: value}, "history": [{key: value}], "exit_code": int or None}."""
    out = {"run": None, "config": {}, "history": [], "exit_code": None}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            out["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            out["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                   for item in record.history.item})  # a media entry: "<key>/path", "<key>/_type"...
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out


def tracked_scalars(history) -> dict:
    """{(global_step, tag): value} of W&B's history, W&B's own keys (_step, _runtime...) left out."""
    return {(row["global_step"], key): repr(float(value)) for row in history for key, value in row.items()
            if not key.startswith("_") and key != "global_step"}


def csv_scalars(run: str, after: int = -1) -> dict:
    with open(os.path.join(run, "scalars.csv")) as f:
        return {(int(row["step"]), row["tag"]): repr(float(row["value"])) for row in csv.DictReader(f)
                if int(row["step"]) > after}


def wandb_files(run: str) -> list:
    return sorted(glob.glob(os.path.join(run, "wandb", "offline-run-*", "run-*.wandb")))


# ----------------------------------------------------------------------------- a tracked grid of one run
@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """`run.py --track` with one run: the run folder, the W&B file its training wrote, the env of the calls."""
    tmp = tmp_path_factory.mktemp("track")
    env = offline_env(str(tmp))
    proc = call("run.py", "--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "1", "--workers", "1",
                "--run-dir", str(tmp / "runs"), "--track", "--wandb-project-name", PROJECT, "--", *TINY, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = glob.glob(str(tmp / "runs" / "torch-simple_spread" / "mappo" / "mappo__*"))
    (trained,) = wandb_files(run)
    return {"run": run, "trained": trained, "env": env, "tmp": tmp}


def test_track_logs_the_scalars_and_args_of_the_run(tracked):
    run = tracked["run"]
    record = read_wandb(tracked["trained"])
    assert record["exit_code"] == 0  # finished
    # run.py passed --track and the project on; one W&B run per run folder, its seeds grouped by label and env
    assert record["run"].project == PROJECT and record["run"].run_id == wandb_id(run)
    assert record["run"].display_name == os.path.basename(run)
    assert record["run"].run_group == "mappo__torch:simple_spread"
    # the same scalars at the same env steps as scalars.csv, every one of them
    scalars = tracked_scalars(record["history"])
    assert scalars == csv_scalars(run)
    tags = {tag for _, tag in scalars}
    assert {"eval/episodic_return", "losses/policy_loss", "charts/SPS"} <= tags
    assert {step for step, tag in scalars if tag == "eval/episodic_return"} == {500, 1000}
    # the resolved args are the run's config
    with open(os.path.join(run, "args.json")) as f:
        saved = json.load(f)
    assert {k: record["config"][k] for k in saved} == saved
    assert record["config"]["track"] is True and record["config"]["hidden_sizes"] == [16]


def test_resume_goes_on_in_the_same_wandb_run(tracked):
    run, env = tracked["run"], tracked["env"]
    # tracking is the resuming command line's choice: --track is not taken back from the saved run, the project is
    assert not parse_args(mappo.Args, ["--resume", run]).track
    args = parse_args(mappo.Args, ["--resume", run, "--track"])
    assert args.track and args.wandb_project_name == PROJECT
    proc = call("algos/mappo.py", "--resume", run, "--total-timesteps", "1500", "--track", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    resumed = [path for path in wandb_files(run) if path != tracked["trained"]]
    assert len(resumed) == 1
    suffix = f"-{wandb_id(run)}"
    assert all(os.path.basename(os.path.dirname(p)).endswith(suffix) for p in (tracked["trained"], resumed[0]))
    record = read_wandb(resumed[0])
    assert record["run"].run_id == wandb_id(run) and record["run"].project == PROJECT
    assert tracked_scalars(record["history"]) == csv_scalars(run, after=1000)  # from the checkpoint's step on


def test_evaluate_logs_the_return_and_the_video_into_the_run(tracked):
    run, env = tracked["run"], tracked["env"]
    before = set(wandb_files(run))
    gif = tracked["tmp"] / "episode.gif"
    proc = call("run.py", "evaluate", run, "--episodes", "2", "--video", str(gif), "--no-cuda", "--track", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (evaluated,) = set(wandb_files(run)) - before
    record = read_wandb(evaluated)
    assert record["run"].run_id == wandb_id(run) and record["run"].project == PROJECT  # the project it was trained in
    (row,) = [row for row in record["history"] if "evaluate/episodic_return" in row]
    with open(os.path.join(run, "summary.json")) as f:
        assert row["global_step"] == json.load(f)["global_step"]
    assert row["evaluate/video/_type"] == "video-file"  # a media file, its path in the history
    media = os.path.join(os.path.dirname(evaluated), "files", row["evaluate/video/path"])
    with open(media, "rb") as f:
        assert media.endswith(".gif") and f.read() == gif.read_bytes()


# ----------------------------------------------------------------------------- without wandb
def test_track_without_wandb_fails_before_anything_is_written(tmp_path, monkeypatch, capsys):
    import run

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails now, as where it is not installed
    runs = str(tmp_path / "runs")
    for command in (lambda: mappo.main(parse_args(mappo.Args, ["--env", "torch:simple_spread", "--run-dir", runs,
                                                               "--track"])),  # as the algorithm file's command line
                    lambda: run.launch(["--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "1", "--run-dir",
                                        runs, "--track"]),
                    lambda: run.evaluate([runs, "--track"])):
        with pytest.raises(SystemExit) as stop:
            report_errors(command)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith("error: --track needs Weights & Biases"), err
        assert len(err.strip().splitlines()) == 1 and 'pip install -e ".[track]"' in err and "Traceback" not in err
        assert not os.path.exists(runs)
