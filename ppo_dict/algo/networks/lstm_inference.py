"""The rollout's LSTM call with its weights laid out for oneDNN once per rollout, not once per call.

On the CPU ``torch.lstm`` of float32 runs oneDNN's LSTM (``aten::mkldnn_rnn_layer``, one call per
layer), and each call first reorders the layer's two weight matrices into oneDNN's blocked layout:
for a 256-wide LSTM about half of a rollout step's LSTM time. The weights change only in the update,
so :class:`PackedLstm` reorders them once per rollout (``mkldnn::_reorder_mkldnn_rnn_layer_weight``,
the reorder torch's own compiler uses to prepack them) and calls ``mkldnn_rnn_layer`` per layer with
them, as ``torch.lstm`` calls it: the same kernel on the same values, so the same bits (a reorder
moves values, it computes nothing). ``tests/test_recurrent.py`` compares it with ``torch.lstm``; and
:meth:`PackedLstm.refresh` compares the two on the current weights before each rollout, falling back
to ``torch.lstm`` for good if they ever differ, or where torch would not take oneDNN's path.
"""

from __future__ import annotations

import torch
from torch import nn

from ppo_dict.algo.networks.recurrent_policy import HiddenCell, run_lstm

#: oneDNN's kind for an LSTM (ideep's ``rnn_kind::LSTM``), as ``torch.lstm`` passes it
LSTM_MODE = 2
#: ATen's op for one layer of ``torch.lstm`` on oneDNN's path (a name the tests can wrap)
rnn_layer = torch.ops.aten.mkldnn_rnn_layer


def takes_onednn_path(lstm: nn.LSTM) -> bool:
    """Whether ``torch.lstm`` runs ``lstm`` through oneDNN here (ATen's ``use_mkldnn``), in a shape this class handles."""
    weight = lstm.weight_ih_l0
    return (
        isinstance(lstm, nn.LSTM)
        and torch.backends.mkldnn.is_available()
        and torch._C._get_mkldnn_enabled()
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and lstm.bias
        and not lstm.bidirectional
        and not lstm.batch_first
        and lstm.proj_size == 0
        and weight.layout == torch.strided
    )


class PackedLstm:
    """``lstm(x, (h, c))`` in inference for ``x`` of shape ``[1, n_envs, input_size]`` (one rollout step of every env)."""

    def __init__(self, lstm: nn.LSTM, n_envs: int):
        self.lstm, self.n_envs = lstm, n_envs
        self.enabled = takes_onednn_path(lstm)
        self.packed: list[list[torch.Tensor]] = []

    @torch.no_grad()
    def refresh(self) -> None:
        """Reorder the weights (after each update), then check the packed call against ``torch.lstm`` on them."""
        if not self.enabled:
            return
        lstm, weights = self.lstm, self.lstm._flat_weights
        self.packed = []
        for layer in range(lstm.num_layers):
            input_size = lstm.input_size if layer == 0 else lstm.hidden_size
            self.packed.append(
                torch.ops.mkldnn._reorder_mkldnn_rnn_layer_weight(
                    weights[4 * layer],
                    weights[4 * layer + 1],
                    lstm.hidden_size,
                    False,
                    True,
                    False,
                    [1, self.n_envs, input_size],
                )
            )
        self.enabled = self._agrees()

    def _agrees(self) -> bool:
        """Whether the packed call gives ``torch.lstm``'s values, compared in evaluation mode (the rollout's): a module
        still in training mode (a policy just built) would otherwise draw dropout from the global RNG here."""
        generator = torch.Generator().manual_seed(0)
        shape = (self.lstm.num_layers, self.n_envs, self.lstm.hidden_size)
        x = torch.randn((1, self.n_envs, self.lstm.input_size), generator=generator)
        hx = (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
        training = self.lstm.training
        self.lstm.train(False)
        try:
            with torch.inference_mode():
                ours, theirs = self._packed_call(x, hx), run_lstm(self.lstm, x, hx)
        finally:
            self.lstm.train(training)
        return all(torch.equal(a, b) for a, b in zip((ours[0], *ours[1]), (theirs[0], *theirs[1])))

    def __call__(self, x: torch.Tensor, hx: HiddenCell) -> tuple[torch.Tensor, HiddenCell]:
        if not self.enabled or x.shape[1] != self.n_envs:
            return run_lstm(self.lstm, x, hx)
        return self._packed_call(x, hx)

    def _packed_call(self, x: torch.Tensor, hx: HiddenCell) -> tuple[torch.Tensor, HiddenCell]:
        """ATen's ``mkldnn_rnn`` (``torch.lstm``'s oneDNN path) with the packed weights: each layer's call, then the
        states stacked."""
        lstm, weights = self.lstm, self.lstm._flat_weights
        x, h, c = x.contiguous(), hx[0].contiguous(), hx[1].contiguous()
        hs, cs = [], []
        for layer, (w_ih, w_hh) in enumerate(self.packed):
            x, hy, cy, _ = rnn_layer(
                x,
                w_ih,
                w_hh,
                weights[4 * layer + 2],
                weights[4 * layer + 3],
                h[layer],
                c[layer],
                False,
                [],
                LSTM_MODE,
                lstm.hidden_size,
                lstm.num_layers,
                True,
                False,
                False,
                lstm.training,
            )
            hs.append(hy)
            cs.append(cy)
        return x, (torch.stack(hs, 0), torch.stack(cs, 0))


def step_loop(lstm: nn.LSTM):
    """:func:`~ppo_dict.algo.networks.recurrent_policy.process_sequence`'s per-step loop for ``lstm`` as ATen runs
    it, without ``torch.lstm``'s wrapper around each step, or None where torch would not take oneDNN's
    path (or would draw dropout between layers).

    Per step ``torch.lstm`` on the CPU is ``mkldnn_rnn``: the input made contiguous, each layer's states
    selected, ``mkldnn_rnn_layer`` per layer, the states stacked. Here the states stay one ``[n, hidden]``
    tensor per layer through the loop and are stacked once at the end: the same products by
    ``1 - episode_start`` where they can change a value (:func:`~ppo_dict.algo.networks.recurrent_policy.steps_zeroing`),
    the same kernel calls on the same values in the same order, without a select and a stack (and
    their backward nodes, which only copy) per step, so the same outputs and gradients
    (``tests/test_recurrent.py`` compares them with sb3-contrib's ``_process_sequence``)."""
    if not takes_onednn_path(lstm) or (lstm.dropout and lstm.num_layers > 1):
        return None

    def loop(
        features_sequence: torch.Tensor, keep: torch.Tensor, zeroing: list[bool], states: HiddenCell
    ) -> tuple[torch.Tensor, HiddenCell]:
        weights, n_seq, layers = lstm._flat_weights, keep.shape[1], range(lstm.num_layers)
        hs, cs = list(states[0].unbind(0)), list(states[1].unbind(0))
        outputs = []
        for step_features, step_keep, zeroes in zip(features_sequence, keep, zeroing):
            step_keep = step_keep.view(n_seq, 1)
            x = step_features.unsqueeze(dim=0).contiguous()
            for layer in layers:
                h, c = (step_keep * hs[layer], step_keep * cs[layer]) if zeroes else (hs[layer], cs[layer])
                x, hs[layer], cs[layer], _ = rnn_layer(
                    x,
                    weights[4 * layer],
                    weights[4 * layer + 1],
                    weights[4 * layer + 2],
                    weights[4 * layer + 3],
                    h,
                    c,
                    False,
                    [],
                    LSTM_MODE,
                    lstm.hidden_size,
                    lstm.num_layers,
                    True,
                    False,
                    False,
                    lstm.training,
                )
            outputs.append(x)
        return torch.cat(outputs), (torch.stack(hs, 0), torch.stack(cs, 0))

    return loop
