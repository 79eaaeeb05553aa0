"""Value parsers: every spelling a person, a YAML file or a wandb agent writes, and nothing evaluated."""

import pytest

from ppo_dict.core.parse import parse_net_arch


@pytest.mark.parametrize(
    "text, expected",
    [
        ("64,64", [64, 64]),
        ("[256, 256]", [256, 256]),
        ("pi=256,256;vf=128", {"pi": [256, 256], "vf": [128]}),
        ("dict(pi=[32], vf=[16, 16])", {"pi": [32], "vf": [16, 16]}),
        ("{'pi': [8], 'vf': [8]}", {"pi": [8], "vf": [8]}),
        ("[dict(pi=[4], vf=[4])]", {"pi": [4], "vf": [4]}),
        ("[]", []),
    ],
)
def test_net_arch_spellings(text, expected) -> None:
    assert parse_net_arch(text) == expected


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "dict(pi=os.getcwd())", "[-1]", "pi=a,b"])
def test_net_arch_is_parsed_safely(text) -> None:
    with pytest.raises((ValueError, SyntaxError)):
        parse_net_arch(text)


@pytest.mark.parametrize(
    "text, why",
    [
        ("64,,64", "item 2 is empty (write sizes as 64,64)"),
        ("64,64,", "item 3 is empty (write sizes as 64,64)"),
        (",64", "item 1 is empty (write sizes as 64,64)"),
        ("64,abc", "item 2 is not an integer: 'abc'"),
        ("pi=64,,64;vf=32", "item 2 of pi= (part 1) is empty (write sizes as 64,64)"),
        ("pi=64;vf=32,x", "item 2 of vf= (part 2) is not an integer: 'x'"),
        ("pi=64;pi=32", "part 2 gives pi= again"),
        ("[True, 64]", "net_arch must be a list of positive ints or dict(pi=[..], vf=[..]), got [True, 64]"),
        ("dict(pi=64)", "net_arch must be a list of positive ints or dict(pi=[..], vf=[..]), got {'pi': 64}"),
    ],
)
def test_a_malformed_list_is_refused_naming_the_position(text: str, why: str) -> None:
    """A typo in a list of sizes would silently change the network (``64,,64`` was read as ``[64, 64]``)."""
    with pytest.raises(ValueError) as exc:
        parse_net_arch(text)
    assert str(exc.value) == why
    assert parse_net_arch("pi=;vf=8") == {"pi": [], "vf": [8]} and parse_net_arch(" 64 , 32 ") == [64, 32]


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "not a Python literal ('{' was never closed): '{'"),
        ("{1: 2}", "keyword argument names must be identifiers, got 1"),
        ("[1]", "expected dict(...) of keyword arguments, got '[1]'"),
    ],
)
def test_unreadable_env_kwargs_are_value_errors(text: str, why: str) -> None:
    from ppo_dict.core.parse import parse_kwargs

    with pytest.raises(ValueError) as exc:
        parse_kwargs(text)
    assert str(exc.value) == why


def test_a_linear_schedule_without_a_number_says_how_to_write_one() -> None:
    from ppo_dict.core.parse import parse_schedule

    for text in ("lin_", "lin_abc"):
        with pytest.raises(ValueError, match=f"a linear schedule is lin_<initial value>, got '{text}'"):
            parse_schedule(text)
