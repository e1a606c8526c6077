"""What the tests know about the algorithm files, read from the files themselves.

A new `algos/<name>.py` joins every test that loops over the files (smoke runs with groups,
bad input, the support table, copies, docs) without editing a list: each property below is
found in the file (its source or its `validate`), not written down here by name.
"""
import glob
import importlib
import os

from common.cli import ConfigError, make_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "algos", "*.py"))
               if not p.endswith("__init__.py"))


def source(algo: str) -> str:
    with open(os.path.join(ROOT, "algos", f"{algo}.py")) as f:
        return f.read()


# Files that refuse discrete actions: their validate says "{ALGO} needs continuous actions".
CONTINUOUS_ONLY = frozenset(a for a in ALGOS if "needs continuous actions" in source(a))
# Files that pick the continuous actions of an env that has both (envs.with_continuous_actions), yet
# also learn discrete ones (Gumbel-softmax).
CONTINUOUS_FIRST = frozenset(a for a in ALGOS if "with_continuous_actions(" in source(a)) - CONTINUOUS_ONLY


def refuses_separate_networks(algo: str) -> bool:
    """The file's validate refuses `--share-params none`: one network acts for every agent (MAT's
    transformer), so groups cannot have networks of their own."""
    module = importlib.import_module(f"algos.{algo}")
    try:
        module.validate(make_args(module.Args, share_params="none"))
    except ConfigError as err:
        return "--share-params none" in str(err)
    return False


ONE_NETWORK = frozenset(a for a in ALGOS if a != "ppo_iql" and refuses_separate_networks(a))  # ppo_iql: its
# two groups are its mapping (a network per group by construction; tests/test_multi_policy.py)
