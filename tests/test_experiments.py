"""Everything around the launcher: the results reader and its statistics (common/results.py),
`run.py plot` on runs of different lengths and on unfinished runs, `run.py evaluate` with a GIF,
the Ray backend on a local Ray instance, and the presets of every algorithm."""
import glob
import importlib
import json
import os
import re
import shlex

import numpy as np
import pytest

import run
from algos import mappo
from common.cli import load_preset, make_args
from common.results import (bootstrap_ci, curves_on_grid, iqm, latest_per_seed, mean_and_band, read_run,
                            results_table, steps_to_threshold)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--num-envs", "2", "--num-steps", "5", "--eval-every", "10", "--eval-episodes", "1", "--eval-num-envs", "1",
        "--hidden-sizes", "16", "--update-epochs", "1", "--no-cuda"]


# ----------------------------------------------------------------------------- statistics
def test_iqm_cuts_a_quarter_from_each_end():
    assert iqm([1.0, 2.0, 3.0]) == 2.0  # fewer than 4 values: the mean
    assert iqm([0.0, 1.0, 2.0, 100.0]) == 1.5  # middle two of four
    assert iqm([-50.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1000.0]) == 3.5  # middle four of eight


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    x = np.random.default_rng(0).normal(5.0, 1.0, 20)
    low, high = bootstrap_ci(x)
    assert low < x.mean() < high and high - low < 1.5
    assert bootstrap_ci(x) == (low, high)
    assert bootstrap_ci([3.0]) == (3.0, 3.0)
    assert all(np.isnan(bootstrap_ci([])))


def test_curves_of_different_lengths_share_a_step_axis():
    steps, values = curves_on_grid([[(10, 1.0), (20, 2.0), (30, 3.0)], [(10, 3.0), (20, 4.0)], [(15, 0.0), (25, 1.0)]])
    assert steps.tolist() == [10, 15, 20, 25, 30]
    assert np.allclose(values[0], [1.0, 1.5, 2.0, 2.5, 3.0])
    assert np.allclose(values[1, :3], [3.0, 3.5, 4.0]) and np.isnan(values[1, 3:]).all()
    assert np.isnan(values[2, [0, 4]]).all() and np.allclose(values[2, 1:4], [0.0, 0.5, 1.0])
    mean, low, high, count = mean_and_band(values)
    assert count.tolist() == [2, 3, 3, 2, 1]
    assert mean[0] == 2.0 and mean[4] == 3.0 and low[4] == high[4] == 3.0
    assert steps_to_threshold([(10, 1.0), (20, 2.0), (30, 3.0)], 2.0) == 20
    assert steps_to_threshold([(10, 1.0)], 2.0) is None


def record(env, label, seed, curve, finished=True, sps=100.0):
    return {"env": env, "label": label, "algo": label, "seed": seed, "curve": curve, "finished": finished,
            "global_step": curve[-1][0], "final_return": curve[-1][1], "best_return": max(v for _, v in curve),
            "sps": sps, "path": f"/runs/{label}{seed}"}


def test_results_table_rows_per_env_and_algorithm():
    records = [record("spread", "mappo", s, [(10, -50.0 + s), (20, -30.0 - s)]) for s in (1, 2, 3)]
    records += [record("spread", "ippo", 1, [(10, -40.0), (20, -45.0), (30, -20.0)], finished=False)]
    records += [record("tag", "mappo", 1, [(10, 5.0)])]
    rows = results_table(records, thresholds={"spread": -35.0})
    assert [(r["env"], r["algo"], r["seeds"]) for r in rows] == [("spread", "ippo", 1), ("spread", "mappo", 3),
                                                                ("tag", "mappo", 1)]
    ippo, mappo, tag = rows
    assert ippo["unfinished"] == 1 and ippo["final_mean"] == -20.0 and ippo["steps_to_threshold"] == 30
    assert mappo["final_mean"] == -32.0 and mappo["best_mean"] == -32.0  # the best of each seed is its final
    assert mappo["final_ci_low"] <= -32.0 <= mappo["final_ci_high"] and mappo["reached"] == "3/3"
    assert mappo["steps_to_threshold"] == 20 and mappo["env_steps_min"] == mappo["env_steps_max"] == 20
    assert tag["threshold"] is None and tag["reached"] == ""


def test_latest_per_seed_prefers_finished_then_longer_runs():
    short, longer = record("e", "a", 1, [(10, 0.0)], finished=False), record("e", "a", 1, [(20, 0.0)], finished=False)
    done = record("e", "a", 1, [(10, 0.0)])
    assert latest_per_seed([short, longer]) == [longer]
    assert latest_per_seed([longer, done, short]) == [done]


# ----------------------------------------------------------------------------- plot
def test_plot_runs_of_different_lengths_and_an_unfinished_one(tmp_path):
    runs = tmp_path / "runs"
    run.main(["--algo", "mappo", "ippo", "--seeds", "2", "--workers", "1", "--run-dir", str(runs), "--",
              "--total-timesteps", "40", *TINY])
    # A shorter mappo run of another seed, made by hand in another layout: plot reads any folder.
    mappo.main(make_args(mappo.Args, seed=3, total_timesteps=20, run_dir=str(runs / "by_hand"), num_envs=2,
                         num_steps=5, eval_every=10, eval_episodes=1, eval_num_envs=1, hidden_sizes=(16,),
                         update_epochs=1, cuda=False))
    (unfinished,) = glob.glob(str(runs / "simple_spread" / "ippo" / "ippo__simple_spread__2__*"))
    os.remove(os.path.join(unfinished, "summary.json"))  # as if still running: read from its event files

    out = run.main(["plot", str(runs), "--out", str(tmp_path / "plots"), "--threshold", "simple_spread=-1000"])
    assert out["pngs"] == [str(tmp_path / "plots" / "simple_spread.png")]
    assert os.path.getsize(out["pngs"][0]) > 10_000
    ippo_row, mappo_row = out["rows"]
    assert (ippo_row["algo"], ippo_row["seeds"], ippo_row["unfinished"], ippo_row["reached"]) == ("ippo", 2, 1, "2/2")
    assert (mappo_row["algo"], mappo_row["seeds"], mappo_row["env_steps_min"], mappo_row["env_steps_max"]) == (
        "mappo", 3, 20, 40)
    assert (tmp_path / "plots" / "results.csv").read_text().count("\n") == 3
    table = (tmp_path / "plots" / "results.md").read_text()
    assert "| simple_spread | ippo | 2 | 40 (1 unfinished) |" in table
    assert "| simple_spread | mappo | 3 | 20-40 |" in table
    record = read_run(unfinished)
    assert not record["finished"] and [s for s, _ in record["curve"]] == [10, 20, 30, 40]
    assert record["sps"] > 0 and record["global_step"] == 40 and record["label"] == "ippo"


def test_plot_without_runs_fails(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run.main(["plot", str(tmp_path)])
    assert stop.value.code == 2 and "error: no runs" in capsys.readouterr().err


# ----------------------------------------------------------------------------- evaluate
def test_evaluate_a_checkpoint_and_save_a_gif(tmp_path, capsys):
    (summary,) = run.main(["--algo", "ippo", "--seeds", "1", "--workers", "1", "--run-dir", str(tmp_path), "--",
                           "--total-timesteps", "10", *TINY])
    gif = tmp_path / "episode.gif"
    (result,) = run.main(["evaluate", str(tmp_path), "--episodes", "3", "--video", str(gif), "--no-cuda"])
    assert result["algo"] == "ippo" and result["eval_episodes"] == 3 and result["run"] == summary["run_dir"]
    assert gif.read_bytes()[:3] == b"GIF"
    out = capsys.readouterr().out
    assert "greedy return over 3 episodes" in out and f"saved 25 frames to {gif}" in out


def test_evaluate_refuses_a_video_of_an_env_that_does_not_render(tmp_path, capsys):
    run.main(["--algo", "mappo", "--env", "matrix_game", "--seeds", "1", "--workers", "1", "--run-dir",
              str(tmp_path), "--", "--total-timesteps", "10", *TINY])
    with pytest.raises(SystemExit) as stop:
        run.main(["evaluate", str(tmp_path), "--episodes", "2", "--video", str(tmp_path / "x.gif"), "--no-cuda"])
    assert stop.value.code == 2 and "error: cannot render" in capsys.readouterr().err


# ----------------------------------------------------------------------------- Ray
def test_ray_backend_runs_a_tiny_grid(tmp_path):
    pytest.importorskip("ray", reason="Ray is optional (pip install ray); --backend local needs nothing")
    results = run.main(["--algo", "mappo", "--env", "matrix_game", "--seeds", "2", "--backend", "ray",
                        "--workers", "1", "--run-dir", str(tmp_path), "--", "--total-timesteps", "20", *TINY])
    assert sorted(r["seed"] for r in results) == [1, 2] and all(r["global_step"] == 20 for r in results)
    assert len(glob.glob(str(tmp_path / "matrix_game" / "mappo" / "*" / "summary.json"))) == 2
    with open(tmp_path / "results.json") as f:
        assert len(json.load(f)["runs"]) == 2


# ----------------------------------------------------------------------------- presets
PRESETS = sorted(glob.glob(os.path.join(REPO, "configs", "*", "*.yaml")))


@pytest.mark.parametrize("path", PRESETS, ids=[os.path.relpath(p, REPO) for p in PRESETS])
def test_every_preset_belongs_to_an_algorithm_and_passes_its_checks(path):
    algo = os.path.basename(os.path.dirname(path))
    assert algo in run.ALGOS, f"{os.path.relpath(path, REPO)}: no algos/{algo}.py"
    module = importlib.import_module(f"algos.{algo}")
    args = make_args(module.Args, **load_preset(module.Args, path))
    if hasattr(module, "validate"):
        module.validate(args)
    automatic = run.preset_for(algo, args.env)
    named_after_env = os.path.basename(path)[:-5] in (args.env.replace(":", "_"), args.env.split(":")[-1])
    if named_after_env:  # picked by run.py for its env
        assert automatic == path
    else:  # a named preset (e.g. a throughput preset), passed with --config; the env's own preset stays the default
        assert automatic != path


def test_every_algorithm_has_a_preset_and_the_how_to_lists_each_one():
    """docs/how-to.md's preset table names every preset file under its algorithm, and every
    algorithm file has at least one preset."""
    with open(os.path.join(REPO, "docs", "how-to.md")) as f:
        rows = [line for line in f if line.startswith("| ") and "(`" in line and ".yaml" in line]
    listed = set()
    for row in rows:
        cells = row.split("|")[2]  # "`mappo`, `ippo`: `simple_spread.yaml`" or "`mappo`: `x.yaml` (named)"
        algos_part, _, files_part = cells.partition(":")
        for algo in re.findall(r"`(\w+)`", algos_part):
            listed.update((algo, name) for name in re.findall(r"`([\w.\-]+\.yaml)`", files_part))
    on_disk = {(os.path.basename(os.path.dirname(p)), os.path.basename(p)) for p in PRESETS}
    assert on_disk - listed == set(), "presets missing from docs/how-to.md's table"
    assert listed - on_disk == set(), "docs/how-to.md's table names presets that do not exist"
    assert set(run.ALGOS) - {algo for algo, _ in on_disk} == set(), "algorithms without a preset"


def test_torch_port_falls_back_to_the_pettingzoo_preset():
    assert run.preset_for("mappo", "torch:simple_spread") == os.path.join(REPO, "configs", "mappo",
                                                                          "simple_spread.yaml")
    assert run.preset_for("mappo", "simple_tag") is None


# ----------------------------------------------------------------------------- the documented grids
def documented_launches():
    """The `python run.py ...` launch commands in README.md and docs/how-to.md (not plot/evaluate/export)."""
    found = []
    for doc in ("README.md", os.path.join("docs", "how-to.md")):
        with open(os.path.join(REPO, doc)) as f:
            for line in f:
                if not line.startswith("python run.py "):
                    continue
                argv = shlex.split(line.strip(), comments=True)
                if argv[2:3] not in (["plot"], ["evaluate"], ["export"], ["crossplay"]):  # these read runs
                    found.append((doc, argv[2:]))
    return found


@pytest.mark.parametrize("doc,argv", documented_launches(), ids=[" ".join(a) for _, a in documented_launches()])
def test_documented_grids_plan(doc, argv, monkeypatch, capsys):
    """Every launch the docs show is planned in full (presets, sweep values, every run's Args
    and validate()) by --dry-run, which runs nothing."""
    monkeypatch.chdir(REPO)
    if argv[:1] == ["tune"]:
        pytest.importorskip("optuna", reason="run.py tune needs Optuna: pip install -e '.[tune]'")
    import common.cli

    monkeypatch.setattr(common.cli, "require_wandb", lambda: None)  # --track plans where W&B is not installed
    cut = argv.index("--") if "--" in argv else len(argv)
    if argv[:1] == ["league"]:  # a league checks its sides and every learner's flags, and writes nothing
        folder = os.path.join("runs", "league", argv[argv.index("--env") + 1].replace(":", "-"))
        existed = os.path.exists(folder)
        assert run.main([*argv[:cut], "--dry-run", *argv[cut:]]) == {}
        assert "phase 1 would train" in capsys.readouterr().out and os.path.exists(folder) == existed
        return
    assert run.main([*argv[:cut], "--dry-run", *argv[cut:]]) == []
    assert " runs: " in capsys.readouterr().out


# ----------------------------------------------------------------------------- the speed issue's wall-clock benchmark
def test_wallclock_benchmark_times_a_run_and_reads_it_back(tmp_path):
    """benchmarks/wallclock_mappo.py trains the preset as its own process (here shrunk by --flags),
    then reports SPS and the wall-clock to the first evaluation at or above the target; --from-runs
    reads the same figures back, and an unreachable target is reported as never reached."""
    import sys

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import wallclock_mappo

    flags = ("--total-timesteps 1600 --num-envs 16 --num-steps 25 --eval-every 800 --eval-episodes 2 "
             "--eval-num-envs 2 --num-minibatches 2 --torch-threads 1")
    out = tmp_path / "wallclock.json"
    runs = wallclock_mappo.main(["--seeds", "1", "--flags", flags, "--run-dir", str(tmp_path / "runs"),
                                 "--target", "-1000", "--json", str(out)])
    (run,) = runs
    assert run["global_step"] == 1600 and run["sps"] > 0 and run["steps_to_target"] == 800
    assert 0 < run["seconds_to_target"] < run["wall_time_s"] + 60  # from the process start: imports count too
    saved = json.loads(out.read_text())
    assert saved["time_met"] is True and saved["sps_met"] is False  # a 1,600-step run is nowhere near 40k SPS
    (again,) = wallclock_mappo.main(["--from-runs", str(tmp_path / "runs"), "--target", "0"])
    assert again["steps_to_target"] is None and again["sps"] == run["sps"]


# ----------------------------------------------------------------------------- the speed issue's profile
def test_profile_splits_an_iteration_into_its_parts():
    """benchmarks/profile_iteration.py times MAPPO's parts by wrapping the calls they are made of: each part
    that a run certainly does gets time, the parts add up to the whole, and the wrappers are gone after."""
    import sys

    import torch

    import nets

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import profile_iteration

    forward, backward = nets.Actor.forward, torch.Tensor.backward
    result = profile_iteration.main(["--flags", "--env torch:simple_spread --num-envs 4 --num-steps 5 "
                                     "--total-timesteps 40 --eval-episodes 1 --eval-num-envs 1 --hidden-sizes 8 --no-cuda"])
    ms = result["ms_per_iteration"]
    assert result["iterations"] == 2
    for part in ("env step", "actor forward, rollout", "critic forward, rollout", "storage", "GAE",
                 "actor forward, update", "backward", "optimiser"):
        assert ms[part] > 0, part
    assert sum(ms.values()) * result["iterations"] / 1000 == pytest.approx(result["total_s"])
    assert nets.Actor.forward is forward and torch.Tensor.backward is backward


# ----------------------------------------------------------------------------- the GPU check (CPU fallback here)
def test_cuda_check_runs_each_case_and_reports_refusals(tmp_path):
    """benchmarks/cuda_check.py's cases for one file, run where there is no GPU (--cuda falls back to the
    CPU): each case ends ok or refused, never failed; the first working run is resumed, evaluated on
    the CPU and trained again from the same seed. ITRPO's recurrent case is the one CUDA once broke."""
    import sys

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import cuda_check

    rows = {r["case"]: r for r in cuda_check.check_algo("itrpo", str(tmp_path))}
    assert {r["status"] for r in rows.values()} == {"ok"}, {c: r["detail"] for c, r in rows.items()}
    assert "torch:simple_spread recurrent gru" in rows and "classic:tictactoe" in rows
    first = "torch:simple_spread discrete"
    assert {f"{first}: resume on cuda", f"{first}: evaluate on cpu"} <= set(rows)
    assert rows[f"{first}: same seed, same losses"]["deterministic"] is True
    refused = {r["case"]: r for r in cuda_check.check_algo("qmix", str(tmp_path))}
    assert refused["torch:simple_spread continuous"]["status"] == "refused"
    assert "discrete" in refused["torch:simple_spread continuous"]["detail"]


# ----------------------------------------------------------------------------- LBF bars, each within its own budget
def test_lbf_report_judges_each_algorithm_within_its_own_budget(tmp_path):
    """benchmarks/learning_lbf.py: QMIX's bar counts within 2M env steps (a later point is cut off)
    and MAPPO's within 5M; a run shorter than its budget that already passed the bar meets it, one
    that has not is still open, not failed."""
    import sys

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import learning_lbf

    def record(label, seed, curve):
        return dict(label=label, seed=seed, args={}, curve=curve, train_curve=[(50_000, 0.5)], final_greedy=None)

    records = [record("qmix", s, [(500_000, 0.7 + 0.05 * s), (1_000_000, 0.8), (3_000_000, 1.0)]) for s in (1, 2, 3)]
    records += [record("mappo", s, [(1_000_000, 0.5)]) for s in (1, 2)]
    out = tmp_path / "lbf.json"
    rows = {r["algo"]: r for r in learning_lbf.report(records, str(out))}
    qmix, mappo = rows["qmix,greedy"], rows["mappo,greedy"]
    assert qmix["budget"] == 2_000_000 and qmix["steps_reached"] == 1_000_000  # the 3M point is past the budget
    assert qmix["best_mean_eval"] == pytest.approx(0.8) and qmix["met"] is True
    assert qmix["best_per_seed"] == pytest.approx([0.8, 0.8, 0.85])
    assert mappo["budget"] == 5_000_000 and mappo["met"] is None  # 1M of 5M, below the bar so far
    assert json.loads(out.read_text())["rows"][0]["algo"] in rows


# ----------------------------------------------------------------------------- bars of the trust-region family
def test_ha_benchmark_trains_seed_by_seed_and_skips_finished_runs(tmp_path, capsys):
    """benchmarks/learning_ha.py goes through run.py's jobs: every algorithm's seed 1 before any
    seed 2, a second launch reads the finished runs back instead of training them again, and a run
    shorter than the 5M budget is not judged against its bar."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import learning_ha

    opts = SimpleNamespace(algo=["happo", "haa2c"], task=["simple_spread"], torch=True, seeds=2,
                           total_timesteps=320, workers=1, run_dir=str(tmp_path))
    first = learning_ha.train(opts)
    assert [(s["algo"], s["seed"]) for s in first] == [("happo", 1), ("haa2c", 1), ("happo", 2), ("haa2c", 2)]
    assert "4 runs: 4 to train or resume, 0 finished" in capsys.readouterr().out
    again = learning_ha.train(opts)
    assert "4 runs: 0 to train or resume, 4 finished" in capsys.readouterr().out
    assert [s["run_dir"] for s in again] == [s["run_dir"] for s in first]
    by_key = {}
    for s in again:
        by_key.setdefault((learning_ha.task_of(s["env"]), s["algo"]), []).append(s)
    rows = learning_ha.report(by_key, learning_ha.BUDGET)
    assert {r["algo"]: r["met"] for r in rows} == {"happo": "n/a", "haa2c": "n/a"}


def test_spread_behaviour_reads_a_trained_run_and_refuses_other_envs(tmp_path):
    """benchmarks/spread_behaviour.py: per-step team rewards that add up to the episode return,
    a coverage step within the episode, non-negative collisions; a run on another env is refused."""
    import sys

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import spread_behaviour

    spread = mappo.main(make_args(mappo.Args, env="torch:simple_spread", total_timesteps=100, num_envs=2, num_steps=25,
                                  eval_every=0, eval_episodes=1, eval_num_envs=1, cuda=False, run_dir=str(tmp_path)))
    (row,) = spread_behaviour.main([spread["run_dir"], "--episodes", "8", "--json", str(tmp_path / "b.json")])
    assert row["episodes"] == 8 and len(row["team_reward_per_step"]) == 25
    assert row["return"] == pytest.approx(sum(row["team_reward_per_step"]), abs=1e-3)
    assert 1 <= row["covered_by_step"] <= 25 and 0 <= row["never_covered"] <= 1 and row["colliding_pairs"] >= 0
    assert len(row["final_gaps"]) == 3 and row["final_gaps"] == sorted(row["final_gaps"]) and row["final_gaps"][0] >= 0
    assert json.loads((tmp_path / "b.json").read_text())[0]["algo"] == "mappo"
    iql = importlib.import_module("algos.iql")  # value-based: greedy Q-agents that feed back their last action
    q_run = iql.main(make_args(iql.Args, env="torch:simple_spread", total_timesteps=50, num_envs=2, batch_size=2,
                               eval_every=0, eval_episodes=1, eval_num_envs=1, cuda=False, run_dir=str(tmp_path / "q")))
    (q_row,) = spread_behaviour.main([q_run["run_dir"], "--episodes", "4"])
    assert q_row["algo"] == "iql" and q_row["return"] == pytest.approx(sum(q_row["team_reward_per_step"]), abs=1e-3)
    other = mappo.main(make_args(mappo.Args, env="matrix_game", total_timesteps=20, num_envs=2, num_steps=5,
                                 eval_every=0, eval_episodes=1, eval_num_envs=1, cuda=False, run_dir=str(tmp_path / "m")))
    with pytest.raises(SystemExit, match="simple_spread"):
        spread_behaviour.main([other["run_dir"]])
