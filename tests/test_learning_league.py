"""benchmarks/learning_league.py's summary: each learner's newest snapshot is the one judged, and
"beats random" is read from the cross-play against random (--random-games episodes per pairing)
when one is given, not from the league's smaller table."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.learning_league import last_snapshots, summarise  # noqa: E402


def league():
    entry = lambda name, phase: {"name": name, "path": f"runs/{name}", "phase": phase}  # noqa: E731
    return {"settings": {}, "pool": {"adversary": [entry("random", 0), entry("mappo@1", 1), entry("mappo@3", 3)],
                                     "agent": [entry("random", 0), entry("qmix@2", 2)]}}


def table(games, prey_margin, rng):
    """Cells of a cross-play: predators' return and prey's return per episode, random prey at -15."""
    cells = []
    for a in ("random", "mappo@1", "mappo@3"):
        for b in ("random", "qmix@2"):
            prey = -15 + (prey_margin if b != "random" else 0) + rng.normal(0, 8, games)
            cells.append({"side_0": a, "side_1": b, "returns": np.stack([-prey, prey], 1).tolist()})
    elo = {f"{name}/{side}": (1000.0, 990.0, 1010.0) for side, entries in league()["pool"].items()
           for name in (e["name"] for e in entries)}
    return {"sides": ["adversary", "agent"], "cells": cells, "elo": elo}


def test_the_newest_snapshot_is_judged_on_the_larger_match_against_random():
    rng = np.random.default_rng(0)
    assert last_snapshots(league()) == {("adversary", "mappo"): ("mappo@3", "runs/mappo@3"),
                                        ("agent", "qmix"): ("qmix@2", "runs/qmix@2")}
    small = table(10, 0.0, rng)  # the league's table: no margin
    large = table(1000, 3.0, rng)  # a margin of 3 that 1,000 episodes resolve
    alone = {(r["side"], r["algo"]): r for r in summarise(small, league(), 0)["learners"]}
    judged = summarise(small, league(), 0, large)
    learners = {(r["side"], r["algo"]): r for r in judged["learners"]}
    assert learners[("adversary", "mappo")]["snapshot"] == "mappo@3"
    assert judged["games_against_random"] == 1000
    prey = learners[("agent", "qmix")]
    assert prey["beats_random"] and 2.0 < prey["difference"] < 4.0 and prey["low"] > 0
    assert not alone[("agent", "qmix")]["beats_random"]
