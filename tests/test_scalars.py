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


def test_scalars_csv_holds_what_tensorboard_holds(tiny, tmp_path):
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
