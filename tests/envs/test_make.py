"""Env names to specs: gymnasium ids (old MuJoCo versions mapped), test_dummy, Godot games; refused before anything starts."""

from __future__ import annotations


import pytest

from ppo_dict.envs import make_env, resolve_env_name
from ppo_dict.envs.godot.spec import godot_spec
from tests.system_parts import needs


def test_old_mujoco_ids_map_to_the_newest_version() -> None:
    from ppo_dict.envs import resolve_env_name

    spec = resolve_env_name("gym_Reacher-v2")
    assert spec.gym_id == "Reacher-v5" and "using Reacher-v5" in spec.notice
    # an old version that gymnasium still makes: trained as asked, gymnasium's out-of-date warning said once, here
    assert (
        resolve_env_name("gym_Reacher-v4").notice
        == "note: gymnasium has a newer version of Reacher-v4, Reacher-v5; training Reacher-v4 as asked"
    )
    assert resolve_env_name("gym_Reacher-v5").notice == ""
    with pytest.raises(Exception, match="provides versioned environments"):
        resolve_env_name("gym_Hopper-v9")


# ---------------------------------------------------------------------------------------- names and config, no engine needed
@needs("godot")  # resolving godot_demo finds the engine
def test_godot_names_resolve_and_refuse_clearly():
    spec = resolve_env_name("godot_demo", kwargs={"speedup": 100})
    assert spec.is_godot and spec.name == "godot_demo" and spec.kwargs["speedup"] == 100
    assert not resolve_env_name("gym_CartPole-v1").is_godot
    with pytest.raises(
        ValueError, match=r"^unknown env_kwargs bogus, n_agents: a Godot game takes project, env_path, binary, seed, "
    ):
        resolve_env_name("godot_demo", kwargs={"bogus": 1, "n_agents": 4})
    with pytest.raises(ValueError, match=r"--env godot needs a game: --env_kwargs \"dict\(env_path='game.x86_64'\)\""):
        resolve_env_name("godot")
    with pytest.raises(ValueError, match="godot_demo is the demo game: for another game use --env godot"):
        resolve_env_name("godot_demo", kwargs={"env_path": "/bin/true"})
    with pytest.raises(ValueError, match="unknown Godot game 'godot_pong': use godot_demo"):
        resolve_env_name("godot_pong")
    for name in ("", "gym_"):
        with pytest.raises(
            ValueError,
            match=r"give a gymnasium id \(e.g. Reacher-v2, or gym_Reacher-v2\), test_dummy, "
            r"godot_demo \(the Godot demo game\) or godot",
        ):
            resolve_env_name(name)
    with pytest.raises(
        ValueError,
        match=r"godot_demo is stepped by the trainer's 'godot' env backend "
        r"\(ppo_dict.vec.BACKENDS\), not a gymnasium env that make_env can build",
    ):
        make_env(godot_spec())
