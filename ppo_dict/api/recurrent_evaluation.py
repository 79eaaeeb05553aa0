"""sb3-contrib's masked evaluation (``evaluate_policy``, ``MaskableEvalCallback``) with a recurrent model's states carried.

sb3-contrib 2.9.2's masked ``evaluate_policy`` (``sb3_contrib.common.maskable.evaluation``, which its
``MaskableEvalCallback`` calls) assigns the states ``predict`` returns to ``state`` but passes ``states``,
always None, to the next call when it masks: a recurrent model (``MaskableRecurrentPPO``) would act every
step from zero states, as if it had no memory. No sb3-contrib model is both masked and recurrent, so
there it changes nothing; here it would. The two below are sb3-contrib's, unchanged, given the model
through :class:`StateCarrier`, whose ``predict`` carries the states from each call to the next (each
env's zeroed where ``episode_start`` says an episode starts, as sb3's unmasked ``evaluate_policy`` does):
the episodes are those of a hand-written loop of ``predict(obs, state, episode_start, action_masks=...)``.

    from ppo_dict.api import MaskableEvalCallback, evaluate_policy  # instead of sb3_contrib.common.maskable's
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback as ContribMaskableEvalCallback


class StateCarrier:
    """``model`` whose ``predict`` ignores the ``state`` it is given and passes the one its previous call returned
    (None at first: zeros); every other attribute is the model's. One carrier per evaluation (the calls of one loop)."""

    def __init__(self, model: Any):
        self.model, self.state = model, None

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False, **action_masks: Any
    ) -> tuple[Any, Any]:
        actions, self.state = self.model.predict(observation, self.state, episode_start, deterministic, **action_masks)
        return actions, self.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["model"], name)


def evaluate_policy(
    model: Any,
    env: Any,
    n_eval_episodes: int = 10,
    deterministic: bool = True,
    render: bool = False,
    callback: Optional[Callable[[dict[str, Any], dict[str, Any]], None]] = None,
    reward_threshold: Optional[float] = None,
    return_episode_rewards: bool = False,
    warn: bool = True,
    use_masking: bool = True,
) -> Any:
    """sb3-contrib's masked ``evaluate_policy`` (the same arguments, episodes and results), with the model's recurrent
    states carried from step to step (see the module doc); for a model without states, sb3-contrib's own."""
    from sb3_contrib.common.maskable.evaluation import evaluate_policy as contrib_evaluate_policy

    return contrib_evaluate_policy(
        StateCarrier(model),
        env,
        n_eval_episodes,
        deterministic,
        render,
        callback,
        reward_threshold,
        return_episode_rewards,
        warn,
        use_masking,
    )


class MaskableEvalCallback(ContribMaskableEvalCallback):
    """sb3-contrib's ``MaskableEvalCallback`` (the same arguments, files, logs and best model), whose evaluations carry a
    recurrent model's states (:func:`evaluate_policy`)."""

    def _on_step(self) -> bool:
        model = self.model
        self.model = StateCarrier(model)  # what sb3-contrib's _on_step hands its evaluate_policy; save() etc. are the model's
        try:
            return super()._on_step()
        finally:
            self.model = model
