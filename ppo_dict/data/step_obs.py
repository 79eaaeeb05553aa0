"""A rollout step's observations as policy input on a device: views of the storage on the CPU, a pinned copy for CUDA."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ppo_dict.data.storage import OBS_KEY, RolloutStorage, TensorObs, channel_first, obs_to_tensor


class StepObsToDevice:
    """The observations of one rollout step as policy input on ``device``.

    CPU: views of the storage itself, no copy (tensors of the whole arrays are made once; a step
    indexes them); an sb3 vec env's arrays as it returned them, where its pool kept them
    (:meth:`~ppo_dict.data.storage.RolloutStorage.step_input`). CUDA: one pinned staging buffer per key, one copy into
    it and one non-blocking host-to-device copy per step; uint8 images travel as uint8 and are scaled on the GPU.
    Reusing the staging buffer is safe because every step synchronises on the actions' copy back before the next copy.
    """

    def __init__(self, storage: RolloutStorage, device: torch.device):
        self.storage, self.device = storage, device
        self.pinned: dict[str, torch.Tensor] = {}
        self.mask_staging: Optional[torch.Tensor] = None  # CUDA: the action masks' staging buffer, made at first use
        if device.type == "cuda":
            for key, (shape, dtype) in storage.obs_layout.items():
                torch_dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
                self.pinned[key] = torch.empty((storage.n_envs, *shape), dtype=torch_dtype).pin_memory()
        self.refresh()

    def refresh(self) -> None:
        """Tensors of the storage's current observation arrays (call again after ``own_obs_stage``)."""
        self.views = self.storage.obs_views()

    def __call__(self, t: int) -> TensorObs:
        if not self.pinned:
            returned = self.storage.step_input(t)  # an sb3 vec env's arrays: read as it returned them, as sb3 reads them
            if returned is not None:
                return obs_to_tensor(returned, self.device)
            if not self.storage.is_dict_obs:
                return self.views[OBS_KEY][t]
            return {key: view[t] for key, view in self.views.items()}
        on_device = {}
        for key, arr in self.storage.obs_at(t).items():
            staging = self.pinned[key]
            staging.copy_(torch.from_numpy(arr))
            on_device[key] = staging.to(self.device, non_blocking=True)
            if key in self.storage.channel_last_keys:
                on_device[key] = channel_first(on_device[key])
        return on_device if self.storage.is_dict_obs else on_device[OBS_KEY]

    def masks(self, masks: torch.Tensor, t: int, span: slice) -> torch.Tensor:
        """The action masks of step ``t``'s envs ``span`` on the device, bool ``[len(span), mask_dim]``.
        masks: the storage's ``action_masks`` as a tensor. CPU: the rows themselves. CUDA: through a
        pinned staging buffer and one non-blocking copy, as the observations (a plain ``.to(device)``
        from pageable memory waits for the copy)."""
        if not self.pinned:
            return masks[t, span].to(self.device)
        rows = masks[t, span]
        if self.mask_staging is None:
            self.mask_staging = torch.empty((self.storage.n_envs, rows.shape[1]), dtype=torch.bool).pin_memory()
        staging = self.mask_staging[: len(rows)]
        staging.copy_(rows)
        return staging.to(self.device, non_blocking=True)
