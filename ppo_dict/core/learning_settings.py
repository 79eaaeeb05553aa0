"""The settings of what is learned: the env and its wrappers, the policy, PPO and the normalisation.

The first half of :class:`ppo_dict.core.config.Config`'s fields, sb3's and rl-zoo's names and defaults (the env and
its wrappers as rl-zoo makes them, ``ActorCriticPolicy``'s and ``RecurrentActorCriticPolicy``'s keyword arguments,
``PPO.__init__``'s, ``VecNormalize``'s). ``Config`` inherits them, then :class:`ppo_dict.core.run_settings.RunSettings`'
(how a run runs): a field's place in this order is its flag's place in ``--help`` and its key's in config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from ppo_dict.core.fields import option as _opt, whole_number as _int
from ppo_dict.core.parse import (
    LSTM_KWARGS,
    NetArch,
    none_or,
    parse_bool,
    parse_kwargs,
    parse_lstm_kwargs,
    parse_net_arch,
    parse_packages,
    parse_schedule,
)

ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "selu", "sigmoid")
MODELS = ("mlp", "cnn", "mlp_lstm", "cnn_lstm")
#: The largest learning rate Adam can take: its first step is ``lr / (1 - beta1) = 10 x lr`` (torch.optim.Adam's
#: ``step_size``), which torch hands to ``addcdiv_`` as a float32 scalar; above float32's largest value / 10 it
#: raises "value cannot be converted to type float without overflow" (sb3's PPO does the same). Below it, a
#: learning rate too large to train diverges into a NonFiniteError, which says so.
MAX_LEARNING_RATE = 3.4028234663852886e38 / 10
inf = math.inf


def schedule_start(value: Union[float, str, Callable[[float], float]]) -> float:
    """The value a schedule starts from: ``lin_<x>``'s x, a function's value at progress 1 (where sb3
    builds Adam with it), a constant itself."""
    if callable(value):
        return float(value(1.0))
    return float(value[4:]) if isinstance(value, str) else float(value)


@dataclass(frozen=True)
class LearningSettings:
    """What is learned: the env, the policy, PPO's and VecNormalize's settings (documented in their ``help`` text)."""

    # Environment
    env: str = _opt(
        "gym_Reacher-v2",
        "environment: a gymnasium id, as rl-zoo takes it (CartPole-v1, Reacher-v2), the gym_ "
        "prefix optional (gym_CartPole-v1); <module>:<id> imports the module first; or "
        "test_dummy, godot_demo, or godot with --env_kwargs dict(env_path=...)",
        str,
        "env",
    )
    gym_packages: tuple[str, ...] = _opt(
        (), "modules to import that register custom envs (as rl-zoo's --gym-packages)", parse_packages, "env"
    )
    n_envs: Optional[int] = _opt(
        None,
        "environments stepped in parallel",
        none_or(int),
        "env",
        range=(1, inf),
        none="num_workers x envs_per_worker, or 1",
    )
    seed: Optional[int] = _opt(
        None,
        "random seed; env i is first reset with seed+i",
        none_or(int),
        "env",
        range=(0, 2**32 - 1),
        none="drawn at random and printed",
    )
    total_timesteps: int = _opt(1_000_000, "environment steps to train for (summed over envs)", _int, "env", range=(1, inf))
    env_kwargs: dict[str, Any] = _opt(
        {}, "keyword arguments for making the env, e.g. dict(image_size=64)", parse_kwargs, "env"
    )
    info_keywords: tuple[str, ...] = _opt(
        (),
        "info keys recorded at each episode end (rl-zoo's monitor_kwargs info_keywords, "
        "sb3 Monitor's) and logged as rollout/<key>, the mean over the last 100 "
        "episodes, e.g. is_success,distance",
        parse_packages,
        "env",
    )

    # Pixel observations (MuJoCo envs rendered in each worker)
    pixel_obs_wrapper: bool = _opt(
        False, "observe rendered frames instead of the state (dict observation)", parse_bool, "pixels"
    )
    # NatureCNN's kernels need 36 pixels
    image_size: int = _opt(
        84, "frame height and width: rendered pixels, and Atari's screen_size", int, "pixels", range=(36, 4096)
    )
    grayscale: bool = _opt(
        False, "convert rendered frames to one grey channel (Atari frames are always grey)", parse_bool, "pixels"
    )
    frame_stack: int = _opt(
        1, "stack the last K observations on the channel axis, in each env (sb3 VecFrameStack)", int, "pixels", range=(1, 64)
    )
    pixel_keep_state: bool = _opt(False, "also observe the state vector, under its own key", parse_bool, "pixels")

    # Atari games (ale-py), sb3 AtariWrapper's arguments and defaults; screen_size is --image_size
    atari_wrapper: bool = _opt(
        False,
        "sb3's AtariWrapper in each worker (noop reset, frame skip, life loss, fire reset, 84x84 grey, reward clip)",
        parse_bool,
        "atari",
    )
    atari_noop_max: int = _opt(
        30, "AtariWrapper noop_max: at most this many no-ops after a reset (0: none)", int, "atari", range=(0, inf)
    )
    atari_frame_skip: int = _opt(
        4,
        "AtariWrapper frame_skip: repeat each action this many frames, max-pooling the last two (1: none)",
        int,
        "atari",
        range=(1, inf),
    )
    atari_terminal_on_life_loss: bool = _opt(
        True, "AtariWrapper terminal_on_life_loss: a lost life ends the training episode", parse_bool, "atari"
    )
    atari_clip_reward: bool = _opt(True, "AtariWrapper clip_reward: train on the reward's sign", parse_bool, "atari")
    atari_action_repeat_probability: float = _opt(
        0.0, "AtariWrapper action_repeat_probability: sticky actions", float, "atari", range=(0.0, 1.0)
    )

    # Policy (sb3 ActorCriticPolicy keyword arguments)
    model: str = _opt(
        "mlp",
        f"policy network: {' | '.join(MODELS)} (the _lstm models are sb3-contrib's RecurrentPPO: an LSTM "
        f"after the features extractor, Dict observations taking its multi-input form)",
        str,
        "policy",
        choices=MODELS,
    )
    net_arch: Optional[NetArch] = _opt(
        None,
        "hidden layers: 64,64 | pi=256,256;vf=256,256 | [256, 256]",
        none_or(parse_net_arch),
        "policy",
        none="sb3's: pi=64,64;vf=64,64 for mlp models, no hidden layer after NatureCNN for cnn models",
    )
    activation_fn: str = _opt(
        "tanh",
        f"activation: {' | '.join(ACTIVATIONS)}",
        lambda s: str(s).lower().removeprefix("nn."),
        "policy",
        choices=ACTIVATIONS,
    )
    ortho_init: bool = _opt(True, "orthogonal initialisation with sb3's gains", parse_bool, "policy")
    log_std_init: float = _opt(
        0.0, "initial log standard deviation of Gaussian actions", float, "policy", range=(-inf, inf, True, True)
    )
    share_features_extractor: bool = _opt(True, "one features extractor for actor and critic", parse_bool, "policy")
    normalize_images: bool = _opt(True, "divide uint8 images by 255 in the forward pass", parse_bool, "policy")
    full_std: bool = _opt(
        True,
        "with use_sde: one std parameter per (latent feature, action) pair, else one per latent feature",
        parse_bool,
        "policy",
    )
    use_expln: bool = _opt(
        False,
        "with use_sde: gSDE's expln() instead of exp() for the std (keeps it above zero, grows it slowly)",
        parse_bool,
        "policy",
    )
    squash_output: bool = _opt(
        False,
        "with use_sde: squash the actions into [-1, 1] with tanh and rescale them to the action "
        "bounds, instead of clipping them (sb3's squash_output)",
        parse_bool,
        "policy",
    )

    # Recurrent policies (sb3-contrib RecurrentActorCriticPolicy keyword arguments), with --model mlp_lstm | cnn_lstm
    lstm_hidden_size: Optional[int] = _opt(
        None, "hidden units of each LSTM layer", none_or(int), "recurrent", range=(1, inf), none="256, sb3-contrib's default"
    )
    n_lstm_layers: Optional[int] = _opt(None, "stacked LSTM layers", none_or(int), "recurrent", range=(1, 100), none="1")
    shared_lstm: Optional[bool] = _opt(
        None,
        "the critic reads the actor's LSTM output (detached) instead of having its own",
        none_or(parse_bool),
        "recurrent",
        none="False",
    )
    enable_critic_lstm: Optional[bool] = _opt(
        None,
        "the critic has an LSTM of its own; with neither this nor shared_lstm the critic is a Linear layer",
        none_or(parse_bool),
        "recurrent",
        none="True",
    )
    lstm_kwargs: dict[str, Any] = _opt(
        {},
        f"keyword arguments of the LSTMs (sb3-contrib's lstm_kwargs), of {' and '.join(LSTM_KWARGS)}: dict(dropout=0.1)",
        parse_lstm_kwargs,
        "recurrent",
    )
    lstm_fast_path: bool = _opt(
        False,
        "train each LSTM over whole sequences in one call per minibatch, split at episode "
        "starts (sb3-contrib PR 118): RecurrentPPO's algorithm and losses, not its bits "
        "(False: its bits, one call per time step where a minibatch has an episode start)",
        parse_bool,
        "recurrent",
    )
    rnn_type: Optional[str] = _opt(
        None,
        "the recurrent cell: lstm (sb3-contrib's RecurrentPPO) or gru (torch's nn.GRU in the "
        "LSTM's places, one state per layer; no library has it, and sb3-contrib cannot read "
        "it)",
        none_or(lambda s: str(s).lower()),
        "recurrent",
        choices=("lstm", "gru"),
        none="lstm",
    )

    # PPO (sb3 PPO keyword arguments)
    learning_rate: Union[float, str, Callable[[float], float]] = _opt(
        3e-4,
        "Adam learning rate, or lin_<initial> for a linear schedule",
        parse_schedule,
        "ppo",
        range=(0.0, MAX_LEARNING_RATE, False, True),
        measure=schedule_start,
    )
    n_steps: Optional[int] = _opt(
        None,
        "steps per env per rollout",
        none_or(int),
        "ppo",
        range=(1, inf),
        none="2048, sb3 PPO's default; 128 with a recurrent model, RecurrentPPO's",
    )
    batch_size: Optional[int] = _opt(
        None,
        "minibatch size in transitions",
        none_or(int),
        "ppo",
        range=(1, inf),
        none="64, sb3 PPO's default; 128 with a recurrent model, RecurrentPPO's",
    )
    num_batches: Optional[int] = _opt(
        None, "minibatches per epoch; overrides batch_size (batch_size = n_steps*n_envs // num_batches)", none_or(int), "ppo"
    )
    n_epochs: int = _opt(10, "epochs over the rollout per update", int, "ppo", range=(1, inf))
    gamma: float = _opt(0.99, "discount factor", float, "ppo", range=(0.0, 1.0))
    gae_lambda: float = _opt(0.95, "GAE lambda", float, "ppo", range=(0.0, 1.0))
    clip_range: Union[float, str, Callable[[float], float]] = _opt(
        0.2, "PPO clip range, or lin_<initial>", parse_schedule, "ppo", range=(0.0, inf, False, True), measure=schedule_start
    )
    clip_range_vf: Optional[Union[float, str, Callable[[float], float]]] = _opt(
        None,
        "value clip range, or lin_<initial>",
        none_or(parse_schedule),
        "ppo",
        range=(0.0, inf, True, True),
        measure=schedule_start,
        none="no value clipping",
    )
    normalize_advantage: bool = _opt(True, "normalise advantages per minibatch", parse_bool, "ppo")
    ent_coef: float = _opt(0.0, "entropy coefficient", float, "ppo", range=(0.0, inf, False, True))
    vf_coef: float = _opt(0.5, "value loss coefficient", float, "ppo", range=(0.0, inf, False, True))
    max_grad_norm: float = _opt(0.5, "gradient norm clip", float, "ppo", range=(0.0, inf, True, True))
    target_kl: Optional[float] = _opt(
        None,
        "stop the epochs early when approx_kl > 1.5*target_kl",
        none_or(float),
        "ppo",
        range=(0.0, inf, True, True),
        none="never",
    )
    use_sde: bool = _opt(
        False,
        "generalized State-Dependent Exploration (gSDE) for Box actions, instead of independent Gaussian noise",
        parse_bool,
        "ppo",
    )
    action_masks: bool = _opt(
        False,
        "invalid-action masking as sb3-contrib's MaskablePPO: the env's action_masks() (directly "
        "or through sb3-contrib's ActionMasker) gives each step's valid actions, written by the "
        "workers beside the observation (Discrete, MultiDiscrete, MultiBinary actions)",
        parse_bool,
        "ppo",
    )
    sde_sample_freq: int = _opt(
        -1,
        "with use_sde: draw a new exploration matrix every this many steps (-1: only at the start of each rollout)",
        int,
        "ppo",
        range=(-1, inf),
    )

    # Normalisation (sb3 VecNormalize)
    normalize: bool = _opt(False, "VecNormalize observations and rewards (rl-zoo's normalize: true)", parse_bool, "normalize")
    norm_obs: bool = _opt(True, "with --normalize: normalise observations", parse_bool, "normalize")
    norm_reward: bool = _opt(True, "with --normalize: normalise rewards by the return's std", parse_bool, "normalize")
    clip_obs: float = _opt(
        10.0, "clip normalised observations to +-clip_obs", float, "normalize", range=(0.0, inf, True, True)
    )
    clip_reward: float = _opt(
        10.0, "clip normalised rewards to +-clip_reward", float, "normalize", range=(0.0, inf, True, True)
    )
    norm_gamma: Optional[float] = _opt(
        None,
        "discount of the normalised return",
        none_or(float),
        "normalize",
        range=(0.0, 1.0),
        none="--gamma, as rl-zoo does",
    )
    norm_epsilon: float = _opt(1e-8, "VecNormalize epsilon", float, "normalize", range=(0.0, inf, True, True))
