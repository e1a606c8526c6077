"""Copies kept honest: every function copied between algorithm files is the same as its reference copy.

STYLE.md lets short pure functions be copied so that each algos/<x>.py reads alone, on the condition that a
test ties the copies together. This is that test. It parses every algos/*.py (found by glob, so a new file is
covered without editing this test), collects every top-level function or class that stands in more than one
file (except the per-file interface in PER_FILE, which every file writes its own way), and checks:

- every shared name has a REFERENCE entry: the file holding the reference copy;
- every copy is the reference's text, to the byte (ast.get_source_segment), or, for the few copies listed in
  SAME_BEHAVIOUR, the same results on worked inputs (each says why its text differs);
- sibling files meant to differ in a few parts only (vdn/qmix/qplex, itrpo/matrpo, ia2c/maa2c, ippo/mappo)
  differ in those parts only (SIBLINGS), so a fix made in one cannot silently miss the other;
- no run of 40 or more identical lines is shared by two files without a test that ties the copies: outside
  the copied functions, each such run is listed in SHARED_BLOCKS and must stay the same in both files.

Functions that compute different things have different names (e.g. explore, explore_continuous,
explore_by_sampling), so one name means one computation across the files.
"""
import ast
import difflib
import re
from pathlib import Path

import pytest
import torch

from algos import maa2c, mappo

ALGOS_DIR = Path(__file__).resolve().parents[1] / "algos"

# Every algorithm file defines these itself: they are where the methods differ by design.
PER_FILE = {"Args", "validate", "build_networks", "checkpoint_payload", "acting_policy", "main"}

# name -> the file (stem) holding the reference copy; every other copy must be the same text.
REFERENCE = {
    "agent_forward": "happo",
    "agent_ratio": "happo",
    "as_param_dict": "matrpo",
    "compute_gae": "mappo",
    "conjugate_gradient": "matrpo",
    "critic_inputs": "maa2c",
    "episode_ends": "qmix",
    "epsilon_greedy": "iql",
    "explore": "maddpg",
    "explore_by_sampling": "masac",
    "explore_continuous": "matd3",
    "fisher_vector_product": "matrpo",
    "flat_params": "matrpo",
    "group_mean": "maa2c",
    "gumbel_softmax_st": "maddpg",
    "joint_action_critic_inputs": "maddpg",
    "learning_rate_at": "mappo",
    "learning_team_flags": "hasac",
    "loaded_group_actions": "hasac",
    "local_critic_inputs": "ippo",
    "masked_mean": "mappo",
    "mixed_team_value": "vdppo",
    "policy_kl": "matrpo",
    "sequential_actor_update": "hatd3",
    "set_mean": "matrpo",
    "set_rows": "matrpo",
    "smoothed_target_actions": "matd3",
    "soft_update": "qmix",
    "surrogate_and_kl": "matrpo",
    "td_lambda_targets": "qmix",
    "team_critic_inputs": "hasac",
    "team_flags": "vdppo",
    "team_mean": "happo",
    "team_value": "happo",
    "temperature_loss": "masac",
    "to_chunks": "mappo",
    "trpo_step": "matrpo",
    "with_agent_action": "hasac",
    "with_final_step": "qmix",
    "with_own_action": "maddpg",
}

# name -> (the files whose copy differs in text from the reference but must give the same results, why).
# The files listed share one text among themselves; test_same_behaviour_* below check it on worked inputs.
SAME_BEHAVIOUR = {
    "group_mean": ({"ippo", "mappo", "mat"},
                   "one matrix product instead of a masked mean per group: the same means, summed in another "
                   "order, so one text for both would change the last bits of these runs' numbers"),
    "critic_inputs": ({"mappo"},
                      "MAPPO adds the kind 'obs' (each agent's own observation, for its GNN critic); on the kinds "
                      "both accept ('state', 'concat_obs') the inputs are the same"),
}


def top_level(path: Path) -> dict:
    """name -> source text of every top-level function and class of one file."""
    src = path.read_text()
    return {node.name: ast.get_source_segment(src, node) for node in ast.parse(src).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def algorithm_files() -> dict:
    """file stem -> {name: source text}, for every algos/*.py."""
    return {p.stem: top_level(p) for p in sorted(ALGOS_DIR.glob("*.py")) if p.stem != "__init__"}


FILES = algorithm_files()
SHARED = {name: {stem: funcs[name] for stem, funcs in FILES.items() if name in funcs}
          for name in sorted({n for funcs in FILES.values() for n in funcs} - PER_FILE)}
SHARED = {name: copies for name, copies in SHARED.items() if len(copies) > 1}


def short_diff(a: str, b: str, a_name: str, b_name: str) -> str:
    return "\n".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(), a_name, b_name, lineterm=""))[:40])


def test_every_shared_name_has_a_reference():
    missing = {name: sorted(copies) for name, copies in SHARED.items() if name not in REFERENCE}
    assert not missing, (
        "these functions stand in more than one algorithm file but have no REFERENCE entry in tests/test_copies.py: "
        + "; ".join(f"{name}() in algos/{', algos/'.join(f + '.py' for f in files)}" for name, files in missing.items())
        + ". Add each to REFERENCE (name -> the file with the reference copy), or, if the copies compute different "
          "things, give them different names.")


def test_every_reference_is_still_shared_and_in_its_file():
    for name, ref in REFERENCE.items():
        assert name in SHARED, f"REFERENCE names {name}(), which no longer stands in two algorithm files: drop it"
        assert ref in SHARED[name], f"REFERENCE says algos/{ref}.py holds {name}(), but it does not"
    for name, (files, _) in SAME_BEHAVIOUR.items():
        assert REFERENCE[name] not in files and files <= set(SHARED[name]), name


@pytest.mark.parametrize("name", sorted(SHARED))
def test_copies_are_the_reference_text(name):
    ref = REFERENCE.get(name)
    if ref is None:
        pytest.skip("no reference: test_every_shared_name_has_a_reference fails for it")
    copies, reference = SHARED[name], SHARED[name][ref]
    variants, _ = SAME_BEHAVIOUR.get(name, (set(), ""))
    variant_text = copies[min(variants)] if variants else None
    for stem, text in copies.items():
        expected, expected_file = (variant_text, min(variants)) if stem in variants else (reference, ref)
        assert text == expected, (
            f"algos/{stem}.py: {name}() has drifted from the reference copy in algos/{expected_file}.py. Make the "
            f"two the same text (fix both if the fix was meant for both), or, if they now compute different "
            f"things, give this one a name that says what differs.\n"
            + short_diff(expected, text, f"algos/{expected_file}.py", f"algos/{stem}.py"))


# ----------------------------------------------------------------------------- same behaviour, other text
def modules_with(name):
    files, _ = SAME_BEHAVIOUR[name]
    return [__import__(f"algos.{stem}", fromlist=[name]) for stem in sorted(files)]


@pytest.mark.parametrize("seed", [0, 1])
def test_same_behaviour_group_mean(seed):
    g = torch.Generator().manual_seed(seed)
    x, mask = torch.randn(6, 3, 5, generator=g), (torch.rand(6, 3, 5, generator=g) > 0.3).float()
    onehot = torch.nn.functional.one_hot(torch.tensor([0, 1, 1, 2, 0])).float()  # (N, G)
    mask[..., 3] = 0.0  # group 2's only agent never alive: its mean is 0, not a division by zero
    for module in modules_with("group_mean"):
        torch.testing.assert_close(module.group_mean(x, mask, onehot), maa2c.group_mean(x, mask, onehot))
    # by hand: group 0 = agents 0 and 4, group 1 = agents 1 and 2
    by_hand = torch.stack([(x[..., m] * mask[..., m]).sum() / mask[..., m].sum() for m in ([0, 4], [1, 2])])
    torch.testing.assert_close(mappo.group_mean(x, mask, onehot)[[0, 1]], by_hand)


def test_same_behaviour_critic_inputs():
    g = torch.Generator().manual_seed(0)
    obs, state = torch.randn(4, 3, 5, generator=g), torch.randn(4, 15, generator=g)  # (E, N, obs_dim), (E, S)
    for module in modules_with("critic_inputs"):
        for kind in ("state", "concat_obs"):
            # (E, 1, D) is one input for every agent (mappo stores it once per env copy; nets.Critic broadcasts it)
            mine = module.critic_inputs(obs, state, kind).expand(4, 3, -1)
            assert torch.equal(mine, maa2c.critic_inputs(obs, state, kind))
    assert torch.equal(mappo.critic_inputs(obs, state, "obs"), obs)  # the GNN critic's nodes: own observations


# ----------------------------------------------------------------------------- sibling files
# (file a, file b) -> {top-level name: why it may differ, or stand in one file only}. Everything else in the
# two files, function by function, is the same text, and the line diff touches nothing but these.
COMMON = {
    "module docstring": "each file describes its own method",
    "Args": "the method's own flags and defaults",
    "build_networks": "the networks that make the method",
    "main": "the calls that differ (the critic's input or the mixer) and the method's own logs",
}
SIBLINGS = {
    ("vdn", "qmix"): {**COMMON,
                      "imports": "QMIX imports its mixer",
                      "episode_ends": "QMIX's optional per-step buffer (VDN has no such option)",
                      "checkpoint_payload": "QMIX saves the normaliser of the state its mixer reads "
                                             "(VDN reads none)"},
    ("vdn", "qplex"): {**COMMON,
                       "imports": "QPLEX imports its mixer",
                       "episode_ends": "QPLEX's optional per-step buffer (VDN has no such option)",
                       "checkpoint_payload": "QPLEX saves the normaliser of the state its mixer reads "
                                             "(VDN reads none)"},
    ("qmix", "qplex"): {**COMMON, "imports": "each imports its own mixer"},
    ("itrpo", "matrpo"): {**COMMON, "imports": "MATRPO imports the centralised input's shape",
                          "local_critic_inputs": "ITRPO's critic sees the agent's own observation",
                          "critic_inputs": "MATRPO's critic sees the global state or all observations"},
    ("ia2c", "maa2c"): {**COMMON, "imports": "MAA2C imports the centralised input's shape",
                        "local_critic_inputs": "IA2C's critic sees the agent's own observation",
                        "critic_inputs": "MAA2C's critic sees the global state or all observations"},
    ("ippo", "mappo"): {**COMMON,
                        "imports": "MAPPO imports its GNN critic's arguments",
                        "validate": "MAPPO checks its GNN critic's settings",
                        "local_critic_inputs": "IPPO's critic sees the agent's own observation",
                        "critic_inputs": "MAPPO's critic sees the global state, all observations, or a graph"},
}


def labelled_lines(path: Path) -> list:
    """The label of each line of a file: the top-level function or class it is in, 'module docstring',
    'imports', the name a top-level assignment sets, or '' for the lines between them (blank lines, banners)."""
    src = path.read_text()
    labels = [""] * (len(src.splitlines()) + 1)
    for i, node in enumerate(ast.parse(src).body):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            label = node.name
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            label = "module docstring"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            label = "imports"
        elif isinstance(node, ast.Assign):
            label = ", ".join(ast.unparse(t) for t in node.targets)
        else:
            label = ast.unparse(node).splitlines()[0]
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for line in range(first - 1, node.end_lineno):
            labels[line] = label
    return labels


@pytest.mark.parametrize("pair", sorted(SIBLINGS), ids="-".join)
def test_siblings_differ_only_in_the_named_parts(pair):
    allowed = SIBLINGS[pair]
    (a, b), (fa, fb) = pair, (FILES[pair[0]], FILES[pair[1]])
    for name in sorted(set(fa) | set(fb)):
        if name in allowed:
            continue
        assert name in fa and name in fb, (
            f"{name}() stands in algos/{a if name in fa else b}.py but not in its sibling "
            f"algos/{b if name in fa else a}.py: add it to both, or to SIBLINGS[{pair}] with the reason")
        assert fa[name] == fb[name], (
            f"{name}() differs between the siblings algos/{a}.py and algos/{b}.py, which may differ only in "
            f"{sorted(allowed)}\n" + short_diff(fa[name], fb[name], f"algos/{a}.py", f"algos/{b}.py"))
    # The whole files, line by line, with each file's own name (any case) written the same way in the parts that
    # may differ (a shared copy keeps the names it mentions: "VDN's sum" is the same text in QMIX's soft_update).
    labels = [labelled_lines(ALGOS_DIR / f"{stem}.py") for stem in pair]
    texts = [[re.sub(rf"\b{stem}\b", "<ALGO>", line, flags=re.IGNORECASE) if label in allowed else line
              for line, label in zip((ALGOS_DIR / f"{stem}.py").read_text().splitlines(), lines)]
             for stem, lines in zip(pair, labels)]
    outside = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, *texts, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for side, lines in ((0, range(i1, i2)), (1, range(j1, j2))):
            for line in lines:
                label = labels[side][line]
                if label not in allowed and texts[side][line].strip():  # blank lines between parts do not count
                    outside.add((pair[side], line + 1, label or "(between top-level parts)"))
    assert not outside, (
        f"algos/{a}.py and algos/{b}.py differ outside the parts they may differ in ({sorted(allowed)}): "
        + "; ".join(f"algos/{stem}.py line {line} in {label}" for stem, line, label in sorted(outside)[:20]))


# ----------------------------------------------------------------------------- long shared blocks
MIN_BLOCK = 40  # lines: a run of identical lines this long that two files share must be tied by a test

# (file a, file b, anchor, n): the n lines from the one line of each file that starts with `anchor` (after its
# indentation) are the same text in both files. These are the long runs two files share outside the copied
# functions that REFERENCE ties (the argument blocks, the rollout loop, the update), listed so that a change made
# in one copy cannot silently miss the other. Where two files are meant to differ from now on, shorten or drop
# the entry; test_every_long_shared_run_is_tied finds a new run that needs one.
SHARED_BLOCKS = [
    ("haa2c", "happo", 'if mask is not None:', 55),
    ("haa2c", "hatrpo", 'if mask is not None:', 55),
    ("haddpg", "hatd3", 'from dataclasses import dataclass', 43),
    ("haddpg", "hatd3", 'action = teams.override(action, obs, starts)', 40),
    ("haddpg", "matd3", 'import torch', 34),
    ("happo", "hatrpo", 't_rollout = time.time()', 91),
    ("hasac", "masac", 'import torch', 39),
    ("hatd3", "matd3", 'import torch', 34),
    ("ia2c", "ippo", 'if mask is not None:', 53),
    ("ia2c", "itrpo", 'if mask is not None:', 48),
    ("ia2c", "maa2c", 'from envs import make_env, parse_env_kwargs', 46),
    ("ia2c", "maa2c", 'def compute_gae(rewards, values, next_values, terminated,', 67),
    ("ia2c", "maa2c", 'rollout_s = time.time() - t_rollout', 73),
    ("iddpg", "maddpg", 'from envs import make_env, parse_env_kwargs,', 41),
    ("iddpg", "maddpg", 'def soft_update(target: torch.nn.Module, online:', 48),
    ("iddpg", "maddpg", 'policy_loss = -masked_mean(q_pi, alive)', 40),
    ("ippo", "itrpo", 't_rollout = time.time()', 57),
    ("ippo", "mappo", 'resume_envs, rng_state, seed_everything, start_or_resume)', 56),
    ("ippo", "mappo", 'def learning_rate_at(args: Args, iteration: int,', 87),
    ("ippo", "mappo", 'rollout_s = time.time() - t_rollout', 102),
    ("isac", "masac", 'from envs import continuous_hint, make_env,', 54),
    ("isac", "masac", 'def soft_update(target: torch.nn.Module, online:', 49),
    ("isac", "masac", 'q_pi = torch.minimum(critics[0](x)[0], critics[1](x)[0])  #', 43),
    ("itrpo", "matrpo", 'from envs import make_env, parse_env_kwargs', 55),
    ("itrpo", "matrpo", 'recurrent: Literal["none", "gru", "lstm"] = "none"', 40),
    ("itrpo", "matrpo", 'def compute_gae(rewards, values, next_values, terminated,', 192),
    ("itrpo", "matrpo", '# Only the critic has an optimiser: the actor moves by', 17),
    ("itrpo", "matrpo", 'rollout_s = time.time() - t_rollout', 93),
    ("maa2c", "matrpo", 'if mask is not None:', 49),
    ("qmix", "qplex", 'ALGO = Path(__file__).stem  # runs, checkpoints and', 54),
    ("qmix", "qplex", 'return agents, mixer', 106),
    ("qmix", "qplex", 'reward_norm = ValueNorm(groups=list(range(K)) if K > 1 else', 96),
    ("qmix", "qplex", 'targets = td_lambda_targets(team_reward, next_q_tot,', 42),
    ("qmix", "vdn", 'def with_final_step(x: torch.Tensor, final: torch.Tensor,', 23),
    ("qmix", "vdn", 'buffer.load_state_dict(ckpt["replay"])', 64),
    ("qmix", "vdn", 'tq_all, _ = target_agents.q_values(obs_all, last_all,', 36),
    ("qplex", "vdn", 'def with_final_step(x: torch.Tensor, final: torch.Tensor,', 23),
    ("qplex", "vdn", 'buffer.load_state_dict(ckpt["replay"])', 64),
    ("qplex", "vdn", 'targets = td_lambda_targets(team_reward, next_q_tot,', 28),
]


def file_lines(stem: str) -> list:
    return (ALGOS_DIR / f"{stem}.py").read_text().splitlines()


def anchor_index(lines: list, anchor: str, stem: str) -> int:
    hits = [i for i, line in enumerate(lines) if line.strip().startswith(anchor)]
    assert len(hits) == 1, (f"the SHARED_BLOCKS anchor {anchor!r} starts {len(hits)} lines of algos/{stem}.py, "
                            "not one: choose a line that stands once in each of the two files")
    return hits[0]


@pytest.mark.parametrize("a, b, anchor, n", SHARED_BLOCKS, ids=[f"{a}-{b}-{anchor[:20]}" for a, b, anchor, _ in
                                                                  SHARED_BLOCKS])
def test_shared_block_is_the_same_in_both_files(a, b, anchor, n):
    la, lb = file_lines(a), file_lines(b)
    i, j = anchor_index(la, anchor, a), anchor_index(lb, anchor, b)
    for d in range(n):
        x = la[i + d] if i + d < len(la) else "(end of file)"
        y = lb[j + d] if j + d < len(lb) else "(end of file)"
        assert x == y, (
            f"algos/{a}.py line {i + d + 1} and algos/{b}.py line {j + d + 1} differ, inside the {n} lines from "
            f"{anchor!r} that the two files share (SHARED_BLOCKS): a change made in one is missing in the other. "
            f"Make it in both, or, if the two are meant to differ here from now on, shorten or drop the entry.\n"
            f"  {a}: {x.strip()}\n  {b}: {y.strip()}")


def tied_lines(stem: str, lines: list) -> list:
    """For every line of a file: is it inside a copied function that REFERENCE ties to its reference?"""
    tied = [False] * len(lines)
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in REFERENCE:
            tied[node.lineno - 1:node.end_lineno] = [True] * (node.end_lineno - node.lineno + 1)
    return tied


def shared_runs(files: dict) -> list:
    """Every maximal run of at least MIN_BLOCK identical lines that two files share: (a, b, i, j, n) with a < b,
    lines i.. of a equal to lines j.. of b. Found through hashed windows of MIN_BLOCK lines (fast, and it also
    finds runs that stand in another order in the two files)."""
    windows = {}
    for stem, lines in files.items():
        for i in range(len(lines) - MIN_BLOCK + 1):
            windows.setdefault(hash(tuple(lines[i:i + MIN_BLOCK])), []).append((stem, i))
    starts = {}
    for places in windows.values():
        for x, (a, i) in enumerate(places):
            for b, j in places[x + 1:]:
                if a != b:
                    (a2, i2), (b2, j2) = sorted([(a, i), (b, j)])
                    starts.setdefault((a2, b2), set()).add((i2, j2))
    runs = []
    for (a, b), pairs in starts.items():
        for i, j in sorted(pairs):
            if (i - 1, j - 1) in pairs:
                continue  # inside a run already counted
            n = MIN_BLOCK
            while (i + n - MIN_BLOCK + 1, j + n - MIN_BLOCK + 1) in pairs:
                n += 1
            runs.append((a, b, i, j, n))
    return runs


def test_every_long_shared_run_is_tied():
    """No run of MIN_BLOCK or more identical lines is shared by two algorithm files without a test that ties the
    copies together: its lines are in copied functions (REFERENCE) or in a SHARED_BLOCKS entry, but for fewer
    than MIN_BLOCK of them."""
    files = {stem: file_lines(stem) for stem in FILES}
    tied = {stem: tied_lines(stem, lines) for stem, lines in files.items()}
    listed = {}  # (a, b) -> the lines of a that SHARED_BLOCKS ties to b
    for a, b, anchor, n in SHARED_BLOCKS:
        assert a < b, f"SHARED_BLOCKS entry ({a!r}, {b!r}, ...): write the two files in alphabetical order"
        start = anchor_index(files[a], anchor, a)
        listed.setdefault((a, b), set()).update(range(start, start + n))
    loose_runs = []
    for a, b, i, j, n in shared_runs(files):
        loose = [d for d in range(n)
                 if not (tied[a][i + d] and tied[b][j + d]) and i + d not in listed.get((a, b), set())]
        if len(loose) >= MIN_BLOCK:
            first = next(d for d in loose if files[a][i + d].strip())
            line = files[a][i + first].strip()
            loose_runs.append(f"algos/{a}.py lines {i + 1}-{i + n} = algos/{b}.py lines {j + 1}-{j + n} "
                              f"({len(loose)} lines untied; e.g. ({a!r}, {b!r}, {line[:60]!r}, {n - first}))")
    assert not loose_runs, (
        "runs of identical lines shared by two algorithm files that no test ties together (a change made in one "
        "would silently miss the other). Move the code into a shared module, make it a copied function that "
        "REFERENCE ties, or add an entry to SHARED_BLOCKS:\n  " + "\n  ".join(loose_runs))
