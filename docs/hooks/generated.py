"""MkDocs hook: the pages that are generated when the site is built, so that they cannot drift.

* ``flags.md``: every ``python -m ppo_dict.main_ppo`` flag, from ``Config``'s field metadata through
  ``ppo_dict.run.cli.flag_groups`` (the source ``--help`` is built from), then the ``--help`` of the
  other command lines, captured from their own parsers.
* ``speed.md``, ``index.md`` and ``perf_log.md``: the headline speed table, from ``docs/figures/speed.csv``
  (the file ``docs/figures/speed.py`` draws ``docs/img/speed.png`` from).
* ``results.md``: the returns and runs tables, from ``benchmarks/results/learning/final.csv`` and ``curves.csv``
  (``benchmarks/results.py`` appends to them), beside rl-zoo's published scores (``benchmarks/zoo_setup.py``).
* ``perf_log.md``: the repository's ``perf_log.md`` (the benchmarks append to it, oldest first), its
  entries newest first.
* ``api.md``: ``Config``'s fields, and the constructor parameters of sb3's API (its classes take
  ``*args, **kwargs``, bound against sb3's own signature, which the docstrings' renderer cannot see).

The docstrings' Sphinx roles (``:class:`~ppo_dict.core.config.Config```) are shown as the code they name
(``on_page_content``), not as raw text.

A page asks for a generated part with a marker line (``generated_parts``); a page that has the marker gets
the part in its place. ``tests/test_docs.py`` imports this file to check the flags page is complete.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import html
import io
import os
import re
import textwrap
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
SPEED_CSV = ROOT / "docs" / "figures" / "speed.csv"
LEDGER = ROOT / "perf_log.md"
RESULTS_CSV = ROOT / "benchmarks" / "results" / "learning" / "final.csv"

#: --help group -> the heading the flags page gives it (a group not named here is shown by its own name)
GROUP_TITLES = {
    "env": "Environment",
    "pixels": "Pixel observations",
    "atari": "Atari games",
    "policy": "Policy",
    "recurrent": "Recurrent policies (LSTM)",
    "ppo": "PPO",
    "normalize": "Normalisation",
    "workers": "Worker processes",
    "system": "System and output",
    "run": "Run directory, checkpoints and resume",
    "eval": "Evaluation and video",
    "tracking": "Experiment tracking (Weights & Biases)",
}
#: a flag's parser (by its name; ``none_or`` keeps the name of the parser it wraps) -> the values it reads
VALUE_KINDS = {
    "parse_bool": "`True` or `False` (`--flag` alone: `True`)",
    "parse_schedule": "a number, or `lin_<x>` (linear from x to 0)",
    "parse_net_arch": "layer sizes: `64,64`, `pi=256,256;vf=256,256`, `[256, 256]`, `dict(pi=[256], vf=[256])`",
    "parse_kwargs": "keyword arguments: `dict(key=value, ...)`, or rl-zoo's `key:value` words",
    "parse_lstm_kwargs": "keyword arguments of the LSTMs: `dict(dropout=0.1, bias=True)`",
    "parse_packages": "names, separated by commas or spaces",
    "parse_words": "a file (or `rl_zoo3`) and rl-zoo's `key:value` words",
    "int": "an integer",
    "whole_number": "an integer (`1e6` is read as 1000000)",
    "float": "a number",
    "str": "text",
}
#: the other command lines whose --help the flags page shows, in this order
COMMANDS = ("ppo_dict.main_ppo_godot", "ppo_dict.enjoy", "ppo_dict.plot", "ppo_dict.export_onnx", "ppo_dict.sweep")


def cell(text: str) -> str:
    """``text`` as plain text inside a Markdown table cell: no HTML, emphasis, links or column breaks."""
    text = html.escape(str(text), quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


def code(text: str) -> str:
    """``text`` as inline code inside a table cell (a pipe would end the cell: written as an entity)."""
    return "<code>" + html.escape(str(text), quote=False).replace("|", "&#124;") + "</code>"


def values_of(f: dataclasses.Field) -> str:
    """What a flag accepts: its choices, else the kind its parser reads; then its bounds, and None."""
    meta = f.metadata
    if meta["choices"]:
        kind = " ".join(f"`{choice}`" for choice in meta["choices"])
    else:
        kind = VALUE_KINDS.get(getattr(meta["parse"], "__name__", ""), f"`{f.type}`")
    if meta["range"] is not None:
        lo, hi, lo_open, hi_open = (*meta["range"], False, False)[:4]
        kind += f", in `{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}`"
    if f.default is None:
        kind += ", or `None`"
    return kind


TABLE_HEAD = ["| flag | default | values | what it does |", "| --- | --- | --- | --- |"]


def flag_row(name: str, default: str, values: str, help_text: str) -> str:
    """One row of the flags reference (its anchor: the flag's name, so that ``flags.md#seed`` links)."""
    return f'| <a id="{name}"></a>`--{name}` | {code(default)} | {values} | {cell(help_text)} |'


#: the command line's own flags (``ppo_dict.run.cli.COMMAND_LINE_FLAGS``): their default and the values they take
OWN_FLAGS = {"dry_run": ("False", VALUE_KINDS["parse_bool"]), "algo": ("ppo", "`ppo` `ppo_lstm`")}


#: the values rl-zoo's train.py flags take (``ppo_dict.run.cli.ZOO_FLAGS``)
ZOO_VALUES = {
    "log_folder": "a folder",
    "track": VALUE_KINDS["parse_bool"],
    "vec_env": "`dummy` `subproc`",
    "num_threads": "an integer",
    "n_eval_envs": "`1`",
}


def zoo_flags_markdown() -> list[str]:
    """rl-zoo's ``train.py`` flags that are no setting here (``ppo_dict.run.cli.ZOO_FLAGS``), a table in ``--help``'s
    order, each row under its spellings (its anchor: the name they are read under)."""
    from ppo_dict.run.cli import ZOO_FLAGS

    out = [
        "## rl-zoo's train.py flags",
        "",
        "`--help` group `rl-zoo's train.py flags`; not settings: each sets the settings "
        "that mean the same here, or is refused naming them.",
        "",
        *TABLE_HEAD,
    ]
    for name, (spellings, text, default) in ZOO_FLAGS.items():
        out.append(
            f'| <a id="{name}"></a>{" ".join(f"`{s}`" for s in spellings)} | {code(default)} | {ZOO_VALUES[name]} | '
            f"{cell(text)} |"
        )
    return out + [""]


def flags_markdown(
    flag_groups: Callable[[], dict[str, list[dataclasses.Field]]],
    default_text: Callable[[dataclasses.Field], str],
    own_flags: dict[str, str],
    flag_text: Callable[[dataclasses.Field], str],
) -> str:
    """The flags reference, in ``--help``'s order: the command line's own flags (``own_flags``: ``{name: help}``,
    in ``--help``'s `options`), then one table per ``--help`` group, one row per flag (``flag_text``: what it does)."""
    out = [
        "## The command line's own flags",
        "",
        "`--help` group `options`; not settings (not saved with a run).",
        "",
        *TABLE_HEAD,
    ]
    out += [flag_row(name, *OWN_FLAGS[name], text) for name, text in own_flags.items()] + [""]
    out += zoo_flags_markdown()
    for group, fields in flag_groups().items():
        out += [f"## {GROUP_TITLES.get(group, group)}", "", f"`--help` group `{group}`.", "", *TABLE_HEAD]
        out += [flag_row(f.name, default_text(f), values_of(f), flag_text(f)) for f in fields]
        out.append("")
    return "\n".join(out)


def command_help(module: str, width: int = 78) -> str:
    """What ``python -m <module> --help`` prints, from the module's own parser (in this process)."""
    import importlib

    main = importlib.import_module(module).main
    buffer = io.StringIO()
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)  # argparse wraps at the terminal's width: the page's, not the builder's
    try:
        with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
            main(["--help"])
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return buffer.getvalue().rstrip()


def commands_markdown() -> str:
    """A section per other command line, each with its ``--help`` (main_ppo_godot's without main_ppo's flags,
    which the tables above list: its description, the defaults it changes, its own ``--env_path``, its examples)."""
    out = []
    for module in COMMANDS:
        text = command_help(module)
        if module == "ppo_dict.main_ppo_godot":
            text = godot_help(text)
        out += [f"### `python -m {module}`", "", "```text", text, "```", ""]
    return "\n".join(out)


def godot_help(text: str) -> str:
    """main_ppo_godot's ``--help`` less main_ppo's flags: its description, the defaults it gives them, ``--env_path``,
    examples."""
    from ppo_dict.main_ppo_godot import DEMO_DEFAULTS, DEMO_LAYOUT

    description = text.split("\n\n", 1)[1].split("\n\noptions:", 1)[0]
    env_path = re.search(r"\n(  --env_path .*?)(?=\n  -|\n\n)", text, flags=re.S).group(1)  # type: ignore[union-attr]
    defaults = ", ".join(f"--{name} {value}" for name, value in {**DEMO_DEFAULTS, **DEMO_LAYOUT}.items())
    flags = textwrap.fill(f"main_ppo's flags (above), with these defaults: {defaults}; and:", 78)
    return (
        f"usage: python -m ppo_dict.main_ppo_godot [--env_path PATH] [main_ppo's flags]\n\n{description}\n\n"
        f"{flags}\n{env_path}\n\n{text[text.index('examples:') :]}"
    )


def speed_rows(path: Path = SPEED_CSV) -> list[dict[str, str]]:
    """The headline figures: one row per workload (``docs/figures/speed.csv``)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def speed_markdown(rows: list[dict[str, str]]) -> str:
    """The headline speed table, as the speed page and the index show it (README gives its range: ``tests/test_docs.py``)."""
    out = ["| workload | ppo_dict / sb3 | over the rounds | measured by, on |", "| --- | --- | --- | --- |"]
    for row in rows:
        out.append(
            f"| {row['workload']} | **{row['ratio']}x** | {row['low']}-{row['high']} | `{row['benchmark']}`, {row['where']} |"
        )
    return "\n".join(out)


def ledger_newest_first(path: Path = LEDGER) -> str:
    """The ledger's entries (each from its ``### `` heading to the next), newest first: the benchmarks
    append, so the file's order is the order of the runs."""
    text = path.read_text()
    entries = re.split(r"\n(?=### )", text[text.index("\n### ") + 1 :])
    return "\n".join(entry.rstrip() + "\n" for entry in reversed(entries))


def results_markdown(path: Path = RESULTS_CSV) -> str:
    """The results page's tables (``benchmarks/results_report.py``): returns per env beside sb3's and rl-zoo's
    published scores, then every run with its wall time, its check against sb3's curve, commit and host."""
    import importlib
    import sys

    if str(ROOT) not in sys.path:  # the repository's benchmarks package, wherever mkdocs runs from
        sys.path.insert(0, str(ROOT))
    report = importlib.import_module("benchmarks.results_report")

    def rows(csv_path: Path) -> list[dict[str, str]]:
        with open(csv_path, newline="") as f:
            return list(csv.DictReader(f))

    return report.table_markdown(rows(path), rows(path.with_name("curves.csv")))


def config_fields_markdown() -> str:
    """``Config``'s fields for the API reference: name, type, default and what each is (the flag's text)."""
    from ppo_dict.run.cli import default_text, flag_groups, flag_text

    out = ["| field | type | default | what it is |", "| --- | --- | --- | --- |"]
    for fields in flag_groups().values():
        out += [
            f"| `{f.name}` | {code(f.type)} | {code(default_text(f))} | {cell(flag_text(f, spellings=False))} "
            f"([flag](flags.md#{f.name})) |"
            for f in fields
        ]
    return "\n".join(out)


def constructor_markdown() -> str:
    """The constructor parameters of sb3's API (``PPO``, ``MaskablePPO``, ``RecurrentPPO``): sb3's own signature, bound
    as sb3 binds it (``ppo_dict.api.algorithms``), then ppo_dict's keyword-only settings, each with its flag's text."""
    import inspect

    from ppo_dict.api.algorithms import ALGORITHMS
    from ppo_dict.core.config import FIELDS
    from ppo_dict.run.cli import flag_text

    out = []
    for name, spec in ALGORITHMS.items():
        out += [
            f"### `{name}(...)`",
            "",
            f"`{spec.sb3_class.replace(':', '.')}`'s parameters, then ppo_dict's keyword-only settings.",
            "",
            "| parameter | default | what it is |",
            "| --- | --- | --- |",
        ]
        for parameter in spec.signature().parameters.values():
            default = "required" if parameter.default is inspect.Parameter.empty else repr(parameter.default)
            field = FIELDS.get(parameter.name)
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:  # ppo_dict's settings: the flag's text, as Python names it
                text = f"ppo_dict's setting: {cell(flag_text(field, spellings=False))} ([flag](flags.md#{parameter.name}))"
            elif field is not None and field.metadata["group"] == "ppo":
                # a PPO hyperparameter: sb3's meaning, the flag's words
                text = f"sb3's: {cell(field.metadata['help'])}"
            else:
                text = f"sb3's, as `{spec.sb3_class.replace(':', '.')}` takes it"
            out.append(f"| `{parameter.name}` | {code(default)} | {text} |")
        out.append("")
    return "\n".join(out)


def generated_parts() -> dict[str, Callable[[], str]]:
    """``{marker line: what replaces it}``."""
    from ppo_dict.run.cli import COMMAND_LINE_FLAGS, default_text, flag_groups, flag_text

    return {
        "<!-- generated: flags -->": lambda: (
            f'<div class="flags" '
            f"markdown>\n\n"
            f"{flags_markdown(flag_groups, default_text, COMMAND_LINE_FLAGS, flag_text)}"
            "\n</div>"
        ),
        "<!-- generated: commands -->": commands_markdown,
        "<!-- generated: speed table -->": lambda: speed_markdown(speed_rows()),
        "<!-- generated: ledger, newest first -->": ledger_newest_first,
        "<!-- generated: results table -->": results_markdown,
        "<!-- generated: config fields -->": config_fields_markdown,
        "<!-- generated: constructor parameters -->": constructor_markdown,
    }


#: a Sphinx role the docstrings use (``:class:`~a.b.Config```), as mkdocstrings renders it: the role's name, then code
SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):<code>(~?)([^<]*)</code>")


def plain_role(found: "re.Match[str]") -> str:
    """A role as the code it names (``~a.b.Config``: ``Config``, as Sphinx shows it)."""
    target = found.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if found.group(1) else target}</code>"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: the docstrings' Sphinx roles (the API reference renders them as text) shown as the code they name."""
    return SPHINX_ROLE.sub(plain_role, html)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: put each generated part where its marker line stands."""
    for marker, make in generated_parts().items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
