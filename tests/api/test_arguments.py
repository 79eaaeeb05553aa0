"""sb3's arguments as the command line's config: the signature, the policy keyword arguments, the device."""

from __future__ import annotations

import inspect

import pytest
import torch
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN

from ppo_dict.api.algorithms import ALGORITHMS
from ppo_dict.api.arguments import EXTRAS, config_values, policy_values, sb3_device
from ppo_dict.core.config import FIELDS


def test_the_signature_is_sb3s_then_the_command_lines_settings() -> None:
    ours = ALGORITHMS["PPO"].signature().parameters
    sb3 = list(inspect.signature(SB3PPO.__init__).parameters.values())[1:]
    assert list(ours.values())[: len(sb3)] == sb3  # names, kinds, defaults, in sb3's order
    extras = list(ours.values())[len(sb3) :]
    assert [p.name for p in extras] == list(EXTRAS) and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extras)
    defaults = {p.name: p.default for p in extras}
    assert (
        defaults["num_workers"] is FIELDS["num_workers"].default
        and defaults["mp_method"] == FIELDS["mp_method"].default == "forkserver"
    )
    assert defaults["torch_threads"] is None and defaults["update_threads"] is None  # the process's own count


def test_positional_arguments_bind_as_sb3s() -> None:
    arguments, extras = ALGORITHMS["PPO"].bind("MlpPolicy", "CartPole-v1", 1e-3, 128, num_workers=0)
    assert (arguments["learning_rate"], arguments["n_steps"], arguments["batch_size"]) == (1e-3, 128, 64)
    assert extras == {"num_workers": 0}  # only what was given: the rest is the config's default
    with pytest.raises(TypeError):
        ALGORITHMS["PPO"].bind("MlpPolicy", "CartPole-v1", n_envs=2, bogus=1)
    arguments, _ = ALGORITHMS["MaskablePPO"].bind("MlpPolicy", "CartPole-v1")
    assert "use_sde" not in arguments and arguments["batch_size"] == 64


def test_policy_kwargs_become_the_configs_fields_and_the_rest_is_refused_by_name() -> None:
    values, problems = policy_values(
        dict(
            net_arch=[dict(pi=[32], vf=[16])],
            activation_fn=torch.nn.ReLU,
            ortho_init=False,
            features_extractor_class=FlattenExtractor,
            optimizer_class=torch.optim.Adam,
            optimizer_kwargs=dict(eps=1e-5),
        ),
        "MlpPolicy",
        ALGORITHMS["PPO"].policy_kwargs,
    )
    assert values == dict(net_arch=dict(pi=[32], vf=[16]), activation_fn="relu", ortho_init=False) and problems == []
    values, problems = policy_values(
        dict(features_extractor_class=NatureCNN, optimizer_kwargs={}), "MlpPolicy", ALGORITHMS["PPO"].policy_kwargs
    )
    assert values == {} and problems == []  # the API builds the extractor and the optimizer with them (built_here)
    _, problems = policy_values(
        dict(features_extractor_class="NatureCNN", lstm_kwargs=dict(dropout=0.1), activation_fn="Hardtanh", log_std_init=-1.0),
        "MlpPolicy",
        ALGORITHMS["MaskablePPO"].policy_kwargs,
        "MaskablePPO",
    )
    assert [p.split(":")[0] for p in problems] == [
        "policy_kwargs features_extractor_class='NatureCNN'",
        "policy_kwargs lstm_kwargs={'dropout'",
        "policy_kwargs activation_fn='Hardtanh'",
        "policy_kwargs log_std_init=-1.0",
    ]
    assert "MaskablePPO's policies take no such argument" in problems[-1]
    values, problems = policy_values(dict(activation_fn=torch.nn.Hardtanh), "MlpPolicy", ALGORITHMS["PPO"].policy_kwargs)
    assert values == {} and problems == []  # a class the config has no name for: the API builds it (built_here)


def test_device_auto_is_sb3s_and_threads_are_the_processes(monkeypatch) -> None:
    assert sb3_device("cpu") == "cpu" and sb3_device(torch.device("cpu")) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert sb3_device("auto") == "cuda"  # CUDA for every policy where torch has it, as sb3's get_device
    values = config_values({"device": "auto", "seed": 3}, {}, {"action_masks": True})
    assert values == {
        "seed": 3,
        "device": "cuda",
        "torch_threads": torch.get_num_threads(),
        "update_threads": torch.get_num_threads(),
        "action_masks": True,
    }


def test_the_cuda_notice() -> None:
    from ppo_dict.run.run_plan import device_notice

    assert device_notice(torch.device("cpu")) == ""
    assert "not bit-exact" in device_notice(
        torch.device("cuda"), 'device="cpu"'
    ) and 'device="cpu" reproduces' in device_notice(torch.device("cuda"), 'device="cpu"')


def test_hyperparameters_read_as_sb3s_attributes_and_setting_a_fixed_one_is_an_error() -> None:
    import ppo_dict

    model = ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_steps=64, gamma=0.9, _init_setup_model=False)
    assert (model.n_steps, model.gamma, model.ent_coef, model.stats_window_size) == (64, 0.9, 0.0, 100)
    with pytest.raises(AttributeError, match="n_steps is fixed once the model is built"):
        model.n_steps = 128  # the others: tests/api/test_settings.py
    model.verbose = 1  # applies at the next learn, as in sb3
    assert model.verbose == 1
