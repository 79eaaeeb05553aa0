"""The command line generated from :class:`~ppo_dict.core.config.Config`'s fields: one ``--flag`` each.

Booleans accept ``--x``, ``--x True`` and ``--x=False``; optional values accept ``None``: exactly
what a wandb sweep agent sends. Unknown and abbreviated flags are argparse errors (exit 2).
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Optional

from ppo_dict.core.config import FIELDS, RECURRENT_MODELS, Config
from ppo_dict.core.fields import reads_bool
from ppo_dict.core.parse import parse_packages
from ppo_dict.interop.hyperparams import load_hyperparams


def build_parser(prog: str = "python -m ppo_dict.main_ppo", suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag`` per :class:`Config` field, grouped as the fields are.

    With ``suppress_defaults`` only the flags given appear in the result (to tell them apart).
    """
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for group_name, fields in flag_groups().items():
        group = parser.add_argument_group(group_name)
        for f in fields:
            kwargs: dict[str, Any] = dict(default=flag_default(f), help=f.metadata["help"], type=f.metadata["parse"])
            if reads_bool(f.metadata["parse"]):
                kwargs.update(nargs="?", const=True, metavar="True|False")
            elif f.metadata["parse"] is parse_packages:
                kwargs.update(nargs="*", type=str, metavar="NAME")
            if suppress_defaults:
                kwargs["default"] = argparse.SUPPRESS
            group.add_argument(f"--{f.name}", **kwargs)
    return parser


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


def explicit_flags(argv: Optional[list[str]]) -> dict[str, Any]:
    """``{field: value}`` for the flags actually given on the command line (parsed)."""
    ns = build_parser(suppress_defaults=True).parse_args(argv)
    return {k: parse_packages(v) if k in ("gym_packages", "tags") else v for k, v in vars(ns).items()}


def config_from_args(argv: Optional[list[str]] = None, base: Optional[dict[str, Any]] = None,
                     pinned: Optional[dict[str, Any]] = None) -> Config:
    """Parse a command line into a :class:`Config` (not yet checked: ``ppo_dict.run.checks.validate``);
    argparse exits 2 on unknown flags or bad values. See :func:`config_from_flags`."""
    return config_from_flags(explicit_flags(argv), base, pinned)


def config_from_flags(given: dict[str, Any], base: Optional[dict[str, Any]] = None, pinned: Optional[dict[str, Any]] = None) -> Config:
    """The :class:`Config` of a command line parsed once (``given``: :func:`explicit_flags`).

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
    return Config(**layered)  # the dataclass fills in sb3's defaults
