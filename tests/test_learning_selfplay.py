"""benchmarks/learning_selfplay.py end to end on a tiny tic-tac-toe budget: plain self-play (one run in both
seats) and --league (one run per seat, from `run.py league`), each scored in its seats against every scripted
player; a league of a bad size or a tag that cannot name files is refused with one line, and a result file
made with other flags is not taken as done; an interrupted run is resumed from its own folder."""
import argparse
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--game", "tictactoe", "--total-timesteps", "2048", "--games", "10", "--phase-games", "10", "--seeds", "1"]
FLAGS = ["--", "--num-envs", "8", "--num-steps", "16", "--eval-every", "0"]


def run(tmp_path, *argv):
    return subprocess.run([sys.executable, "benchmarks/learning_selfplay.py", *TINY, "--run-dir", str(tmp_path / "runs"),
                           "--out-dir", str(tmp_path / "out"), *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("league", [0, 2])
def test_selfplay_and_league_are_scored_in_each_seat(tmp_path, league):
    out = run(tmp_path, *(["--league", str(league)] if league else []), *FLAGS)
    assert out.returncode == 0, out.stderr[-2000:]
    name = f"tictactoe_ippo_2k{'_league2' if league else ''}_seed1.json"
    result = json.load(open(tmp_path / "out" / name))
    runs = result["run"] if league else [result["run"]] * 2
    assert len(set(runs)) == (2 if league else 1) and all(os.path.isdir(r) for r in runs)
    if league:  # the last run of each seat: phase 1 trained player_1, phase 2 player_2
        assert "phase_01" in runs[0] and "phase_02" in runs[1] and result["league"] == 2
        phases = result["phases"]  # each phase's learner in its own seat against the perfect player
        assert [(p["phase"], p["side"], p["run"]) for p in phases] == [(1, "player_1", runs[0]),
                                                                       (2, "player_2", runs[1])]
        assert phases[1]["opponent"] in ("random", "ippo@1")
        assert all(abs(sum(p["perfect_varied"].values()) - 1) < 1e-9 for p in phases)
    assert set(result["results"]) == {f"{o}/{s}" for o in ("random", "perfect", "perfect_varied")
                                      for s in ("player_1", "player_2")}
    for rates in result["results"].values():
        assert abs(rates["win"] + rates["draw"] + rates["loss"] - 1) < 1e-9
    assert result["train_seconds"] > 0 and result["sps"] > 0
    if not league:  # 7 games over 3 copies (3, 2 and 2 of them) are all scored
        sys.path.insert(0, REPO)
        from benchmarks.game_opponents import GAMES
        from benchmarks.learning_selfplay import play
        rates = play(runs[0], "tictactoe", 0, GAMES["tictactoe"][1]["random"], 7, 0, copies=3)
        assert all(abs(7 * v - round(7 * v)) < 1e-9 for v in rates.values()) and abs(sum(rates.values()) - 1) < 1e-9
        other = run(tmp_path, *FLAGS, "--gamma", "0.9")  # the same result file, other settings: refused
        assert other.returncode == 1 and "Traceback" not in other.stderr and "--tag" in other.stderr
        assert json.load(open(tmp_path / "out" / name)) == result


def test_a_tag_keeps_other_settings_apart():
    sys.path.insert(0, REPO)
    from benchmarks.learning_selfplay import variant_suffix
    opts = argparse.Namespace(torch_port=True, league=20, league_mix=4, league_scripted=[], tag="cnn")
    assert variant_suffix(opts) == "_torch_league20mix4_cnn"
    opts.league_scripted = ["win_or_block"]
    assert variant_suffix(opts) == "_torch_league20mix4_pool-win_or_block_cnn"
    assert variant_suffix(argparse.Namespace(torch_port=False, league=0, league_mix=1, league_scripted=[],
                                             tag="")) == ""


def test_an_interrupted_run_is_resumed_from_its_folder(tmp_path, monkeypatch):
    sys.path.insert(0, REPO)
    import benchmarks.learning_selfplay as selfplay
    opts = argparse.Namespace(run_dir=str(tmp_path), game="tictactoe", algo="ippo", torch_port=True, league=0,
                              league_mix=1, league_scripted=[], tag="", total_timesteps=2048, torch_threads=1)
    folder = os.path.join(selfplay.seed_folder(opts, 1), "ippo__torch-tictactoe__1__1")
    os.makedirs(folder)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"status": "interrupted"}, f)
    commands = []
    monkeypatch.setattr(selfplay.subprocess, "run", lambda command, **kw: commands.append(command))
    assert selfplay.train(opts, 1, []) == folder
    assert commands[0][-2:] == ["--resume", folder]


def test_bad_options_are_refused_with_one_line(tmp_path):
    out = run(tmp_path, "--league", "-1")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "--league -1" in out.stderr
    out = run(tmp_path, "--tag", "a/b")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "--tag 'a/b'" in out.stderr


def test_league_scripted_puts_the_scripted_player_in_both_pools(tmp_path, monkeypatch):
    sys.path.insert(0, REPO)
    import benchmarks.learning_selfplay as selfplay
    opts = argparse.Namespace(run_dir=str(tmp_path), game="connect_four", algo="ippo", torch_port=True, league=4,
                              league_mix=2, league_scripted=["win_or_block"], league_opponents="uniform", tag="",
                              total_timesteps=4096, torch_threads=1)
    folder = selfplay.seed_folder(opts, 1)
    assert folder.endswith(os.path.join("connect_four_torch_league4mix2_pool-win_or_block", "ippo", "seed1"))
    os.makedirs(folder)
    with open(os.path.join(folder, "league.json"), "w") as f:
        json.dump({"last": {"player_0/ippo": "a", "player_1/ippo": "b"}}, f)
    commands = []
    monkeypatch.setattr(selfplay.subprocess, "run", lambda command, **kw: commands.append(command))
    assert selfplay.train_league(opts, 1, []) == ["a", "b"]
    pool = commands[0][commands[0].index("--pool") + 1:][:2]
    assert pool == ["player_0=scripted:win_or_block", "player_1=scripted:win_or_block"]
    monkeypatch.undo()
    out = run(tmp_path, "--league-scripted", "win_or_block")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "give --league PHASES" in out.stderr
