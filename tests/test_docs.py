"""The documentation against the code, without training anything.

- every `algos/<name>.py` has a page `docs/algorithms/<name>.md`;
- every command in a fenced code block of README.md or docs/**/*.md that runs
  `python algos/<name>.py`, `python run.py` or `python benchmarks/<x>.py` uses flags that exist
  (algorithm flags are parsed by the algorithm's own `Args` and checked by its `validate`);
- every TensorBoard key that an algorithm logs, and every field of its summary.json, is
  described in docs/metrics.md;
- relative links to Markdown and source files point at files that exist.
"""
import ast
import glob
import importlib
import os
import re
import shlex

import pytest

import common.cli

from common.cli import ConfigError, parse_args
from envs import env_arguments, parse_env_kwargs
from envs.errors import EnvPackageMissing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGO_NAMES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "algos", "*.py"))
                    if not p.endswith("__init__.py"))
DOC_FILES = sorted([os.path.join(REPO, "README.md")]
                   + glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
METRICS_DOC = os.path.join(REPO, "docs", "metrics.md")
SEPARATORS = {"&&", "||", ";", "|"}


def rel(path: str) -> str:
    return os.path.relpath(path, REPO)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


# ----------------------------------------------------------------------------- commands in the docs
def fenced_blocks(text: str):
    """The bodies of ``` fenced code blocks."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def doc_commands():
    """(doc, command line, argv) for every `python <script> ...` in a fenced block.

    Lines joined with a trailing backslash are one command; `a && b`, `a; b` and `a | b` are
    split into separate commands (the separators must stand apart as in normal shell style);
    `# comments` and a leading `$ ` prompt are dropped. A file made in the block by
    `cp algos/a.py algos/b.py` (a new method from a copy) is checked as the file it copies.
    """
    found = []
    for path in DOC_FILES:
        for block in fenced_blocks(read(path)):
            copies = {}
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip()
                line = line.removeprefix("$ ")
                try:
                    tokens = shlex.split(line, comments=True)
                except ValueError:  # not shell (e.g. a Python snippet with an open quote)
                    continue
                command = []
                for token in tokens + [";"]:
                    if token in SEPARATORS:
                        if len(command) == 3 and command[0] == "cp":
                            copies[command[2]] = command[1]
                        if len(command) >= 2 and command[0] in ("python", "python3"):
                            argv = [copies.get(command[1], command[1]), *command[2:]]
                            found.append((rel(path), shlex.join(command), argv))
                        command = []
                    else:
                        command.append(token)
    return found


COMMANDS = doc_commands()


def commands_of(kind: str):
    """Commands whose script is algos/*.py ('algo'), run.py ('run') or benchmarks/*.py ('bench')."""
    pattern = {"algo": r"algos/\w+\.py", "run": r"run\.py", "bench": r"benchmarks/\w+\.py"}[kind]
    return [c for c in COMMANDS if re.fullmatch(pattern, c[2][0])]


def ids(commands):
    return [f"{doc}: {cmd}" for doc, cmd, _ in commands]


def declared_flags(source: str) -> set:
    """The option strings given to argparse's add_argument in a script's source."""
    return set(re.findall(r"""add_argument\(\s*["'](--?[\w-]+)["']""", source))


def flag_tokens(argv):
    """The `--flag` tokens of an argparse command line (`--flag=value` counts as `--flag`; a quoted value with
    spaces, as `--flags "--torch-threads 1"`, is a value, not a flag)."""
    return [t.split("=", 1)[0] for t in argv if t.startswith("--") and t != "--" and not any(c.isspace() for c in t)]


def check_algo_argv(module, argv, where: str, capsys) -> None:
    """Parse argv with the algorithm's Args, then run its validate() and the env-name check."""
    if "--help" in argv or "-h" in argv:
        return
    try:
        args = parse_args(module.Args, argv)
    except SystemExit as err:
        message = " ".join(re.sub(r"[─│╭╮╰╯]|-{3,}", " ", capsys.readouterr().err).split())
        pytest.fail(f"{where} does not parse against {module.__name__}.Args (exit {err.code}): {message or err}")
    if hasattr(module, "validate"):
        try:
            module.validate(args)
        except ConfigError as err:
            pytest.fail(f"{where} is rejected by {module.__name__}.validate: {err}")
    if not getattr(args, "evaluate_checkpoint", None):
        try:
            accepted = env_arguments(args.env)
        except EnvPackageMissing as err:  # an optional family not installed here (core install)
            pytest.skip(f"{where}: {err}")
        except ValueError as err:
            pytest.fail(f"{where}: {err}")
        unknown = set(parse_env_kwargs(args.env_kwargs)) - set(accepted)
        assert not unknown, f"{where}: env {args.env!r} takes no argument(s) {sorted(unknown)}"


def test_the_docs_hold_commands_of_every_kind():
    """Guards the extraction above: if it found nothing, the tests below would pass vacuously."""
    assert commands_of("algo") and commands_of("run") and commands_of("bench")
    readme = [c for c in commands_of("algo") if c[0] == "README.md"]
    assert len(readme) >= 5


@pytest.mark.parametrize("name", ALGO_NAMES)
def test_every_algorithm_has_a_page(name):
    page = os.path.join(REPO, "docs", "algorithms", f"{name}.md")
    assert os.path.isfile(page), f"algos/{name}.py has no page docs/algorithms/{name}.md"


@pytest.mark.parametrize("doc,command,argv", commands_of("algo"), ids=ids(commands_of("algo")))
def test_algorithm_commands_parse(doc, command, argv, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # presets are given relative to the repository root
    # Docs name placeholder runs (`--resume runs/<run_name>`): check the flags, not the files.
    monkeypatch.setattr(common.cli, "resumed_args", lambda cls, path: {})
    monkeypatch.setattr(common.cli, "require_wandb", lambda: None)  # --track parses where W&B is not installed
    name = os.path.basename(argv[0])[:-3]
    assert name in ALGO_NAMES, f"{doc}: `{command}` runs algos/{name}.py, which does not exist"
    check_algo_argv(importlib.import_module(f"algos.{name}"), argv[1:], f"{doc}: `{command}`", capsys)


@pytest.mark.parametrize("doc,command,argv", commands_of("run"), ids=ids(commands_of("run")))
def test_run_commands_parse(doc, command, argv, monkeypatch, capsys):
    import run

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(common.cli, "require_wandb", lambda: None)  # --track parses where W&B is not installed
    argv = argv[1:]
    own = argv[: argv.index("--")] if "--" in argv else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    known = declared_flags(read(os.path.join(REPO, "run.py")))
    unknown = [f for f in flag_tokens(own) if f not in known]
    assert not unknown, f"{doc}: `{command}` uses {unknown}, which run.py does not define (it has {sorted(known)})"
    algos = ["mappo"]
    if "--algo" in own:
        i = own.index("--algo") + 1
        algos = []
        while i < len(own) and not own[i].startswith("-"):
            algos.append(own[i])
            i += 1
    for algo in algos:
        assert algo in run.ALGOS, f"{doc}: `{command}`: run.py does not launch {algo!r} (it knows {run.ALGOS})"
        check_algo_argv(importlib.import_module(f"algos.{algo}"), extra,
                        f"{doc}: `{command}` (the part after `--`, for {algo})", capsys)


@pytest.mark.parametrize("doc,command,argv", commands_of("bench"), ids=ids(commands_of("bench")))
def test_benchmark_commands_use_existing_flags(doc, command, argv):
    script = os.path.join(REPO, argv[0])
    assert os.path.isfile(script), f"{doc}: `{command}` runs {argv[0]}, which does not exist"
    known = declared_flags(read(script))
    unknown = [f for f in flag_tokens(argv[1:]) if f not in known]
    assert not unknown, f"{doc}: `{command}` uses {unknown}, which {argv[0]} does not define"


# ----------------------------------------------------------------------------- logged keys
RUN_UTILS = os.path.join(REPO, "common", "run_utils.py")


def fstring_template(key: ast.AST) -> tuple:
    """A TensorBoard key as (template with {} for each placeholder, [placeholder names])."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value.replace("{", "{{").replace("}", "}}"), []
    fields = ([v.value for v in key.values if isinstance(v, ast.FormattedValue)]
              if isinstance(key, ast.JoinedStr) else [])
    if not fields or not all(isinstance(f, ast.Name) for f in fields):
        raise AssertionError(f"cannot read the TensorBoard key {ast.unparse(key)!r}; extend logged_keys()")
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in key.values), [f.id for f in fields]


def is_add_scalar(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_scalar"


def recorder_methods() -> dict:
    """What each method of `common.run_utils.RunRecorder` logs, the methods it calls on `self`
    included: {method: (its parameter names, [(template, placeholders, the parameter the key's
    loop iterates over, or None)])}. E.g. `log_iteration` writes f"losses/{key}" for every entry
    of its `stats` parameter, and f"charts/agent_{i}/episodic_return" only when given
    `agent_returns`."""
    tree = ast.parse(read(RUN_UTILS))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunRecorder")
    own, calls, params = {}, {}, {}
    for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        params[fn.name] = [a.arg for a in fn.args.args[1:]]
        own[fn.name], calls[fn.name] = [], set()
        loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                calls[fn.name].add(node.func.attr)
            if not is_add_scalar(node):
                continue
            template, names = fstring_template(node.args[0])
            source = None
            if names:  # the parameter that the innermost loop around this call iterates over
                loop = [lp for lp in loops if node in ast.walk(lp)][-1:]
                source = next((n.id for lp in loop for n in ast.walk(lp.iter)
                               if isinstance(n, ast.Name) and n.id in params[fn.name]), None)
                assert source, f"RunRecorder.{fn.name} logs {template!r} from no parameter; extend recorder_methods()"
            own[fn.name].append((template, names, source))
    methods = {}
    for name in own:  # add the keys of the methods it calls on self (one level, as in evaluate)
        methods[name] = (params[name], own[name] + [k for other in calls[name] if other in own for k in own[other]])
    return methods


def logged_keys(source: str) -> set:
    """Every TensorBoard key an algorithm file logs: the keys it passes to `add_scalar`, and those
    its calls to `common.run_utils.RunRecorder` methods write (`maybe_evaluate`, `log_iteration`...).

    An f-string key whose placeholder is the loop variable of `for key, value in
    stats.items()`, such as f"losses/{key}", is expanded with every key of the `stats` dict the
    file builds (`stats = dict(policy_loss=..., ...)`); likewise the recorder's f"losses/{key}"
    and f"charts/{key}" with the `stats` and the `charts={...}` dict the file passes to
    `log_iteration`. Any other placeholder stays a placeholder in angle brackets:
    f"charts/agent_{i}/episodic_return" is documented as `charts/agent_<i>/episodic_return`
    (written by the recorder only when the file passes `agent_returns`). A key that is neither a
    string nor an f-string of plain names fails here, so that a new logging form is noticed
    rather than skipped.
    """
    tree = ast.parse(source)
    stats_keys, stats_loop_vars = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "stats" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "dict":
                stats_keys |= {k.arg for k in value.keywords if k.arg}
            elif isinstance(value, ast.Dict):
                stats_keys |= {k.value for k in value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.For) and ast.unparse(node.iter) in ("stats", "stats.items()", "stats.keys()"):
            target = node.target.elts[0] if isinstance(node.target, ast.Tuple) else node.target
            if isinstance(target, ast.Name):
                stats_loop_vars.add(target.id)
    keys = set()
    for node in ast.walk(tree):
        if not is_add_scalar(node):
            continue
        template, names = fstring_template(node.args[0])
        if len(names) == 1 and names[0] in stats_loop_vars:
            assert stats_keys, f"{ast.unparse(node.args[0])} loops over `stats`, but no `stats = dict(...)` was found"
            keys |= {template.format(k) for k in stats_keys}
        else:
            keys.add(template.format(*(f"<{n}>" for n in names)))
    methods = recorder_methods()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
                and not is_add_scalar(node)):
            continue
        params, method_keys = methods[node.func.attr]
        given = dict(zip(params, node.args))
        given.update({k.arg: k.value for k in node.keywords if k.arg})
        for template, names, param in method_keys:
            if param is None:
                keys.add(template)
            elif param not in given or (isinstance(given[param], ast.Constant) and given[param].value is None):
                continue  # not passed: the recorder writes nothing from it
            elif isinstance(given[param], ast.Dict):
                keys |= {template.format(k.value) for k in given[param].keys}
            elif isinstance(given[param], ast.Name) and given[param].id == "stats":
                assert stats_keys, f"{node.func.attr}(...) logs `stats`, but no `stats = dict(...)` was found"
                keys |= {template.format(k) for k in stats_keys}
            elif isinstance(given[param], (ast.Name, ast.Attribute)):  # a variable or e.g. teams.members
                keys.add(template.format(*(f"<{n}>" for n in names)))
            else:
                raise AssertionError(f"cannot read what {ast.unparse(node)} logs from {param!r}; extend logged_keys()")
    return keys


def summary_fields(source: str) -> set:
    """The keys of the `summary = {...}` dict an algorithm writes to summary.json: built in the
    file, or by `RunRecorder.finish` in common/run_utils.py when the file calls it."""
    fields = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "summary" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            fields |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    if not fields and re.search(r"\.finish\(", source):
        fields = summary_fields(read(RUN_UTILS))
    return fields


def test_key_extraction_finds_the_standard_keys():
    keys = logged_keys(read(os.path.join(REPO, "algos", "mappo.py")))
    assert {"charts/episodic_return", "losses/policy_loss", "losses/explained_variance", "timers/update_s"} <= keys
    assert not any("{" in k or "<key>" in k for k in keys)


@pytest.mark.parametrize("name", ALGO_NAMES)
def test_every_logged_key_is_documented(name):
    text = read(METRICS_DOC)
    keys = logged_keys(read(os.path.join(REPO, "algos", f"{name}.py")))
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"algos/{name}.py logs {missing}, which docs/metrics.md does not describe"


@pytest.mark.parametrize("name", ALGO_NAMES)
def test_every_summary_field_is_documented(name):
    text = read(METRICS_DOC)
    fields = summary_fields(read(os.path.join(REPO, "algos", f"{name}.py")))
    assert fields, f"algos/{name}.py builds no `summary = {{...}}` dict"
    missing = sorted(k for k in fields if f"`{k}`" not in text)
    assert not missing, f"algos/{name}.py writes summary.json field(s) {missing}, not described in docs/metrics.md"


# ----------------------------------------------------------------------------- links
def anchors(path: str) -> set:
    """GitHub's anchors for the headings of a Markdown file (lower case, punctuation dropped,
    spaces to hyphens)."""
    text = re.sub(r"^```.*?^```", "", read(path), flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+\s+(.+?)\s*$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", DOC_FILES, ids=[rel(p) for p in DOC_FILES])
def test_relative_links_to_docs_and_code_resolve(path):
    """Links to .md, .py and .yaml files, and to headings of Markdown files (images are
    produced by the benchmarks and not checked)."""
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*?(?:\.md|\.py|\.yaml)?)(?:#([^)\s]*))?\)", read(path)):
        if "://" in target or not (target.endswith((".md", ".py", ".yaml")) or (not target and anchor)):
            continue
        file = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(file):
            broken.append(target)
        elif anchor and file.endswith(".md") and anchor not in anchors(file):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{rel(path)} links to missing file(s) or heading(s) {broken}"
