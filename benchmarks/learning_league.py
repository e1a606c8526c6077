"""Leagues on an env of two sides (issue 28's bars): `run.py league` per seed, then what its
cross-play table says about every learner's last snapshot.

    python benchmarks/learning_league.py --name tag3x3 --env torch:simple_tag --side adversary=mappo,maddpg,qmix \
        --side agent=mappo,maddpg,qmix --phases 6 --phase-steps 500000 --seeds 1 2 3 -- --env-kwargs continuous_actions=false
    python benchmarks/learning_league.py --name tag3x3 --report

For every learner's last snapshot: its side's mean return against the *random* player of the other
side, next to what random players of its own side get there (the random-against-random pairing),
with a 95% bootstrap interval of the difference, from a cross-play of the last snapshots and random
with --random-games episodes per pairing (1,000: a prey's margin over random prey is a few points
on returns near -15, which 100 episodes cannot resolve). It "beats random" when the whole interval
is above 0. Elo ratings come from the league's own cross-play table (every snapshot of one side
against every one of the other, --games episodes each). Bar (torch:simple_tag): every trained
predator beats random prey, and every trained prey beats random predators. Each finished seed's
summary is written to --out-dir at once (`<name>_seed<k>.json`), and a later call skips the seeds
there.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from common.groups import RANDOM  # noqa: E402
from common.league import crossplay  # noqa: E402
from common.run_utils import write_json_atomic  # noqa: E402


def difference_interval(a: np.ndarray, b: np.ndarray, rng, samples: int = 2000) -> tuple:
    """Mean of a minus mean of b, and its 95% bootstrap interval (each resampled on its own)."""
    diffs = [rng.choice(a, len(a)).mean() - rng.choice(b, len(b)).mean() for _ in range(samples)]
    return float(a.mean() - b.mean()), *map(float, np.percentile(diffs, [2.5, 97.5]))


def last_snapshots(league: dict) -> dict:
    """{(side, algo): (snapshot name, run path)} of every learner's newest snapshot."""
    last = {}
    for side, entries in league["pool"].items():
        for entry in entries[1:]:  # after random; pools grow in phase order
            last[(side, entry["name"].rpartition("@")[0])] = (entry["name"], entry["path"])
    return last


def summarise(table: dict, league: dict, seed: int, versus: Optional[dict] = None) -> dict:
    """Every learner's last snapshot against random (from `versus`, a cross-play of the last
    snapshots and random, else from the league's table), and the last snapshots head to head."""
    sides = table["sides"]
    cells = {(c["side_0"], c["side_1"]): np.asarray(c["returns"]) for c in (versus or table)["cells"]}
    rng = np.random.default_rng(seed)
    baseline = cells[("random", "random")]
    last = {key: name for key, (name, _) in last_snapshots(league).items()}
    learners = []
    for (side, algo), name in sorted(last.items()):
        column = sides.index(side)
        against = cells[(name, "random") if column == 0 else ("random", name)][:, column]
        diff, low, high = difference_interval(against, baseline[:, column], rng)
        learners.append({"side": side, "algo": algo, "snapshot": name, "return_vs_random": float(against.mean()),
                         "random_vs_random": float(baseline[:, column].mean()), "difference": diff, "low": low,
                         "high": high, "beats_random": low > 0, "elo": table["elo"][f"{name}/{side}"]})
    finals = [[n for (s, _), n in sorted(last.items()) if s == side] for side in sides]
    head_to_head = [{"side_0": a, "side_1": b, "returns": cells[(a, b)].mean(0).tolist()}
                    for a in finals[0] for b in finals[1]]
    return {"seed": seed, "sides": sides, "learners": learners, "head_to_head": head_to_head,
            "settings": league["settings"], "elo": table["elo"], "games_against_random": len(baseline)}


def report(opts) -> list:
    rows = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(opts.out_dir, f"{opts.name}_seed*.json")))]
    if not rows:
        print("no results yet")
        return rows
    print(f"{opts.name}: {len(rows)} seed(s); each learner's last snapshot against the other side's random player")
    print("| side | learner | " + " | ".join(f"seed {r['seed']}: return (random's) [95% interval of the difference]"
                                           for r in rows) + " | beats random in every seed |")
    print("|---|---|" + "---|" * len(rows) + "---|")
    for k, learner in enumerate(rows[0]["learners"]):
        cells = [r["learners"][k] for r in rows]
        print(f"| {learner['side']} | {learner['algo']} | " + " | ".join(
            f"{c['return_vs_random']:.1f} ({c['random_vs_random']:.1f}) [{c['low']:+.1f}, {c['high']:+.1f}]"
            for c in cells) + f" | {'yes' if all(c['beats_random'] for c in cells) else 'no'} |")
    for r in rows:
        print(f"seed {r['seed']} head to head (last snapshots; mean returns {r['sides'][0]} / {r['sides'][1]}): "
              + "; ".join(f"{h['side_0']} v {h['side_1']}: {h['returns'][0]:.1f} / {h['returns'][1]:.1f}"
                          for h in r["head_to_head"]))
    return rows


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--"):] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True, help="the benchmark's name: its results are <name>_seed<k>.json")
    parser.add_argument("--env", default="torch:simple_tag")
    parser.add_argument("--side", nargs="+", action="extend", default=[])
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--phase-steps", type=int, default=500_000)
    parser.add_argument("--opponents", default="uniform")
    parser.add_argument("--mix", type=int, default=1, help="opponents each learner faces at once (run.py league --mix)")
    parser.add_argument("--games", type=int, default=200, help="episodes per pairing of the league's table")
    parser.add_argument("--random-games", type=int, default=1000, help="episodes per pairing of the last snapshots "
                        "and random")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--algo-flags", nargs="+", action="extend", default=[])
    parser.add_argument("--run-dir", default="runs/league_bench")
    parser.add_argument("--out-dir", default="benchmarks/results/league")
    parser.add_argument("--report", action="store_true")
    opts = parser.parse_args(argv)
    if not opts.report:
        os.makedirs(opts.out_dir, exist_ok=True)
        for seed in opts.seeds:
            path = os.path.join(opts.out_dir, f"{opts.name}_seed{seed}.json")
            if os.path.exists(path):
                continue
            folder = os.path.join(opts.run_dir, opts.name, f"seed{seed}")
            command = [sys.executable, "run.py", "league", "--env", opts.env, "--side", *opts.side, "--phases",
                       str(opts.phases), "--phase-steps", str(opts.phase_steps), "--opponents", opts.opponents,
                       "--mix", str(opts.mix), "--games", str(opts.games), "--seed", str(seed),
                       "--workers", str(opts.workers),
                       "--league-dir", folder, *(["--algo-flags", *opts.algo_flags] if opts.algo_flags else []),
                       *extra]
            print(" ".join(command), flush=True)
            subprocess.run(command, check=True, cwd=REPO)
            table = json.load(open(os.path.join(folder, "crossplay", "crossplay.json")))
            league = json.load(open(os.path.join(folder, "league.json")))
            members = {name: run for name, run in last_snapshots(league).values()}
            versus = crossplay({**members, "random": RANDOM}, opts.random_games, seed)
            write_json_atomic(path, {**summarise(table, league, seed, versus), "command": command})
    return report(opts)


if __name__ == "__main__":
    main()
