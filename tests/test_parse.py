"""Value parsers: every spelling a person, a YAML file or a wandb agent writes, and nothing evaluated."""
import pytest

from ppo_dict.core.parse import parse_net_arch


@pytest.mark.parametrize("text, expected", [
    ("64,64", [64, 64]),
    ("[256, 256]", [256, 256]),
    ("pi=256,256;vf=128", {"pi": [256, 256], "vf": [128]}),
    ("dict(pi=[32], vf=[16, 16])", {"pi": [32], "vf": [16, 16]}),
    ("{'pi': [8], 'vf': [8]}", {"pi": [8], "vf": [8]}),
    ("[dict(pi=[4], vf=[4])]", {"pi": [4], "vf": [4]}),
    ("[]", []),
])
def test_net_arch_spellings(text, expected) -> None:
    assert parse_net_arch(text) == expected


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "dict(pi=os.getcwd())", "[-1]", "pi=a,b"])
def test_net_arch_is_parsed_safely(text) -> None:
    with pytest.raises((ValueError, SyntaxError)):
        parse_net_arch(text)
