"""What a trained policy says and does on the MPE communication tasks: does the speaker's message
depend on the goal, and does the listener's movement depend on the message (greedy play, mpe2 or
the torch port).

    python benchmarks/comm_behaviour.py runs/comm_probe/<run> --episodes 600
    python benchmarks/comm_behaviour.py runs/comm_probe --json behaviour.json --plot docs/img/comm_reference.png

The two tasks (envs/torch_mpe.py, mpe2's scenarios):
- simple_speaker_listener: the speaker (agent 0, cannot move) sees the goal landmark's colour and
  says one of 3 words (its action); the listener (agent 1, silent) hears the word and moves.
- simple_reference: each of the 2 agents sees the colour of the landmark the OTHER agent must reach
  and both move and say one of 10 words at once (action a: a % 5 moves, a // 5 says); agent i is
  the speaker of the goal of agent 1 - i, who is its listener.
Goals are read from the speaker's observation (the colour, its largest channel names the landmark),
distances from the listener's (landmarks relative to it), words from the speaker's actions, so the
script reads both backends alike.

For every run folder (or every run with a checkpoint under a folder) it loads the actor from
checkpoint.pt (`load_checkpoint`, weights_only=True, and the file's own `acting_policy`, as
benchmarks/spread_behaviour.py does), plays --episodes greedy episodes, and prints per speaker /
listener pair:
- I(goal; word): the mutual information (bits) between the goal landmark and the speaker's word,
  pooled over every step of every episode (at most log2(3) = 1.58 bits: the word names the goal);
  H(word), the entropy of the words used (0: always the same word), and the same two for the first
  word of an episode; and the policy's own H(word | obs), the entropy of the word it would sample
  (as in training; the words above are its greedy choice), averaged over steps; on simple_reference
  also I(own move; word), how much the greedy word goes with the speaker's own move (one action
  chooses both);
- accuracy: the share of episodes whose listener ends nearest its goal landmark (chance 1/3), the
  listener's final distance to its goal and I(word; landmark reached);
- deaf accuracy / deaf distance: the same episodes played again with every heard message shuffled
  across episodes in the listeners' observations (a word from another episode, same distribution):
  if the listener uses the message, its accuracy falls towards 1/3 here; if it does not, nothing
  changes.
With --plot, it draws P(word | goal) of every speaker of the first run as a heat map.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.spread_behaviour import load_run, runs_with_checkpoints  # noqa: E402  (checkpoint + saved Args, loaded once there)
from envs import make_env, parse_env_kwargs  # noqa: E402

MOVE_DIM = 5  # mpe2 discrete movement: no-op, left, right, down, up
N_LANDMARKS = 3
# per task: (speaker, listener) pairs, where the goal colour sits in the speaker's obs, where the
# heard message sits in the listener's obs, how many words; landmarks relative to the listener at obs[2:8]
TASKS = {
    "simple_speaker_listener": {"pairs": [(0, 1)], "goal_cols": (0, 3), "heard_cols": (8, 11), "words": 3,
                                "speaker_moves": False},
    "simple_reference": {"pairs": [(0, 1), (1, 0)], "goal_cols": (8, 11), "heard_cols": (11, 21), "words": 10,
                         "speaker_moves": True},
}


def task_of(env_name: str) -> str:
    """'torch:simple_reference' / 'simple_reference_v3' -> 'simple_reference'; other envs fail."""
    name = env_name.split(":")[-1].split("_v")[0]
    if name not in TASKS:
        raise SystemExit(f"error: this script reads {' and '.join(TASKS)} (mpe2 or torch:), not {env_name}")
    return name


def entropy_bits(x: np.ndarray) -> float:
    """Plug-in entropy (bits) of the integer samples x."""
    p = np.bincount(np.asarray(x).ravel()) / np.asarray(x).size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def mutual_information_bits(x: np.ndarray, y: np.ndarray) -> float:
    """Plug-in mutual information I(X; Y) = H(X) + H(Y) - H(X, Y) (bits) of paired integer samples."""
    x, y = np.asarray(x).ravel(), np.asarray(y).ravel()
    joint = x * (int(y.max()) + 1) + y  # one integer per (x, y) pair
    return max(0.0, entropy_bits(x) + entropy_bits(y) - entropy_bits(joint))


def conditional_table(goal: np.ndarray, word: np.ndarray, n_goals: int, n_words: int) -> np.ndarray:
    """P(word | goal), (n_goals, n_words), from paired samples (rows of unseen goals stay zero)."""
    counts = np.zeros((n_goals, n_words))
    np.add.at(counts, (np.asarray(goal).ravel(), np.asarray(word).ravel()), 1)
    return counts / np.maximum(counts.sum(1, keepdims=True), 1)


def play(module, saved, ckpt, episodes: int, seed: int, task: dict, deaf: bool) -> dict:
    """One greedy episode in each of `episodes` env copies; goals (E, pairs), words (E, T, pairs),
    the listeners' landmark distances after the last step (E, pairs, L) and the episode returns (E,).
    deaf: every listener's heard message is replaced by another episode's (a fixed permutation of copies)."""
    device = torch.device("cpu")
    env = make_env(saved.env, episodes, seed, parse_env_kwargs(saved.env_kwargs), device=device)
    if not env.discrete:
        raise SystemExit("error: the words are read from discrete actions; this run acts in a continuous box")
    actor = module.acting_policy(saved, env, ckpt, device)  # the actor, or value-based files' Q-agents (greedy)
    E, N = env.num_envs, env.n_agents
    speakers, listeners = [s for s, _ in task["pairs"]], [h for _, h in task["pairs"]]
    g0, g1 = task["goal_cols"]
    h0, h1 = task["heard_cols"]
    shuffle = torch.as_tensor(np.random.default_rng(seed).permutation(E))
    obs, _, mask = env.reset()
    goals = np.asarray(obs, dtype=np.float64)[:, speakers, g0:g1].argmax(-1)  # (E, pairs) goal landmark index
    state, starts = actor.initial_state(E, device), torch.ones(1, E, N)
    words, moves, policy_entropy, returns = [], [], [], np.zeros(E)
    while True:
        seen = torch.as_tensor(obs, dtype=torch.float32).clone()  # (E, N, obs_dim)
        if deaf:
            seen[:, listeners, h0:h1] = seen[shuffle][:, listeners, h0:h1]
        with torch.no_grad():
            dist, state = actor(seen[None], state, starts, None if mask is None else torch.as_tensor(mask)[None])
            action = dist.mode()[0]  # (E, N)
            if hasattr(actor, "remember"):  # Q-agents feed their last action back in
                state = actor.remember(state, action)
        if hasattr(dist, "probs"):  # a policy (not Q-agents): how random its word is where it samples
            probs = dist.probs[0][:, speakers].double()  # (E, pairs, n_actions)
            if task["speaker_moves"]:
                probs = probs[..., :task["words"] * MOVE_DIM].reshape(E, len(speakers), task["words"], MOVE_DIM).sum(-1)
            p_word = probs[..., :task["words"]]  # (E, pairs, words)
            policy_entropy.append(-(p_word * torch.log2(p_word.clamp_min(1e-12))).sum(-1).numpy())
        said = np.asarray(action)[:, speakers]
        words.append(said // MOVE_DIM if task["speaker_moves"] else said)  # (E, pairs)
        moves.append(said % MOVE_DIM)  # (E, pairs) the speaker's own move (simple_reference; no-op otherwise)
        result = env.step(action)
        returns += np.asarray(result.reward, dtype=np.float64).sum(-1)  # R_pz3: summed over agents and steps
        last = np.asarray(result.final_obs, dtype=np.float64)
        obs, mask, starts = result.obs, result.action_mask, torch.zeros(1, E, N)
        if np.asarray(result.done).all():  # every copy plays one episode (both tasks run to the clock)
            break
    env.close()
    landmarks = last[:, listeners, 2:2 + 2 * N_LANDMARKS].reshape(E, len(listeners), N_LANDMARKS, 2)
    return {"goals": goals, "words": np.stack(words, 1), "moves": np.stack(moves, 1), "dist": np.linalg.norm(landmarks, axis=-1),
            "returns": returns, "policy_word_entropy": np.mean(policy_entropy, (0, 1)) if policy_entropy else None}


def pair_figures(goal: np.ndarray, words: np.ndarray, dist: np.ndarray, deaf_dist: np.ndarray, n_words: int) -> dict:
    """The figures of one speaker -> listener pair: goal (E,), words (E, T), listener's final landmark
    distances (E, L) as heard and deaf."""
    T = words.shape[1]
    reached, deaf_reached = dist.argmin(-1), deaf_dist.argmin(-1)  # (E,) the landmark the listener ends nearest
    to_goal = np.take_along_axis(dist, goal[:, None], 1)[:, 0]
    deaf_to_goal = np.take_along_axis(deaf_dist, goal[:, None], 1)[:, 0]
    return {"mi_goal_word": mutual_information_bits(np.repeat(goal, T), words),
            "word_entropy": entropy_bits(words),
            "mi_goal_first_word": mutual_information_bits(goal, words[:, 0]),
            "first_word_entropy": entropy_bits(words[:, 0]),
            "mi_word_reached": mutual_information_bits(words[:, -1], reached),
            "accuracy": float((reached == goal).mean()), "final_distance": float(to_goal.mean()),
            "deaf_accuracy": float((deaf_reached == goal).mean()), "deaf_final_distance": float(deaf_to_goal.mean()),
            "words_given_goal": conditional_table(np.repeat(goal, T), words, N_LANDMARKS, n_words).round(3).tolist()}


def behaviour(run_dir: str, episodes: int, seed: int) -> dict:
    """Greedy episodes of one run, heard and deaf, and the figures in the module docstring."""
    module, saved, algo, ckpt = load_run(run_dir)
    name = task_of(saved.env)
    task = TASKS[name]
    heard = play(module, saved, ckpt, episodes, seed, task, deaf=False)
    deaf = play(module, saved, ckpt, episodes, seed, task, deaf=True)  # same seed: the same worlds and goals
    pairs = []
    for p, (s, h) in enumerate(task["pairs"]):
        goal = heard["goals"][:, p]
        words = heard["words"][:, :, p]  # (E, T)
        sampled, moved = heard["policy_word_entropy"], heard["moves"][:, :, p]
        own_move = mutual_information_bits(moved, words) if task["speaker_moves"] else None
        pairs.append({"speaker": s, "listener": h, "policy_word_entropy": None if sampled is None else float(sampled[p]),
                      "mi_own_move_word": own_move,
                      **pair_figures(goal, words, heard["dist"][:, p], deaf["dist"][:, p],
                                                                task["words"])})
    return {"run": run_dir, "algo": algo, "env": saved.env, "global_step": int(ckpt["global_step"]),
            "episodes": episodes, "return": float(heard["returns"].mean()), "deaf_return": float(deaf["returns"].mean()),
            "words": task["words"], "pairs": pairs}


def plot(row: dict, path: str) -> None:
    """P(word | goal) of every speaker of one run, as heat maps side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pairs = row["pairs"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.4 * len(pairs) + 1, 2.8), squeeze=False)
    for i, (ax, pair) in enumerate(zip(axes[0], pairs)):
        im = ax.imshow(np.array(pair["words_given_goal"]), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(row["words"]))
        ax.set_yticks(range(N_LANDMARKS), [f"goal: landmark {k}" for k in range(N_LANDMARKS)] if i == 0 else [])
        ax.set_xlabel("word")
        ax.set_title(f"agent {pair['speaker']} says (I = {pair['mi_goal_word']:.2f} bits)\nagent {pair['listener']} "
                     f"reaches the goal {pair['accuracy']:.0%}, deaf {pair['deaf_accuracy']:.0%}", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), label="P(word | goal)")
    fig.suptitle(f"{row['algo']} on {row['env']}, step {row['global_step']:,}, return {row['return']:.1f}",
                 fontsize=9, y=1.12)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders, or folders holding runs")
    parser.add_argument("--episodes", type=int, default=600, help="greedy episodes per run (one per env copy)")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the env copies and of the deaf shuffle")
    parser.add_argument("--json", default=None, help="write the figures of every run to this file")
    parser.add_argument("--plot", default=None, help="draw P(word | goal) of the first run to this image")
    opts = parser.parse_args(argv)
    paths = runs_with_checkpoints(opts.runs)
    rows = [behaviour(p, opts.episodes, opts.seed) for p in paths]
    for r in rows:
        print(f"{r['algo']:<6} {os.path.basename(r['run'])[:44]:<44} step {r['global_step']:>10,} return "
              f"{r['return']:7.2f} (deaf {r['deaf_return']:7.2f})")
        for p in r["pairs"]:
            parts = [f"I(goal;word) {p['mi_goal_word']:.2f} bits H(word) {p['word_entropy']:.2f}",
                     f"first word I {p['mi_goal_first_word']:.2f} H {p['first_word_entropy']:.2f}"]
            if p["mi_own_move_word"] is not None:
                parts.append(f"I(own move;word) {p['mi_own_move_word']:.2f}")
            if p["policy_word_entropy"] is not None:
                parts.append(f"policy's H(word|obs) {p['policy_word_entropy']:.2f}")
            parts += [f"accuracy {p['accuracy']:.0%} (deaf {p['deaf_accuracy']:.0%}, chance 33%)",
                      f"final distance {p['final_distance']:.2f} (deaf {p['deaf_final_distance']:.2f})",
                      f"I(word;reached) {p['mi_word_reached']:.2f}"]
            print(f"    speaker {p['speaker']} -> listener {p['listener']}: " + " | ".join(parts))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=2)
    if opts.plot:
        plot(rows[0], opts.plot)
    return rows


if __name__ == "__main__":
    main()
