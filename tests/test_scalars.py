"""Every run's scalars as a file (scalars.csv beside the TensorBoard events) and its args in
TensorBoard's HParams view; the curves read back from the CSV where no event file is left."""
import csv
import glob
import os

import pytest

from algos import mappo
from common.results import scalar_history

TAGS = ["eval/episodic_return", "charts/episodic_return", "losses/value_loss", "charts/SPS"]


def rows(run_dir):
    with open(os.path.join(run_dir, "scalars.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_scalars_csv_holds_what_tensorboard_holds(tiny):
    summary = mappo.main(tiny(mappo, env_kwargs=("max_cycles=5",), eval_every=10))
    run_dir = summary["run_dir"]
    table = rows(run_dir)
    assert set(table[0]) == {"step", "tag", "value", "wall_time"}
    from_events = scalar_history(run_dir, TAGS)
    assert all(from_events[tag] for tag in TAGS)
    for tag in TAGS:  # the same points; the CSV keeps full precision, the event files float32
        points = [(int(r["step"]), float(r["value"])) for r in table if r["tag"] == tag]
        assert [s for s, _ in points] == [s for s, _ in from_events[tag]]
        assert [v for _, v in points] == pytest.approx([v for _, v in from_events[tag]], rel=1e-6)
    (events,) = glob.glob(os.path.join(run_dir, "events.out.tfevents*"))
    with open(events, "rb") as f:
        assert b"_hparams_/experiment" in f.read()  # the HParams view lists the run with its args

    for path in glob.glob(os.path.join(run_dir, "events.out.tfevents*")):  # results kept without TensorBoard
        os.remove(path)
    from_csv = scalar_history(run_dir, TAGS)
    for tag in TAGS:
        assert [s for s, _ in from_csv[tag]] == [s for s, _ in from_events[tag]]
        assert [v for _, v in from_csv[tag]] == pytest.approx([v for _, v in from_events[tag]], rel=1e-6)


def test_a_resumed_run_appends_and_its_steps_count_once(tiny):
    first = mappo.main(tiny(mappo, env_kwargs=("max_cycles=5",), total_timesteps=10, checkpoint_every=10))
    resumed = mappo.main(tiny(mappo, env_kwargs=("max_cycles=5",), total_timesteps=30, resume=first["run_dir"]))
    run_dir = resumed["run_dir"]
    assert [r for r in rows(run_dir) if r["tag"] == "step"] == []  # one header: the resumed run appends
    for path in glob.glob(os.path.join(run_dir, "events.out.tfevents*")):
        os.remove(path)
    steps = [s for s, _ in scalar_history(run_dir, ["charts/SPS"])["charts/SPS"]]
    assert steps == sorted(set(steps)) and steps[-1] == 30


def test_marl_eval_export_round_trips(tiny, tmp_path):
    """Two algorithms x two seeds exported in marl-eval's layout and read back: every evaluation's
    episode returns, their means equal to the runs' own evaluation curves."""
    import json

    import run
    from algos import ippo
    summaries = [module.main(tiny(module, seed=seed, env_kwargs=("max_cycles=5",), eval_every=10,
                                  run_dir=str(tmp_path / "runs")))
                 for module in (mappo, ippo) for seed in (1, 2)]
    out = tmp_path / "marl_eval.json"
    run.export([str(tmp_path / "runs"), "--out", str(out)])
    data = json.loads(out.read_text())
    assert list(data) == ["mpe2"] and list(data["mpe2"]) == ["simple_spread"]  # environment, task
    algorithms = data["mpe2"]["simple_spread"]
    assert sorted(algorithms) == ["ippo", "mappo"] and all(sorted(a) == ["run_1", "run_2"] for a in algorithms.values())
    for summary in summaries:
        runs = algorithms[summary["algo"]][f"run_{summary['seed']}"]
        steps = [k for k in runs if k.startswith("step_")]
        assert set(runs) == set(steps) | {"absolute_metrics"}
        for k, (step, mean) in zip(steps, summary["eval_history"]):
            entry = runs[k]
            assert set(entry) == {"step_count", "return"} and entry["step_count"] == step
            assert len(entry["return"]) == 2 and sum(entry["return"]) / 2 == pytest.approx(mean)
        assert runs["absolute_metrics"]["return"] == runs[steps[-1]]["return"]
