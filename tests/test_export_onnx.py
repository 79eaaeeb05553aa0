"""ONNX export: the file, run in onnxruntime, gives the actions of ppo_dict's deterministic predict (MLP, CNN, dict);
a masked model's graph takes the masks and gives sb3-contrib's ``MaskablePPO.predict(..., action_masks=...)``."""

import json
import os

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.algo.model import Model
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ExportError
from ppo_dict.data.actions import mask_sizes
from ppo_dict.data.masking import mask_offsets
from ppo_dict.export_onnx import main as export_main
from ppo_dict.interop.onnx import MASKS_INPUT, check_onnx, export_onnx, sample_batch, sample_masks
from ppo_dict.interop.sb3 import export_sb3
from ppo_dict.run.checkpoint import CheckpointManager, save_model
from ppo_dict.vec import make_env_pool

onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the onnx and test extras)")

MODELS = {
    # MLP, Gaussian actions, observations normalised (folded into the graph)
    "mlp_normalized": Config(env="gym_Pendulum-v1", normalize=True, n_envs=2, n_steps=64, batch_size=64, n_epochs=1, seed=0),
    # NatureCNN on channel-last uint8 images (transposed in the graph), categorical actions
    "cnn_channel_last": Config(
        env="test_dummy",
        model="cnn",
        env_kwargs=dict(image_size=36, channel_last=True),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=1,
    ),
    # MultiInputPolicy: rendered frames (not normalised) and the state vector (normalised)
    "dict_pixels_and_state": Config(
        env="gym_Reacher-v2",
        model="cnn",
        pixel_obs_wrapper=True,
        pixel_keep_state=True,
        image_size=36,
        normalize=True,
        n_envs=2,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        seed=2,
    ),
}


MASKED = dict(
    env="gym_PPODictMaskedJump-v0",
    gym_packages=("ppo_dict.envs.masked",),
    action_masks=True,
    n_envs=2,
    n_steps=32,
    batch_size=32,
    n_epochs=1,
)
#: --action_masks models, one per action space sb3-contrib masks (MultiBinary: its 2n-output head)
MASKED_MODELS = {
    "masked_discrete": Config(**MASKED, env_kwargs=dict(action="discrete"), seed=3),
    "masked_multi_discrete_dict_obs": Config(
        **MASKED, env_kwargs=dict(action="multi_discrete", observation="dict", size=6), seed=4
    ),
    "masked_multi_binary": Config(**MASKED, env_kwargs=dict(action="multi_binary", size=5), seed=5),
    # a channel-last uint8 picture (transposed in the graph; MaskablePPO's CnnPolicy transposes it in predict)
    "masked_multi_discrete_image": Config(
        **MASKED, model="cnn", env_kwargs=dict(action="multi_discrete", observation="image", size=5), seed=6
    ),
}


def trained_model_file(cfg: Config, folder, sb3_zip=None) -> str:
    """Train two updates (weights and statistics away from their start), save the model file (and an sb3 zip)."""
    ppo = PPO(cfg.replace(num_workers=0, verbose=0), make_env_pool(cfg.replace(num_workers=0)))
    try:
        ppo.learn(total_timesteps=cfg.n_steps * 2 * 2)
        if sb3_zip is not None:
            export_sb3(ppo, str(sb3_zip))
        return save_model(ppo, str(folder))
    finally:
        ppo.close()


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_policy_gives_ppo_dicts_predict_actions(tmp_path, name) -> None:
    path = trained_model_file(MODELS[name], tmp_path / "model")
    out = export_onnx(path, str(tmp_path / "policy.onnx"))
    model = Model.from_file(path)
    normalizer, observation_space, action_space = model.normalizer, model.observation_space, model.action_space
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(sample_batch(observation_space, 1))
    for batch_size in (1, 7):  # any batch size
        batch = sample_batch(observation_space, batch_size, seed=batch_size)
        ours = model.predict_batch(batch)
        theirs = session.run(["action"], batch)[0]
        assert theirs.shape == ours.shape and theirs.dtype == ours.dtype
        if action_space.dtype.kind == "i":
            assert np.array_equal(theirs, ours)  # the same discrete actions
        else:  # the same up to float32 rounding of the layers (onnxruntime's kernels are not torch's)
            np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-6)
            assert np.all(theirs >= action_space.low) and np.all(theirs <= action_space.high)
    if normalizer is not None:  # the statistics really are in the graph: other statistics, other actions
        normalizer.obs_rms[next(iter(normalizer.obs_rms))].mean += 1.0
        shifted = model.predict_batch(batch)
        assert not np.allclose(shifted, theirs, rtol=1e-5, atol=1e-6)


def test_cli_exports_a_run_directory_checks_it_and_refuses_what_it_cannot_write(tmp_path, capsys) -> None:
    cfg = MODELS["mlp_normalized"].replace(run_dir=str(tmp_path / "run"))
    ppo = PPO(cfg.replace(num_workers=0, verbose=0), make_env_pool(cfg.replace(num_workers=0)))
    try:
        ppo.learn(total_timesteps=256)
        CheckpointManager(str(tmp_path / "run" / "checkpoints"), 1).save(ppo)
    finally:
        ppo.close()
    assert export_main([str(tmp_path / "run"), "--check", "64"]) == 0

    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["onnx"] == str(tmp_path / "run" / "policy.onnx") and os.path.isfile(result["onnx"])
    assert result["check"]["observations"] == 64 and result["check"]["max_abs_diff"] < 1e-5
    # float32 rounding (a continuous action: every row differs a little) is no mismatch; the verdict says so
    check = result["check"]
    assert check["mismatched"] == 0 and check["verdict"] == (
        "equal within 1e-06"
        if check["max_abs_diff"] <= 1e-6
        else f"{check['mismatched']} of 64 actions (or the LSTM states) differ by more than 1e-06"
    )
    # An opset the exporter cannot write: a clear error, and the file already there is left alone.
    (tmp_path / "old.onnx").write_bytes(b"previous export")
    assert export_main([result["model"], "--opset", "6", "--out", str(tmp_path / "old.onnx")]) == 2
    assert "the exporter could only write opset 18 (--opset 18 works)" in capsys.readouterr().err
    assert (tmp_path / "old.onnx").read_bytes() == b"previous export"
    with pytest.raises(ExportError, match="opset 6"):
        export_onnx(result["model"], str(tmp_path / "x.onnx"), opset=6)
    assert not (tmp_path / "x.onnx").exists()
    assert export_main([str(tmp_path / "nothing-here")]) == 2


@pytest.mark.parametrize("name", list(MASKED_MODELS))
def test_masked_onnx_policy_gives_maskable_ppo_predict_actions(tmp_path, name) -> None:
    """The masks are the graph's last input; its actions are sb3-contrib's deterministic masked
    predict (on the same weights, through ``--export_sb3``'s zip) and ppo_dict's, and always valid."""
    from sb3_contrib import MaskablePPO

    path = trained_model_file(MASKED_MODELS[name], tmp_path / "model", sb3_zip=tmp_path / "maskable.zip")
    out = export_onnx(path, str(tmp_path / "policy.onnx"))
    model = Model.from_file(path)
    observation_space, action_space = model.observation_space, model.action_space
    maskable = MaskablePPO.load(str(tmp_path / "maskable.zip"), device="cpu")
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [*sample_batch(observation_space, 1), MASKS_INPUT]
    offsets = mask_offsets(mask_sizes(action_space))
    for batch_size in (1, 64):
        batch = sample_batch(observation_space, batch_size, seed=batch_size)
        masks = sample_masks(action_space, batch_size, seed=batch_size)
        theirs = session.run(["action"], {**batch, MASKS_INPUT: masks})[0]
        ours = model.predict_batch(batch, masks=masks)
        obs = batch if isinstance(observation_space, spaces.Dict) else batch["obs"]
        contrib = maskable.predict(obs, action_masks=masks, deterministic=True)[0]
        assert theirs.dtype == ours.dtype == contrib.dtype and np.array_equal(theirs, ours) and np.array_equal(theirs, contrib)
        assert np.take_along_axis(masks, offsets + theirs.reshape(batch_size, -1), axis=1).all(), "a masked action was chosen"
    unmasked = session.run(["action"], {**batch, MASKS_INPUT: np.ones_like(masks)})[0]
    assert not np.array_equal(unmasked, theirs), "the masks change no action: the test would not see them ignored"
    assert check_onnx(out, path, 64)["mismatched"] == 0  # the CLI's --check feeds masks too
