"""The command line generated from :class:`~ppo_dict.core.config.Config`'s fields: one ``--flag`` each.

Booleans accept ``--x``, ``--x True`` and ``--x=False``; optional values accept ``None``: exactly
what a wandb sweep agent sends. Unknown and abbreviated flags are argparse errors (exit 2). Values
are read by the fields' own parsers after argparse, so that every unreadable value is listed (with
the other problems, by ``ppo_dict.run.checks.validate``), not only argparse's first.

``--dry_run`` is the command line's own flag, not a setting: check the config, print the run plan,
start nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
from typing import Any, NoReturn, Optional

from ppo_dict.core.config import FIELDS, RECURRENT_MODELS, Config, read_values
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.fields import reads_bool
from ppo_dict.core.parse import parse_bool, parse_packages
from ppo_dict.interop.hyperparams import load_hyperparams


class FlagParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (not the 60-line usage) with the nearest flag
    names for an unknown one; exit status 2, as argparse's."""

    def error(self, message: str) -> NoReturn:
        flags = [s for action in self._actions for s in action.option_strings]
        unknown = message.partition("unrecognized arguments: ")[2].split()
        near = {word: difflib.get_close_matches(word.split("=")[0], flags, n=1) for word in unknown if word.startswith("-")}
        hints = "".join(f"; {word}: did you mean {match[0]}?" for word, match in near.items() if match)
        self.exit(2, f"{self.prog}: error: {message}{hints} (--help lists every flag)\n")


def build_parser(prog: str = "python -m ppo_dict.main_ppo", suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag`` per :class:`Config` field, grouped as the fields are,
    and ``--dry_run``. Values are kept as typed (:func:`read_flags` reads them).

    With ``suppress_defaults`` only the flags given appear in the result (to tell them apart); ``--help``
    shows every default either way: it is written into the help text (:func:`help_text`), not left to
    argparse, which shows none for a suppressed default.
    """
    parser = FlagParser(prog=prog, allow_abbrev=False)
    for group_name, fields in flag_groups().items():
        group = parser.add_argument_group(group_name)
        for f in fields:
            kwargs: dict[str, Any] = dict(default=flag_default(f), help=help_text(f.metadata["help"], default_text(f)), type=str)
            if reads_bool(f.metadata["parse"]):
                kwargs.update(nargs="?", const=True, metavar="True|False")
            elif f.metadata["parse"] is parse_packages:
                kwargs.update(nargs="*", metavar="NAME")
            if suppress_defaults:
                kwargs["default"] = argparse.SUPPRESS
            group.add_argument(f"--{f.name}", **kwargs)
    parser.add_argument("--dry_run", nargs="?", const="True", default=argparse.SUPPRESS if suppress_defaults else False,
                        type=str, metavar="True|False", help=help_text(DRY_RUN_HELP, "False"))
    return parser


#: ``--dry_run``'s help: the command line's own flag, not a :class:`Config` field (the flags page shows it too)
DRY_RUN_HELP = ("check the config (every problem, the machine's resources included), print the run plan and exit "
                "without starting any process (0: the run would start; 2: it would be refused)")


def help_text(text: str, default: str) -> str:
    """A flag's ``--help`` line: its help text, then its default as the flags page shows it
    (``%`` doubled: argparse formats help strings)."""
    return f"{text} (default: {default})".replace("%", "%%")


def read_flags(argv: Optional[list[str]]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(flags, unreadable)``: ``{field: value}`` read for the flags actually given on the command
    line (plus ``dry_run`` when given), and ``{field: problem}`` for values no parser reads.
    argparse exits 2 only for what is not a value: an unknown flag, a flag without its value."""
    given = vars(build_parser(suppress_defaults=True).parse_args(argv))
    dry_run = given.pop("dry_run", None)
    flags, unreadable = read_values(given)
    if dry_run is not None:
        try:
            flags["dry_run"] = parse_bool(dry_run)
        except argparse.ArgumentTypeError as exc:
            unreadable["dry_run"] = f"dry_run={dry_run!r}: {exc}"
    return flags, unreadable


def flag_groups() -> dict[str, list[dataclasses.Field]]:
    """``{--help group: [Config field, ...]}`` in ``--help``'s order: one flag per field, its help text,
    parser, bounds and choices in ``f.metadata``. The one source of ``--help`` and of the flags page of
    the documentation (``docs/hooks/generated.py``)."""
    groups: dict[str, list[dataclasses.Field]] = {}
    for f in dataclasses.fields(Config):
        groups.setdefault(f.metadata["group"], []).append(f)
    return groups


def flag_default(f: dataclasses.Field) -> Any:
    """The default ``--help`` shows for field ``f`` (a dict field's from its factory)."""
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def default_text(f: dataclasses.Field) -> str:
    """Field ``f``'s default as ``--help`` and the flags page print it: sb3's value, ``None`` where the
    value is chosen at run time (the help text says how)."""
    return str(flag_default(f))


def explicit_flags(argv: Optional[list[str]]) -> dict[str, Any]:
    """``{field: value}`` for the flags actually given on the command line (parsed); one
    :class:`ConfigError` lists every value no parser reads."""
    flags, unreadable = read_flags(argv)
    if unreadable:
        raise ConfigError(list(unreadable.values()))
    return flags


def config_from_args(argv: Optional[list[str]] = None, base: Optional[dict[str, Any]] = None,
                     pinned: Optional[dict[str, Any]] = None) -> Config:
    """Parse a command line into a :class:`Config` (not yet checked: ``ppo_dict.run.checks.validate``);
    argparse exits 2 on unknown flags, :class:`ConfigError` lists the values no parser reads.
    See :func:`config_from_flags`."""
    flags = explicit_flags(argv)
    flags.pop("dry_run", None)
    return config_from_flags(flags, base, pinned)


def config_from_flags(given: dict[str, Any], base: Optional[dict[str, Any]] = None, pinned: Optional[dict[str, Any]] = None) -> Config:
    """The :class:`Config` of a command line parsed once (``given``: :func:`explicit_flags`); raises
    one :class:`ConfigError` for values no parser reads. See :func:`read_config`."""
    cfg, unreadable = read_config(given, base, pinned)
    if unreadable:
        raise ConfigError(list(unreadable.values()))
    return cfg


def read_config(given: dict[str, Any], base: Optional[dict[str, Any]] = None,
                pinned: Optional[dict[str, Any]] = None) -> tuple[Config, dict[str, str]]:
    """``(config, unreadable)`` (:meth:`Config.read`) of a command line read once (``given``:
    :func:`read_flags`' flags, ``dry_run`` left out).

    Precedence, lowest first: sb3's defaults, ``base`` (a resumed checkpoint's config, or a
    trained agent's saved hyperparameters), the ``--hyperparams`` file's entry for the env,
    ``pinned`` (what a trained agent fixes: its policy), then the flags actually typed.
    """
    layered: dict[str, Any] = dict(base or {})
    hyperparams_file = given.get("hyperparams", layered.get("hyperparams"))
    if hyperparams_file and "resume" not in given:
        env = given.get("env", layered.get("env", FIELDS["env"].default))
        recurrent = str(given.get("model", layered.get("model", ""))) in RECURRENT_MODELS  # rl_zoo3: its ppo_lstm.yml
        layered.update(load_hyperparams(hyperparams_file, env, recurrent)[0])
    layered.update(pinned or {})
    layered.update(given)
    return Config.read(layered)  # the dataclass fills in sb3's defaults
