"""Every stored benchmark result is cited, and every cited result exists.

The documents that cite results: BENCHMARKS.md (the current figures), README.md and every
Markdown page under docs/ (docs/benchmarks-history.md keeps the superseded ones, the algorithm
pages their own runs). A citation is a path written with its folder, either from the repository
root (`benchmarks/results/learning_mpe/x.json`, also behind `../` in a link) or from
benchmarks/results/ (`learning_mpe/x.json`); `{1,2,3}` stands for each of its items, and a
folder written with a trailing `/` (`benchmarks/results/speed_env_workers/`) cites the files in it.

- every file under benchmarks/results/ (its README.md aside) is cited somewhere, so no result
  sits in the tree without a sentence that says what it is;
- every cited path exists, except where a command writes it (`--json`, `--out`, `--plot`,
  `--out-dir` in front of it): a command may be given for a result not run yet.
"""
import glob
import itertools
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
CITING_DOCS = sorted([os.path.join(REPO, "BENCHMARKS.md"), os.path.join(REPO, "README.md")]
                     + glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
OUTPUT_FLAGS = ("--json", "--out", "--plot", "--out-dir")
# A path-like token: folders and a name, with `{a,b}` alternatives allowed anywhere in it.
PATH_TOKEN = re.compile(r"(--[\w-]+[ =])?((?:\.\./)*[\w.{},-]+(?:/[\w.{},-]+)+/?)")


def stored_files() -> list:
    """Every file under benchmarks/results/, relative to it, its README.md aside."""
    found = []
    for folder, _, names in os.walk(RESULTS):
        found += [os.path.relpath(os.path.join(folder, n), RESULTS) for n in names]
    return sorted(f for f in found if f != "README.md")


def expand_braces(path: str) -> list:
    """`a_seed{1,2}.json` -> ['a_seed1.json', 'a_seed2.json']."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def citations() -> list:
    """(doc, path relative to benchmarks/results/, written by a command) for every citation."""
    top_folders = {n for n in os.listdir(RESULTS) if os.path.isdir(os.path.join(RESULTS, n))}
    found = []
    for doc in CITING_DOCS:
        with open(doc) as f:
            text = f.read()
        for flag, token in PATH_TOKEN.findall(text):
            token = re.sub(r"^(\.\./)+", "", token).rstrip(".,")
            if token.startswith("benchmarks/results/"):
                token = token[len("benchmarks/results/"):]
            elif token.split("/")[0] not in top_folders:
                continue  # not a result (docs/img/..., runs/..., configs/...)
            for path in expand_braces(token):
                found.append((os.path.relpath(doc, REPO), path, flag.strip(" =") in OUTPUT_FLAGS))
    return found


def test_the_citations_are_found():
    """Guards the reading above: without citations the two tests below would pass vacuously."""
    cited = {path for _, path, _ in citations()}
    assert len(cited) > 50 and "learning_mpe/mappo-ippo_simple_spread-torch_10m_defaults-e256.json" in cited


def test_every_stored_result_is_cited():
    cited = {path for _, path, _ in citations()}
    folders = {path.rstrip("/") for path in cited if path.endswith("/")}  # a folder cited as a whole
    uncited = [f for f in stored_files() if f not in cited and os.path.dirname(f) not in folders]
    assert not uncited, (f"benchmarks/results/ holds {uncited}, cited by none of BENCHMARKS.md, README.md, docs/: "
                         "cite each where its figures are discussed (docs/benchmarks-history.md for old ones)")


def test_every_cited_result_exists():
    missing = sorted({f"{doc}: {path}" for doc, path, written in citations()
                      if not written and not os.path.exists(os.path.join(RESULTS, path))})
    assert not missing, f"cited, but not under benchmarks/results/: {missing}"


def test_every_test_file_is_in_the_index():
    """tests/README.md groups the test files by what they test; a new file must be listed there."""
    tests = os.path.join(REPO, "tests")
    with open(os.path.join(tests, "README.md")) as f:
        index = f.read()
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tests, "*.py")))
    missing = [name for name in files if f"`{name}`" not in index]
    assert not missing, f"tests/README.md does not list {missing}: add each under the group it tests"
