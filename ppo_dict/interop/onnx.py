"""The deterministic policy as an ONNX file (the command: ``python -m ppo_dict.export_onnx RUN_DIR|FILE``).

The graph takes observations as the env gives them (a batch: ``obs`` for a single space, one
input per key for a Dict, in the env's dtypes, channel-last images as they are) and returns the
action the env gets: what :meth:`ppo_dict.algo.model.Model.predict` computes. A model trained
with ``--action_masks`` takes each step's masks too, as a last input ``action_masks`` (bool
``[batch, mask_dim]``, the layout ``action_masks()`` gives: ``n`` entries for Discrete,
``sum(nvec)`` for MultiDiscrete, ``2n`` for MultiBinary), and returns sb3-contrib's
``MaskablePPO.predict(obs, action_masks=..., deterministic=True)``: masked logits -1e8, the most
probable valid action of each categorical. A recurrent model's graph takes the actor's LSTM states and the episode
starts as its last inputs (``lstm_h``, ``lstm_c``: float32 ``[n_layers, batch, hidden]``, ``episode_start``: bool
``[batch]``; a GRU's ``gru_h`` alone) and returns the states after the step (``lstm_h_out``, ``lstm_c_out``;
``gru_h_out``) after the action: sb3-contrib's ``RecurrentPPO.predict(obs, state, episode_start, deterministic=True)``,
the states fed back at the next step. With ``--normalize`` the training statistics are folded in, in float64 as sb3's
``VecNormalize`` computes them (so the normalised observations are bit for bit ppo_dict's); Gaussian and gSDE policies
return their mean clipped to the action bounds, categorical ones their most probable action (int64), MultiDiscrete ones
the most probable entry of each (int64), MultiBinary ones each bit whose probability rounds to 1. Runs in onnxruntime,
or anything that reads ONNX; needs the ``onnx`` extra (``onnx``, ``onnxscript``, torch's exporter, and ``onnxruntime``
to check the file against ppo_dict).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import warnings
from typing import Any, Iterator, Optional, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ppo_dict.algo.model import Model
from ppo_dict.core.errors import ExportError
from ppo_dict.core.files import atomic_write
from ppo_dict.data.actions import mask_sizes
from ppo_dict.data.masking import METHOD
from ppo_dict.data.storage import OBS_KEY, channel_first, channel_last_keys, obs_layout, obs_parts

#: ONNX opset of the exported graph (torch's exporter's own default)
OPSET = 18
#: The masks' input of a masked policy's graph (sb3-contrib's name: ``predict``'s keyword, the env's method)
MASKS_INPUT = METHOD
#: A recurrent policy's extra inputs (the actor's LSTM states before the step, float32 ``[n_layers, batch, hidden]``, and
#: bool ``[batch]`` episode starts) and outputs (the states after it): sb3-contrib's ``predict(obs, state, episode_start)``
STATE_INPUTS = ("lstm_h", "lstm_c", "episode_start")
STATE_OUTPUTS = ("lstm_h_out", "lstm_c_out")
#: a GRU policy's (``--rnn_type gru``): its one state per layer
GRU_STATE_INPUTS, GRU_STATE_OUTPUTS = ("gru_h", "episode_start"), ("gru_h_out",)


def state_io(model: Model) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A recurrent model's graph's state inputs (then ``episode_start``) and outputs, by its cell."""
    return (GRU_STATE_INPUTS, GRU_STATE_OUTPUTS) if model.policy.rnn_type == "gru" else (STATE_INPUTS, STATE_OUTPUTS)


class DeterministicPolicy(nn.Module):
    """Observations as the env gives them -> the action the env gets; the module that is exported."""

    def __init__(self, model: Model):
        super().__init__()
        policy, normalizer, observation_space = model.policy, model.normalizer, model.observation_space
        self.policy = policy
        self.dict_obs = isinstance(observation_space, spaces.Dict)
        self.keys = list(obs_layout(observation_space))
        self.masked = policy.masked
        if self.masked and MASKS_INPUT in self.keys:
            raise ExportError(f"the observation key {MASKS_INPUT!r} would collide with the graph's masks input of that name")
        self.recurrent = model.recurrent
        self.state_inputs, state_outputs = state_io(model) if self.recurrent else ((), ())
        if set(self.state_inputs) & set(self.keys):
            raise ExportError(
                f"an observation key among {self.state_inputs} would collide with the graph's state inputs of that name"
            )
        # the observations, a recurrent policy's states, then a masked policy's masks
        self.input_names = [*self.keys, *self.state_inputs, *((MASKS_INPUT,) if self.masked else ())]
        self.output_names = ["action", *state_outputs]
        channel_last = channel_last_keys(observation_space)
        self.channel_last = [k for k in self.keys if k in channel_last]
        self.normalized = list(normalizer.normalized_keys) if normalizer is not None else []
        self.clip_obs = normalizer.clip_obs if normalizer is not None else 0.0
        for i, key in enumerate(self.normalized):  # sb3: (obs - mean) / sqrt(var + eps), in float64
            rms = normalizer.obs_rms[key]  # type: ignore[union-attr]
            self.register_buffer(f"mean_{i}", torch.from_numpy(np.asarray(rms.mean, np.float64)))
            self.register_buffer(f"std_{i}", torch.from_numpy(np.sqrt(rms.var + normalizer.epsilon)))  # type: ignore[union-attr]
        self.to_env = policy.action_spec.env_module()  # Box: clamped to the bounds

    def forward(self, *inputs: torch.Tensor) -> Union[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``inputs``: one ``[B, *shape]`` tensor per key, then (recurrent policies) :data:`STATE_INPUTS`, then (masked
        policies) the masks ``[B, mask_dim]``; returns the actions (and the states after the step)."""
        obs = dict(zip(self.keys, inputs))
        masks = inputs[-1] if self.masked else None
        for i, key in enumerate(self.normalized):
            x = (obs[key].double() - getattr(self, f"mean_{i}")) / getattr(self, f"std_{i}")
            obs[key] = x.clamp(-self.clip_obs, self.clip_obs).float()
        for key in self.channel_last:  # [B, H, W, C] -> [B, C, H, W], as sb3's VecTransposeImage
            obs[key] = channel_first(obs[key])
        obs = obs if self.dict_obs else obs[OBS_KEY]
        if self.recurrent:
            states = inputs[len(self.keys) : len(self.keys) + len(self.state_inputs)]
            return self.recurrent_actions(obs, states[:-1], states[-1], masks)
        actions = self.policy(obs, deterministic=True, action_masks=masks)[0]
        return self.to_env(actions)

    def recurrent_actions(
        self, obs: Any, hx: tuple[torch.Tensor, ...], episode_start: torch.Tensor, masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, ...]:
        """sb3-contrib's deterministic ``predict`` as one graph: the states multiplied by ``1 - episode_start`` (its
        loop branch: the one-call branch's outputs, as a graph has no data-dependent branch), one LSTM step, the mode."""
        policy = self.policy
        keep = (1.0 - episode_start.float()).view(1, -1, 1)
        features = policy.pi_features_extractor(policy._preprocess(obs))
        hx = tuple(keep * state for state in hx)
        latent, states = policy.lstm_actor(features.unsqueeze(0), hx if len(hx) == 2 else hx[0])
        states = states if isinstance(states, tuple) else (states,)
        actions = policy.distribution(policy.mlp_extractor.forward_actor(latent[0]), masks).mode()
        return (self.to_env(actions.reshape((-1, *policy.action_space.shape))), *states)


def sample_batch(observation_space: spaces.Space, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` observations drawn from the space, ``{key: [n, *shape]}`` in the storage's dtypes.

    Unbounded Box dimensions are drawn from a normal distribution (gymnasium's ``sample``)."""
    observation_space.seed(seed)
    draws = [observation_space.sample() for _ in range(n)]
    layout, parts = obs_layout(observation_space), [obs_parts(observation_space, d) for d in draws]
    return {
        key: np.stack([np.asarray(p[key], dtype=dtype).reshape(shape) for p in parts])
        for key, (shape, dtype) in layout.items()
    }


def sample_masks(action_space: spaces.Space, n: int, seed: int = 0) -> np.ndarray:
    """``n`` random masks, bool ``[n, mask_dim]``, each allowing about half the actions and at least
    one in every categorical of ``action_space`` (:func:`~ppo_dict.data.actions.mask_sizes`)."""
    rng = np.random.default_rng(seed)
    parts = []
    for size in mask_sizes(action_space):
        part = rng.random((n, size)) < 0.5
        part[np.arange(n), rng.integers(0, size, n)] = True  # one valid action, anywhere
        parts.append(part)
    return np.concatenate(parts, axis=1)


def sample_inputs(model: Model, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The graph's inputs for ``n`` sampled observations (:func:`sample_batch`), masks included for a masked policy."""
    inputs = sample_batch(model.observation_space, n, seed)
    if model.recurrent:  # states as an episode carries them, and an episode start in about a third of the batch
        rng, lstm = np.random.default_rng(seed), model.policy.lstm_actor
        names = state_io(model)[0]
        for name in names[:-1]:
            inputs[name] = rng.normal(0.0, 0.3, (lstm.num_layers, n, lstm.hidden_size)).astype(np.float32)
        inputs[names[-1]] = rng.random(n) < 0.3
    if model.policy.masked:
        inputs[MASKS_INPUT] = sample_masks(model.action_space, n, seed)
    return inputs


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """torch's exporter logs each step and warns about optional packages (torchvision); keep errors only."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()):
                yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def export_onnx(path: str, out: str, opset: int = OPSET, model: Optional[Model] = None) -> str:
    """Write the deterministic policy of the model in ``path`` to ``out`` (atomically); returns ``out``.
    ``model``: that file's model, when the caller has loaded it already.

    Raises :class:`ExportError` when torch cannot export it (or the ``onnx`` extra is missing);
    an existing ``out`` is then left as it was.
    """
    model = model or Model.from_file(path)
    module = DeterministicPolicy(model).eval()
    example = tuple(torch.as_tensor(v) for v in sample_inputs(model, 4).values())
    batch = torch.export.Dim("batch")
    # the exporter writes the file itself: build it aside, then move it in
    with tempfile.TemporaryDirectory() as scratch, quiet_exporter():
        scratch_file = os.path.join(scratch, "policy.onnx")
        try:
            # states: [layers, B, H]
            dims = tuple({1: batch} if name in module.state_inputs[:-1] else {0: batch} for name in module.input_names)
            torch.onnx.export(
                module,
                example,
                scratch_file,
                input_names=module.input_names,
                output_names=module.output_names,
                dynamic_shapes={"inputs": dims},
                opset_version=opset,
                external_data=False,
                dynamo=True,
                verbose=False,
            )
        except ImportError as exc:
            raise ExportError(
                f"exporting to ONNX needs onnx and onnxscript: pip install onnx onnxscript onnxruntime "
                f"(ppo_dict's onnx extra) ({exc})"
            ) from exc
        except Exception as exc:  # torch.export / onnxscript refusing an op, an opset it cannot target...
            reason = " ".join(str(exc).split())[:600]
            raise ExportError(f"cannot export {path} to ONNX (opset {opset}): {type(exc).__name__}: {reason}") from exc
        written = written_opset(scratch_file)
        if written != opset:  # torch falls back to its own opset when the version converter cannot reach the asked one
            raise ExportError(
                f"cannot export {path} to ONNX opset {opset}: the exporter could only write opset {written} "
                f"(--opset {written} works)"
            )
        with open(scratch_file, "rb") as f:
            data = f.read()
    atomic_write(out, lambda f: f.write(data))
    return out


def written_opset(path: str) -> int:
    """The default-domain opset an ONNX file declares."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return next(int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx"))


def check_onnx(onnx_path: str, model: Union[str, Model], n: int = 256) -> dict[str, Any]:
    """Run the ONNX file in onnxruntime and ppo_dict's deterministic predict of ``model`` (a model file,
    or its loaded :class:`Model`) on ``n`` sampled observations (and, for a masked policy, ``n`` random
    masks: :func:`sample_masks`).

    Returns ``{"observations", "mismatched" (the rows whose actions differ by more than :data:`CHECK_TOLERANCE`: float32
    rounding of the layers stays below it; discrete actions differ by 1 or more), "max_abs_diff", "verdict"}``: the
    verdict says ``equal within 1e-06`` where every action (and a recurrent model's states) is, else how many differ.
    """
    import onnxruntime

    model = Model.from_file(model) if isinstance(model, str) else model
    inputs = sample_inputs(model, n, seed=1)
    batch = {key: inputs[key] for key in obs_layout(model.observation_space)}
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    if model.recurrent:
        names, outputs = state_io(model)
        ours, states = model.predict_recurrent(
            batch,
            tuple(inputs[name] for name in names[:-1]),
            inputs[names[-1]],
            deterministic=True,
            masks=inputs.get(MASKS_INPUT),
        )
        theirs, *their_states = session.run(["action", *outputs], inputs)
        state_diff = max(float(np.abs(a - b).max()) for a, b in zip(states, their_states))
    else:
        ours = model.predict_batch(batch, masks=inputs.get(MASKS_INPUT))
        theirs = session.run(["action"], inputs)[0]
    diff = np.abs(theirs.astype(np.float64) - ours.astype(np.float64)).reshape(n, -1)
    mismatched = int((diff.max(axis=1) > CHECK_TOLERANCE).sum())
    result = {"observations": n, "mismatched": mismatched, "max_abs_diff": float(diff.max())}
    if model.recurrent:
        result["max_abs_state_diff"] = state_diff
    equal = mismatched == 0 and (not model.recurrent or state_diff <= CHECK_TOLERANCE)
    result["verdict"] = (
        f"equal within {CHECK_TOLERANCE:g}"
        if equal
        else f"{mismatched} of {n} actions (or the LSTM states) differ by more than {CHECK_TOLERANCE:g}"
    )
    return result


#: How far an ONNX action may be from ppo_dict's and count as equal: float32 rounding of the layers (about 1e-8 to 1e-6
#: on a deep MLP); a discrete action differs by 1 or more.
CHECK_TOLERANCE = 1e-6
