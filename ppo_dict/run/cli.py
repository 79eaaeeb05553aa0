"""The command lines: ``main_ppo``'s generated from :class:`~ppo_dict.core.config.Config`'s fields (one
``--flag`` each), and every other command's ``--help`` from the same generator (:func:`command_parser`).

Booleans accept ``--x``, ``--x True`` and ``--x=False``; optional values accept ``None``: exactly
what a wandb sweep agent sends. Unknown and abbreviated flags are argparse errors (exit 2). Values
are read by the fields' own parsers after argparse, so that every unreadable value is listed (with
the other problems, by ``ppo_dict.run.checks.validate``), not only argparse's first.

rl-zoo's spellings are aliases of the same flags (:data:`ALIASES`: ``-n``, ``--trained-agent``,
``--eval-freq``...), ``--hyperparams`` takes rl-zoo's ``key:value`` overrides beside a file, and
``--algo`` takes rl-zoo's ``ppo`` and ``ppo_lstm``. ``--dry_run`` and ``--algo`` are the command line's
own flags, not settings (:data:`COMMAND_LINE_FLAGS`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import textwrap
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn, Optional, Sequence

from ppo_dict.core.config import FIELDS, RECURRENT_MODELS, Config, read_values
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.fields import reads_bool
from ppo_dict.core.parse import parse_bool, parse_kwargs, parse_packages, parse_words
from ppo_dict.interop.hyperparams import ZOO_ALGOS, parse_algo, zoo_values
from ppo_dict.run.flag_tables import ALGO_HELP, ALIASES, COMMAND_LINE_FLAGS, DRY_RUN_HELP, ZOO_FLAGS
from ppo_dict.run.zoo_flags import DEVICE_NOTE, latest_run_id, zoo_env_name  # noqa: F401  (re-exported)
from ppo_dict.run.zoo_flags import rl_zoo_flags, zoo_device_note, zoo_entry_by_default

#: ``python -m ppo_dict.main_ppo --help``'s description (the first paragraph is shown)
MAIN_DOC = """Train PPO with sb3's numbers: ``python -m ppo_dict.main_ppo --env gym_Reacher-v2 --model mlp``. Every
setting is a flag with sb3's name and default; a bad config is refused before anything starts, every
problem listed (``--dry_run`` checks and prints the plan)."""


class FlagParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (not the 60-line usage) with the nearest flag
    names for an unknown one; exit status 2, as argparse's."""

    def error(self, message: str) -> NoReturn:
        flags = [s for action in self._actions for s in action.option_strings]
        unknown = message.partition("unrecognized arguments: ")[2].split()
        near = {word: difflib.get_close_matches(word.split("=")[0], flags, n=1) for word in unknown if word.startswith("-")}
        hints = "".join(f"; {word}: did you mean {match[0]}?" for word, match in near.items() if match)
        self.exit(2, f"{self.prog}: error: {message}{hints} (--help lists every flag)\n")


class Option(NamedTuple):
    """One option or positional argument of a command: its names, its help, its default (shown as
    ``shown`` where given: a default worked out at run time), and argparse's other keyword arguments."""

    names: tuple[str, ...]
    help: str
    default: Any = None
    shown: Optional[str] = None
    kwargs: dict[str, Any] = {}


def plain(text: str) -> str:
    """A docstring's reStructuredText as ``--help`` prints it: ````code```` and ``:func:`~a.b.name``` as plain words."""
    text = re.sub(r":\w+:`~(?:[\w.]*\.)?(\w+)`", r"\1", text)  # :func:`~a.b.name`: name
    text = re.sub(r":\w+:`([^`]+)`", r"\1", text)  # :class:`Config`: Config
    return text.replace("``", "")


def help_text(text: str, default: Optional[str]) -> str:
    """An option's ``--help`` line: its help text (plain), then its default (``%`` doubled: argparse formats
    help strings); ``default`` None: an argument that has none (a positional one)."""
    text = plain(text) if default is None else f"{plain(text)} (default: {default})"
    return text.replace("%", "%%")


def add_option(container: Any, option: Option) -> None:
    """``option`` on a parser or one of its groups, its default in its help."""
    positional = not option.names[0].startswith("-")
    shown = None if positional else option.shown if option.shown is not None else str(option.default)
    kwargs = dict(option.kwargs, help=help_text(option.help, shown))
    if not positional:
        kwargs.setdefault("default", option.default)
    container.add_argument(*option.names, **kwargs)


#: the width ``--help`` wraps a command's description to (its examples, in the epilog, are shown as written)
DESCRIPTION_WIDTH = 78


def description(doc: str) -> str:
    """A command's ``--help`` description: the first paragraph of its module's docstring, plain, wrapped."""
    return textwrap.fill(" ".join(plain(doc.strip().split("\n\n")[0]).split()), DESCRIPTION_WIDTH)


def command_parser(prog: str, doc: str, options: Sequence[Option] = (), epilog: Optional[str] = None) -> FlagParser:
    """A command's parser: its :func:`description` from its module's docstring (``doc``); each option's
    default shown in its help; ``epilog`` (examples) as written; errors in one line (:class:`FlagParser`)."""
    parser = FlagParser(
        prog=prog,
        description=description(doc),
        epilog=epilog and plain(epilog),
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option in options:
        add_option(parser, option)
    return parser


def flag_default(f: dataclasses.Field) -> Any:
    """Field ``f``'s default (a dict field's from its factory)."""
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def default_text(f: dataclasses.Field) -> str:
    """Field ``f``'s default as the flags page prints it: sb3's value, ``None`` where the value is chosen at run time."""
    return str(flag_default(f))


def shown_default(f: dataclasses.Field, default: Any) -> str:
    """The default ``--help`` prints for field ``f``: ``default``, and for None what None means (``None: 256``)."""
    none = f.metadata.get("none", "")
    return f"{default}: {none}" if default is None and none else str(default)


def flag_text(f: dataclasses.Field, spellings: bool = True) -> str:
    """What field ``f``'s flag does, as the flags page says it: its help, what None means, rl-zoo's spellings of it
    (not with ``spellings`` False: the setting as Python names it)."""
    none, aliases = f.metadata.get("none", ""), ALIASES.get(f.name, ()) if spellings else ()
    return (
        f.metadata["help"]
        + (f" (None: {none})" if none else "")
        + (f" (rl-zoo's spelling{'s' * (len(aliases) > 1)}: {', '.join(aliases)})" if aliases else "")
    )


def flag_groups() -> dict[str, list[dataclasses.Field]]:
    """``{--help group: [Config field, ...]}`` in ``--help``'s order: one flag per field, its help text,
    parser, bounds and choices in ``f.metadata``. The one source of ``--help`` and of the flags page of
    the documentation (``docs/hooks/generated.py``)."""
    groups: dict[str, list[dataclasses.Field]] = {}
    for f in dataclasses.fields(Config):
        groups.setdefault(f.metadata["group"], []).append(f)
    return groups


def field_option(f: dataclasses.Field, default: Any, suppress: bool) -> Option:
    """The :class:`Option` of field ``f`` (``--help`` shows ``default``; parsing keeps what is typed, as typed)."""
    kwargs: dict[str, Any] = dict(type=str, dest=f.name)
    if reads_bool(f.metadata["parse"]):
        kwargs.update(nargs="?", const=True, metavar="True|False")
    elif f.metadata["parse"] is parse_packages:
        kwargs.update(nargs="*", metavar="NAME")
    elif f.metadata["parse"] is parse_kwargs:
        kwargs.update(nargs="+", metavar="KWARGS")  # dict(a=1), or rl-zoo's key:value words
    elif f.metadata["parse"] is parse_words:
        kwargs.update(nargs="+", action="extend", metavar="WORD")  # words kept whole, gathered over repeats
    if suppress:
        kwargs["default"] = argparse.SUPPRESS
    return Option((f"--{f.name}", *ALIASES.get(f.name, ())), f.metadata["help"], default, shown_default(f, default), kwargs)


def build_parser(
    prog: str = "python -m ppo_dict.main_ppo",
    suppress_defaults: bool = False,
    defaults: Optional[dict[str, Any]] = None,
    doc: str = MAIN_DOC,
    extra: Optional[dict[str, Sequence[Option]]] = None,
    epilog: Optional[str] = None,
) -> FlagParser:
    """An argparse parser with one ``--flag`` per :class:`Config` field, grouped as the fields are, and the
    command line's own flags (:data:`COMMAND_LINE_FLAGS`). Values are kept as typed (:func:`read_command_line` reads them).

    With ``suppress_defaults`` only the flags given appear in the result (to tell them apart); ``--help``
    shows every default either way, written into the help text. ``defaults``: other defaults to show
    (main_ppo_godot's); ``doc``: the docstring its description is from; ``extra``: ``{group: options}`` a
    command adds (main_ppo_godot's ``--env_path``); ``epilog``: its examples.
    """
    parser = command_parser(prog, doc, epilog=epilog)
    parser.add_argument(
        "--dry_run",
        nargs="?",
        const="True",
        default=argparse.SUPPRESS if suppress_defaults else False,
        type=str,
        metavar="True|False",
        help=help_text(DRY_RUN_HELP, "False"),
    )
    parser.add_argument(
        "--algo",
        default=argparse.SUPPRESS if suppress_defaults else "ppo",
        type=str,
        metavar="|".join(ZOO_ALGOS),
        help=help_text(ALGO_HELP, "ppo"),
    )
    zoo = parser.add_argument_group("rl-zoo's train.py flags")
    for name, (spellings, text, default) in ZOO_FLAGS.items():
        zoo.add_argument(
            *spellings,
            dest=name,
            default=argparse.SUPPRESS,
            help=help_text(text, default),
            **({"nargs": "?", "const": "True", "metavar": "True|False"} if name == "track" else {"metavar": name.upper()}),
        )
    for group_name, fields in flag_groups().items():
        group = parser.add_argument_group(group_name)
        for f in fields:
            add_option(group, field_option(f, (defaults or {}).get(f.name, flag_default(f)), suppress_defaults))
        for option in (extra or {}).get(group_name, ()):
            add_option(group, option)
    return parser


@dataclass
class CommandLine:
    """A command line read once: ``flags`` ``{setting: value}`` for the settings typed, ``unreadable``
    ``{setting: problem}`` for values no parser reads, and the command line's own flags."""

    flags: dict[str, Any]
    unreadable: dict[str, str]
    dry_run: bool = False
    algo: str = "ppo"
    #: what a typed ``--algo`` without ``--hyperparams`` did (rl-zoo's tuned entry, or why sb3's defaults), said at start
    algo_note: str = ""


def read_command_line(argv: Optional[list[str]]) -> CommandLine:
    """Parse ``argv`` once: argparse exits 2 only for what is not a value (an unknown flag, a flag without its
    value); every value no parser reads is in :attr:`CommandLine.unreadable`."""
    given = vars(build_parser(suppress_defaults=True).parse_args(argv))
    own = {name: given.pop(name) for name in COMMAND_LINE_FLAGS if name in given}
    zoo = {name: given.pop(name) for name in ZOO_FLAGS if name in given}
    for name, value in given.items():  # one word of keyword arguments is read, and named, as the text it is
        if FIELDS[name].metadata["parse"] is parse_kwargs and isinstance(value, list) and len(value) == 1:
            given[name] = value[0]
    line = CommandLine(*read_values(given))
    try:
        line.dry_run = parse_bool(own.get("dry_run", False))
    except argparse.ArgumentTypeError as exc:
        line.unreadable["dry_run"] = f"dry_run={own['dry_run']!r}: {exc}"
    try:
        line.algo = parse_algo(own.get("algo", "ppo"))
    except ValueError as exc:
        line.unreadable["algo"] = f"algo={own['algo']!r}: {exc}"
    if "algo" in own and "algo" not in line.unreadable:
        line.algo_note = "\n".join(filter(None, [zoo_entry_by_default(line.flags, line.algo), zoo_device_note(line.flags)]))
    rl_zoo_flags(zoo, line.flags, line.unreadable, line.algo)
    return line


def read_flags(argv: Optional[list[str]]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(flags, unreadable)`` of :func:`read_command_line`, ``dry_run`` among the flags when it was given."""
    line = read_command_line(argv)
    return {**line.flags, **({"dry_run": line.dry_run} if line.dry_run else {})}, line.unreadable


def explicit_flags(argv: Optional[list[str]]) -> dict[str, Any]:
    """``{setting: value}`` for the settings given on the command line (parsed); one :class:`ConfigError`
    lists every value no parser reads."""
    line = read_command_line(argv)
    if line.unreadable:
        raise ConfigError(list(line.unreadable.values()))
    return line.flags


def config_from_args(
    argv: Optional[list[str]] = None, base: Optional[dict[str, Any]] = None, pinned: Optional[dict[str, Any]] = None
) -> Config:
    """Parse a command line into a :class:`Config` (not yet checked: ``ppo_dict.run.checks.validate``);
    argparse exits 2 on unknown flags, :class:`ConfigError` lists the values no parser reads.
    See :func:`read_config`."""
    line = read_command_line(argv)
    cfg, unreadable = read_config(line.flags, base, pinned, line.algo)
    if line.unreadable or unreadable:
        raise ConfigError(list({**line.unreadable, **unreadable}.values()))
    return cfg


def config_from_flags(
    given: dict[str, Any], base: Optional[dict[str, Any]] = None, pinned: Optional[dict[str, Any]] = None
) -> Config:
    """The :class:`Config` of a command line parsed once (``given``: :func:`explicit_flags`); raises
    one :class:`ConfigError` for values no parser reads. See :func:`read_config`."""
    cfg, unreadable = read_config(given, base, pinned)
    if unreadable:
        raise ConfigError(list(unreadable.values()))
    return cfg


def read_config(
    given: dict[str, Any], base: Optional[dict[str, Any]] = None, pinned: Optional[dict[str, Any]] = None, algo: str = "ppo"
) -> tuple[Config, dict[str, str]]:
    """``(config, unreadable)`` (:meth:`Config.read`) of a command line read once (``given``:
    :attr:`CommandLine.flags`; ``algo``: its ``--algo``).

    Precedence, lowest first: sb3's defaults, ``base`` (a resumed checkpoint's config, or a
    trained agent's saved hyperparameters), ``--algo ppo_lstm``'s recurrent model, the ``--hyperparams``
    file's entry for the env and its ``key:value`` overrides, ``pinned`` (what a trained agent fixes: its
    policy), then the flags typed.
    """
    layered: dict[str, Any] = dict(base or {})
    if ZOO_ALGOS[algo] and str(layered.get("model", "")) not in RECURRENT_MODELS:
        layered["model"] = RECURRENT_MODELS[0]
    words = given.get("hyperparams", layered.get("hyperparams"))
    if words and ("resume" not in given or "hyperparams" in given):  # a resumed config holds what its words gave
        env = given.get("env", layered.get("env", FIELDS["env"].default))
        recurrent = str(given.get("model", layered.get("model", ""))) in RECURRENT_MODELS  # rl_zoo3: its ppo_lstm.yml
        layered.update(zoo_values(parse_words(words), env, recurrent, read_file="resume" not in given)[0])
    layered.update(pinned or {})
    layered.update(given)
    cfg, unreadable = Config.read(layered)  # the dataclass fills in sb3's defaults
    if ZOO_ALGOS[algo] and not cfg.recurrent:
        unreadable["algo"] = (
            f"algo={algo!r}: sb3-contrib's RecurrentPPO trains a recurrent model (--model "
            f"{' or '.join(RECURRENT_MODELS)}), not model={cfg.model!r}"
        )
    return cfg, unreadable
