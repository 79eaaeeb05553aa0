"""Readers of hostile text refuse in one message, however deep or large the input (issue 59): the bounded JSON and CSV
readers (``ppo_dict.core.bounded``), ``safe_literal`` (``ppo_dict.core.parse``) and an rl-zoo hyperparameter entry
(``ppo_dict.interop.hyperparams.translate``), and through the command line, exit 2 without a traceback."""

from __future__ import annotations

import io

import pytest

from ppo_dict.core import bounded
from ppo_dict.core.parse import safe_literal
from ppo_dict.interop.hyperparams import ATARI_WRAPPER, translate
from ppo_dict.main_ppo import main


@pytest.mark.parametrize(
    "text, said",
    [
        ("[" * 100 + "]" * 100, "its JSON nests 100 deep; ppo_dict reads at most 32"),
        ('{"a": ' * 40 + "1" + "}" * 40, "its JSON nests 40 deep"),
        ("[" * 100_000, "its JSON nests 100000 deep"),
        ('{"t": }', "not JSON"),
    ],
)
def test_json_is_refused_past_its_depth_before_it_is_parsed(text: str, said: str) -> None:
    with pytest.raises(ValueError, match="^f: " + said.replace("[", r"\[")):
        bounded.loads(text, "f")
    assert bounded.loads('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "f") == {"a": "[" * 41}  # brackets in a string


@pytest.mark.parametrize(
    "text, said",
    [
        ("a,b\n1,2,3\n", "f: line 2 has 3 cells, its header 2"),
        ("a,b\n1\n", "f: line 2 has 1 cells, its header 2"),
        ("a,a\n1,2\n", "f: line 1 is no header"),
        ("a,\n1,2\n", "f: line 1 is no header"),
        ("a,b\n" + "1" * 2000 + ",2\n", "f: line 2 has a cell of 2,000 characters; ppo_dict reads at most 1,024"),
        ("a,b\n" + "1" * 200_000 + ",2\n", "f: line 2: not CSV (field larger than field limit"),
        ("a\n" + "x" * (2**20 + 10), "f: line 2 is over 1,048,576 characters long"),
        ('a,b\n"1,2\n', "f: line 2 has 1 cells, its header 2"),  # a quote never closed: one cell
    ],
)
def test_a_table_is_bounded_and_as_wide_as_its_header(text: str, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        list(bounded.table(io.StringIO(text, newline=""), "f"))
    assert str(caught.value).startswith(said), caught.value


def test_a_table_that_reads_gives_its_rows_with_their_lines() -> None:
    assert list(bounded.table(io.StringIO('a,b\n\n1,"x,y"\n', newline=""), "f")) == [(1, ["a", "b"]), (3, ["1", "x,y"])]
    assert bounded.whole_step("1e3") == 1000 and bounded.whole_step("1e30") is None and bounded.whole_step("-1") is None


@pytest.mark.parametrize(
    "text",
    [
        "dict(net_arch=" + "[" * 100_000 + "]" * 100_000 + ")",
        "dict(a=" + "-" * 9000 + "1)",
        "dict(a=" + "x." * 4900 + "y)",
        "~" * 9990 + "1",
        "[" * 3000 + "]" * 3000,
    ],
)
def test_safe_literal_refuses_any_depth_or_size_in_one_message(text: str) -> None:
    """A 200 KB nested policy_kwargs raised MemoryError or RecursionError out of ast.parse."""
    with pytest.raises(ValueError) as caught:
        safe_literal(text)
    assert len(str(caught.value)) < 300
    assert safe_literal("dict(net_arch=dict(pi=[64, 64], vf=[64]), activation_fn=nn.Tanh)") == {
        "net_arch": {"pi": [64, 64], "vf": [64]},
        "activation_fn": "nn.Tanh",
    }


@pytest.mark.parametrize(
    "entry, said",
    [
        ({"env_wrapper": [{ATARI_WRAPPER: [1, 2]}]}, f"w: env_wrapper: {ATARI_WRAPPER}'s arguments are [1, 2], not a mapping"),
        ({"normalize": {"norm_obs": [1]}}, "w: norm_obs=[1]: expected a boolean (True/False), got [1]"),
        ({"normalize": "dict(norm_obs='maybe')"}, "w: norm_obs='maybe': expected a boolean"),
        ({"policy_kwargs": "dict(net_arch=" + "[" * 5000 + "]" * 5000 + ")"}, "w: policy_kwargs='dict(net_arch=[[[[["),
    ],
)
def test_an_rl_zoo_entry_of_hostile_values_is_problems_not_exceptions(entry, said: str) -> None:
    """A list of AtariWrapper arguments raised AttributeError; norm_obs: [1] reached argparse's internal message."""
    values, problems = translate(entry, "w")
    assert len(problems) == 1 and problems[0].startswith(said) and len(problems[0]) < 400, problems


@pytest.mark.parametrize(
    "body",
    [
        '  policy_kwargs: "dict(net_arch=' + "[" * 100_000 + "]" * 100_000 + ')"',
        "  policy_kwargs: " + "[" * 100_000 + "]" * 100_000,
        "  normalize: {norm_obs: [1]}",
        f"  env_wrapper:\n    - {ATARI_WRAPPER}: [1, 2]",
    ],
)
def test_a_hostile_hyperparameter_file_is_one_refusal(tmp_path, capsys, body: str) -> None:
    path = tmp_path / "hp.yml"
    path.write_text("CartPole-v1:\n" + body + "\n")
    for extra in ([], ["--dry_run"]):
        capsys.readouterr()
        code = main(
            [
                "--env",
                "gym_CartPole-v1",
                "--hyperparams",
                str(path),
                "--num_workers",
                "0",
                "--total_timesteps",
                "64",
                "--run_dir",
                str(tmp_path / "run"),
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and "Traceback" not in err and len(err) < 2000, err
        assert not (tmp_path / "run").exists()


def test_a_capped_read_allocates_what_the_file_holds_not_its_cap(tmp_path) -> None:
    """read(cap + 1) allocated the whole cap first: a 1 GiB cap cost 1 GiB of address space for a file of 40 bytes
    (a MemoryError under a memory limit), a cap of 2**42 failed outright."""
    from ppo_dict.core.reading import UnreadableFile, read_capped

    path = tmp_path / "small"
    path.write_bytes(b"x" * 40)
    assert read_capped(str(path), 2**42, "a file") == b"x" * 40
    with pytest.raises(UnreadableFile, match="40 bytes; a file holds at most 39"):
        read_capped(str(path), 39, "a file")
