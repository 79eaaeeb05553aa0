"""The documentation cannot drift: the flags page is generated from ``Config`` (the source of ``--help``)
and lists every flag with its help text; every ``main_ppo`` command the pages and README show parses
with today's flags; README's speed summary is the range of the table the site draws from ``docs/figures/speed.csv``.

The site itself is built with every warning an error by ``make docs`` (``tests/test_readme.py`` runs it,
as README shows it).
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ppo_dict.core.config import Config
from ppo_dict.main_ppo_godot import godot_argv
from ppo_dict.run.cli import (
    COMMAND_LINE_FLAGS,
    ZOO_FLAGS,
    default_text,
    explicit_flags,
    flag_default,
    flag_groups,
    flag_text,
    shown_default,
)
from tests.conftest import ROOT

DOCS = Path(ROOT) / "docs"


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks_generated", DOCS / "hooks" / "generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = load_hooks()


def test_every_flag_has_help_text() -> None:
    missing = [f.name for fields in flag_groups().values() for f in fields if not str(f.metadata.get("help", "")).strip()]
    assert not missing, f"flags without help text (the `help` of their field in ppo_dict/core/config.py): {missing}"


def flags_page() -> str:
    """The flags reference as the site shows it on docs/flags.md (generated there when the site is built)."""
    return HOOKS.flags_markdown(flag_groups, default_text, COMMAND_LINE_FLAGS, flag_text)


def real_help() -> str:
    """What ``python -m ppo_dict.main_ppo --help`` prints, run as a user runs it (a terminal wide enough
    that no help line wraps: the text is the same, one flag a line or two)."""
    env = {**os.environ, "COLUMNS": "100000"}
    done = subprocess.run(
        [sys.executable, "-m", "ppo_dict.main_ppo", "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def help_defaults(text: str) -> dict[str, str]:
    """``{flag: default}`` in ``--help``'s order, from its text: a flag's entry starts with ``  --name``
    (its help may go on the indented lines after), and ends with ``(default: ...)``."""
    entries: list[str] = []
    for line in text.splitlines():
        if re.match(r"^  -", line):
            entries.append(line)
        elif entries and line.startswith("   "):
            entries[-1] += " " + line.strip()
        elif entries and not line.strip():
            entries.append("")  # a group's end
    found = {}
    for entry in entries:
        name = re.match(r"^\s*(?:-\w \S+, )?--([\w-]+)", entry)  # rl-zoo's -f LOG_FOLDER, --log-folder: log_folder
        if name:
            default = re.search(r".*\(default: (.*)\)$", entry)  # the last: a help text may name a default too
            found[name.group(1).replace("-", "_")] = default.group(1) if default else None
    return found


def page_defaults(page: str) -> dict[str, str]:
    """``{flag: default}`` in the flags page's order, from its table rows."""
    # a setting's row: `--name`; one of rl-zoo's train.py flags: its spellings (`-f` `--log-folder`, anchored log_folder)
    rows = re.findall(r'<a id="(\w+)"></a>(?:`-\w` )?`--[\w-]+` \| <code>(.*?)</code> \|', page)
    return {name: html.unescape(default.replace("&#124;", "|")) for name, default in rows}


HELP = real_help()


def test_help_prints_every_default() -> None:
    defaults = help_defaults(HELP)
    assert set(defaults) == {f.name for f in dataclasses.fields(Config)} | set(COMMAND_LINE_FLAGS) | set(ZOO_FLAGS)
    assert None not in defaults.values(), [name for name, default in defaults.items() if default is None]
    assert defaults["learning_rate"] == "0.0003" and defaults["n_epochs"] == "10" and defaults["clip_range"] == "0.2"
    assert defaults["dry_run"] == "False" and defaults["env_kwargs"] == "{}" and defaults["algo"] == "ppo"
    # a default of None says what None means, once: not "(None: ...) (default: None)" nor "(default: sb3's) (default: None)"
    assert defaults["n_steps"] == "None: 2048, sb3 PPO's default; 128 with a recurrent model, RecurrentPPO's"
    assert defaults["net_arch"].startswith("None: sb3's: pi=64,64;vf=64,64 for mlp models")
    assert "(None:" not in HELP and "(default: sb3's)" not in HELP


def test_flags_page_is_the_real_help_in_names_defaults_and_order() -> None:
    """docs/flags.md's tables against what ``python -m ppo_dict.main_ppo --help`` prints: the same flags,
    every one (the command line's own included), the same defaults (``--help`` adds what None means), in the same order."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    shown = {
        name: shown_default(fields[name], flag_default(fields[name])) if name in fields else default
        for name, default in page_defaults(flags_page()).items()
    }
    assert list(shown.items()) == list(help_defaults(HELP).items())


def test_flags_page_lists_every_flag_with_its_help() -> None:
    page = flags_page()
    for group, fields in flag_groups().items():
        assert f"## {HOOKS.GROUP_TITLES.get(group, group)}" in page
        for f in fields:
            row = next((line for line in page.splitlines() if f'<a id="{f.name}"></a>`--{f.name}`' in line), None)
            assert row is not None, f"--{f.name} is not on the flags page"
            assert HOOKS.cell(f.metadata["help"]) in row
            assert f.metadata["help"] in HELP, f"--{f.name}'s help text differs from --help's"


def test_flags_page_says_what_every_flag_reads() -> None:
    """A flag whose parser the page does not know would show its raw type annotation: name the parser in
    ``VALUE_KINDS`` (docs/hooks/generated.py) or give the field choices."""
    unknown = [
        f.name
        for fields in flag_groups().values()
        for f in fields
        if not f.metadata["choices"] and getattr(f.metadata["parse"], "__name__", "") not in HOOKS.VALUE_KINDS
    ]
    assert not unknown


def test_a_table_cell_keeps_its_text() -> None:
    assert HOOKS.cell("gym_<gymnasium id> | a*b") == r"gym\_&lt;gymnasium id&gt; \| a\*b"
    assert HOOKS.code("a|b") == "<code>a&#124;b</code>"


#: every command line a user runs, main_ppo first
COMMANDS = ("ppo_dict.main_ppo", *HOOKS.COMMANDS)


@pytest.mark.parametrize("module", COMMANDS)
def test_every_commands_help_shows_its_defaults_in_plain_words(module: str) -> None:
    """Each command's ``--help``, from the one generator (``ppo_dict.run.cli.command_parser``): its own usage line, a
    description, every option's default said once at the end of its entry, no reStructuredText left in it."""
    text = HOOKS.command_help(module, width=100000)
    assert text.startswith(f"usage: python -m {module} ") and "\n\noptions:\n" in text, text[:300]
    assert "``" not in text and not re.search(r":(func|class|meth|mod|attr|data|exc):`", text), text
    entries = [
        entry for entry in re.split(r"\n(?=  -)", text.split("\noptions:\n", 1)[1]) if not entry.startswith("  -h, --help")
    ]
    assert len(entries) >= 2
    for entry in entries:
        entry = " ".join(entry.split("\n\n")[0].split())  # one option: up to a blank line (the next group, the epilog)
        assert re.search(r"\(default: [^()]*(\([^()]*\)[^()]*)*\)$", entry), f"{module}: no default at the end of: {entry}"
        assert entry.count("(default: ") == 1 and "(default: None) (default" not in entry, entry


def test_godot_help_is_its_own_with_the_demos_defaults() -> None:
    text = HOOKS.command_help("ppo_dict.main_ppo_godot", width=100000)
    defaults = help_defaults(text)
    assert defaults["env_path"] == "None: the demo game" and re.search(r"\n  --env_path PATH ", text)
    assert (defaults["env"], defaults["total_timesteps"], defaults["n_envs"], defaults["gamma"]) == (
        "godot_demo",
        "150000",
        "8",
        "0.98",
    )
    assert "usage: python -m ppo_dict.main_ppo " not in text and "\nexamples:\n  python -m ppo_dict.main_ppo_godot " in text
    assert set(defaults) == {f.name for f in dataclasses.fields(Config)} | set(COMMAND_LINE_FLAGS) | set(ZOO_FLAGS) | {
        "env_path"
    }


def doc_commands() -> list[tuple[str, str]]:
    """``(file, command)`` for every ``python -m ppo_dict.main_ppo`` command in the ``bash`` blocks of README
    and the pages."""
    found = []
    for path in [Path(ROOT) / "README.md", *sorted(DOCS.glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", " ".join(line.split()))
                match = re.search(r"python -m ppo_dict\.main_ppo(_godot)? .*", line)
                if match and "--help" not in line.split():
                    found.append((path.name, match.group(0)))
    return found


DOC_COMMANDS = doc_commands()


def test_the_pages_show_commands() -> None:
    assert len(DOC_COMMANDS) > 30 and {name for name, _ in DOC_COMMANDS} >= {"README.md", "training.md", "experiments.md"}


@pytest.mark.parametrize("where, command", DOC_COMMANDS, ids=[f"{name}:{i}" for i, (name, _) in enumerate(DOC_COMMANDS)])
def test_documented_command_parses(where: str, command: str) -> None:
    """Every flag a page shows exists today and reads its value (argparse exits 2 on an unknown one)."""
    argv = shlex.split(command.replace("$SLURM_ARRAY_TASK_ID", "3"))[3:]
    argv = argv[: argv.index("&&")] if "&&" in argv else argv  # `main_ppo ... && tensorboard ...`: the first command
    if "main_ppo_godot" in command:
        argv = godot_argv(argv)  # main_ppo's flags, as main_ppo_godot hands them on
    flags = explicit_flags(argv)  # the settings typed: a --hyperparams file is read by the run, here only the flags
    flags.pop("hyperparams", None)
    Config(**flags)


def test_readme_speed_summary_is_the_sites_table() -> None:
    """README keeps no copy of the speed table (the site draws it from docs/figures/speed.csv): its summary's range of
    training ratios is the table's, and it links the page."""
    readme = (Path(ROOT) / "README.md").read_text()
    training = [
        float(re.search(r"\*\*([\d.]+)x\*\*", row).group(1))
        for row in HOOKS.speed_markdown(HOOKS.speed_rows()).splitlines()
        if ": training" in row and "cuda" not in row
    ]
    low, high = min(training), max(training)
    assert f"at {low:.1f}x to {high:.1f}x sb3's throughput" in readme and "docs/speed.md#where-things-stand" in readme
    assert "| workload | ppo_dict / sb3 |" not in readme


def test_pages_with_generated_parts_have_their_markers() -> None:
    parts = HOOKS.generated_parts()
    assert "<!-- generated: flags -->" in (DOCS / "flags.md").read_text()
    assert "<!-- generated: commands -->" in (DOCS / "flags.md").read_text()
    assert "<!-- generated: speed table -->" in (DOCS / "speed.md").read_text()
    assert "<!-- generated: ledger, newest first -->" in (DOCS / "perf_log.md").read_text()
    assert "<!-- generated: results table -->" in (DOCS / "results.md").read_text()
    assert "<!-- generated: config fields -->" in (DOCS / "api.md").read_text()
    assert "<!-- generated: constructor parameters -->" in (DOCS / "api.md").read_text()
    assert set(parts) == {
        "<!-- generated: flags -->",
        "<!-- generated: commands -->",
        "<!-- generated: speed table -->",
        "<!-- generated: ledger, newest first -->",
        "<!-- generated: results table -->",
        "<!-- generated: config fields -->",
        "<!-- generated: constructor parameters -->",
    }


def test_api_reference_lists_configs_fields_and_the_constructors_parameters() -> None:
    """The API reference's generated tables: every Config field with its flag's text, and every parameter PPO,
    MaskablePPO and RecurrentPPO take (sb3's signature bound, then ppo_dict's settings)."""
    import inspect

    from ppo_dict.api.algorithms import ALGORITHMS

    fields = HOOKS.config_fields_markdown()
    assert all(f"| `{f.name}` |" in fields for f in dataclasses.fields(Config))
    parameters = HOOKS.constructor_markdown()
    for name, spec in ALGORITHMS.items():
        section = parameters.split(f"### `{name}(...)`", 1)[1].split("### ", 1)[0]
        assert [row.split("`")[1] for row in section.splitlines() if row.startswith("| `")] == list(
            spec.signature().parameters
        )
        assert "| `n_envs` | <code>None</code> | ppo_dict's setting: environments stepped in parallel" in section
        assert inspect.signature(spec.sb3().__init__).parameters["learning_rate"].default == 3e-4


def test_every_role_the_docstrings_use_is_one_the_docs_hook_renders() -> None:
    """A role kind the hook does not know would render raw in the API reference (and only there: ``make docs`` does not
    fail)."""
    used = {
        kind
        for path in [*Path(ROOT, "ppo_dict").rglob("*.py"), *Path(ROOT, "envs").rglob("*.py")]
        for kind in re.findall(r"(?<![\w:]):(\w+):`[~\w.]+`", path.read_text())
    }
    assert used and all(HOOKS.SPHINX_ROLE.search(f":{kind}:<code>x</code>") for kind in used), used


def test_the_docstrings_roles_render_as_code() -> None:
    """The API reference shows ``:class:`~a.b.Config``` as the code it names, not as raw text (the docs hook)."""
    html = "see :class:<code>~ppo_dict.core.config.Config</code> and :meth:<code>predict</code>, :func:<code>a.b</code>"
    assert (
        HOOKS.on_page_content(html, None, None, None) == "see <code>Config</code> and <code>predict</code>, <code>a.b</code>"
    )


def test_results_table_holds_every_run() -> None:
    """The results page's tables are benchmarks/results/learning/final.csv's runs (the last of each env, library,
    seed and budget), each with its commit, each evaluated full run's score, and each sb3 run's check against ppo_dict's."""
    import csv

    from benchmarks.results_report import latest, pair_checks

    with open(HOOKS.RESULTS_CSV, newline="") as f:
        runs = latest(list(csv.DictReader(f)))
    with open(HOOKS.RESULTS_CSV.with_name("curves.csv"), newline="") as f:
        curves = list(csv.DictReader(f))
    table = HOOKS.results_markdown()
    assert runs and all(row["commit"] in table for row in runs)
    for row in runs:
        if row["eval_mean"] and row["planned"] == row["budget"]:
            assert f"{float(row['eval_mean']):g} (seed {row['seed']}" in table
    checks = pair_checks(runs, curves)
    assert checks and all(check.text().split(": ", 1)[1] in table for check in checks)


def test_ledger_page_is_the_ledger_newest_first() -> None:
    page = HOOKS.ledger_newest_first()
    headings = re.findall(r"^### .*$", page, flags=re.M)
    in_file = re.findall(r"^### .*$", HOOKS.LEDGER.read_text(), flags=re.M)
    assert headings == in_file[::-1] and len(headings) > 10
    dates = [re.search(r"\b(2\d{3}-\d\d-\d\d)\b", h).group(1) for h in headings if re.search(r"\b2\d{3}-\d\d-\d\d\b", h)]
    assert dates == sorted(dates, reverse=True)
