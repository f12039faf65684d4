"""E3, Pass@k Training and RLVE in the local run: thin adapters of the same pure code the cluster uses.

Each adapter is a :class:`rlec.local.hooks.StepHook` built from the config (``algorithm=e3``,
``algorithm=passk``, ``algorithm=rlve``, or a list), a no-op otherwise. They call what the verl
trainer mixins call, in the same order within a step:

- :class:`E3Hook`: :class:`rlec.algorithms.e3.E3Controller` plans the step's temperature and the
  per-prompt rollout budget before the rollout (the local rollout samples at that temperature and
  the update's log-probs divide by the same one, the local counterpart of ``rlec_e3_agent`` and the
  trainer-config temperature), applies the length bias to correct responses of easy prompts
  (chosen by the graded outcome, as ``rlec.verl_plugin.e3.apply_length_bias``), and observes the
  step's exact ``actor/entropy`` and outcomes afterwards (``e3/...`` metrics);
- :class:`PasskHook`: Pass@k Training's entropy switch (:class:`rlec.algorithms.passk.EntropySwitch`)
  sets ``algorithm.passk.active_k`` for the ``rlec_passk`` estimator (registered by
  :mod:`rlec.verl_plugin.estimators`, which verl's ``compute_advantage`` then calls) and logs
  ``passk/active_k``;
- :class:`RLVEHook`: after each step, the environment source of the RLVE dataset (the local
  loader's ``data.custom_cls``, :class:`rlec.verl_plugin.rlve_dataset.RLVEDataset`) updates its
  difficulty controllers from every response's environment, difficulty and outcome (``rlve/...``
  metrics); its state travels in the prompt loader's state.

State is saved with every local checkpoint (``user_state["hooks"]``) and restored on resume.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf, open_dict

from rlec.algorithms.passk import PASSK_ESTIMATOR
from rlec.config import select
from rlec.local.hooks import RolloutPlan, StepHook, register_hook


def _prompt_index(data: Any) -> list[int]:
    """The prompt index (``s<step>p<i>`` uid -> i) of every response row."""
    return [int(str(uid).rsplit("p", 1)[1]) for uid in data.non_tensor_batch["uid"]]


class E3Hook(StepHook):
    """E3 in the local loop (module docstring).

    Args:
        cfg: the composed config (``rlec.e3``, ``actor_rollout_ref.rollout.{n,temperature}``).
        vocab_size: the policy's vocabulary size V (``rlec.e3.temperature.vocab_size`` wins).

    Raises:
        ValueError: an ``rlec.e3`` value out of range (see :class:`rlec.algorithms.e3.E3Controller`).
    """

    name = "e3"

    def __init__(self, cfg: Any, vocab_size: int | None) -> None:
        from rlec.algorithms.e3 import E3Controller, E3Settings

        settings = E3Settings.from_config(cfg)
        rollout = cfg.actor_rollout_ref.rollout
        self.total_steps = int(cfg.trainer.total_training_steps)
        self.controller = E3Controller(settings, n=int(rollout.n), temperature=float(rollout.temperature),
                                       vocab_size=settings.vocab_size or vocab_size)
        self._keys: list[str] = []
        self._mu: list[float] = []

    def plan_rollout(self, step: int, batch: dict[str, Any], plan: RolloutPlan) -> None:
        from rlec.verl_plugin.e3 import prompt_key_of

        self._keys = [prompt_key_of(info, i) for i, info in enumerate(batch["extra_info"])]
        e3 = self.controller.plan(self._keys)
        plan.temperature, plan.n_per_prompt, self._mu = e3.temperature, list(e3.rollout_n), list(e3.length_mu)

    def adjust_scores(self, step: int, data: Any, scores: list[float], infos: list[dict[str, Any]]) -> list[float]:
        from rlec.algorithms.e3 import length_bias_factor

        lengths = data.batch["response_mask"].sum(dim=1).tolist()
        out = []
        for row, (score, info, prompt) in enumerate(zip(scores, infos, _prompt_index(data))):
            mu = self._mu[prompt]
            factor = length_bias_factor(int(lengths[row]), mu) if mu > 0 and float(info.get("correct", 0.0)) > 0 else 1.0
            info["score"] = score * factor
            info["e3_length_mu"], info["e3_length_bias"] = mu, factor
            out.append(score * factor)
        return out

    def after_step(self, step: int, data: Any, infos: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, float]:
        keys = [self._keys[i] for i in _prompt_index(data)]
        return self.controller.observe(step, self.total_steps, metrics.get("actor/entropy"), keys,
                                       [float(i.get("correct", 0.0)) for i in infos],
                                       [float(i.get("e3_length_mu", 0.0)) for i in infos],
                                       [float(i.get("e3_length_bias", 1.0)) for i in infos])

    def state_dict(self) -> dict[str, Any]:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.controller.load_state_dict(state)


class PasskHook(StepHook):
    """Pass@k Training's entropy switch in the local loop (module docstring)."""

    name = "passk"

    def __init__(self, cfg: Any) -> None:
        from rlec.algorithms.passk import EntropySwitch
        from rlec.verl_plugin.estimators import active_k

        algorithm = cfg.algorithm
        self.k = active_k({"passk": {"k": select(algorithm, "passk.k")}})
        self.switch = None
        if select(algorithm, "passk.switch.enable", False):
            threshold = select(algorithm, "passk.switch.entropy_threshold")
            if threshold is None:
                raise ValueError("algorithm.passk.switch.enable needs algorithm.passk.switch.entropy_threshold (nats)")
            self.switch = EntropySwitch(k=self.k, threshold=float(threshold))
        self._used = self.k

    def advantage_config(self, step: int, algorithm: Any) -> Any:
        self._used = self.switch.active_k if self.switch is not None else self.k
        config = OmegaConf.create(OmegaConf.to_container(algorithm, resolve=True))
        with open_dict(config):
            config.passk.active_k = int(self._used)
        return config

    def after_step(self, step: int, data: Any, infos: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, float]:
        entropy = metrics.get("actor/entropy")
        if self.switch is not None and entropy is not None:
            self.switch.update(float(entropy))
        return {"passk/active_k": float(self._used)}

    def state_dict(self) -> dict[str, Any]:
        return self.switch.state_dict() if self.switch is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and self.switch is not None:
            self.switch.load_state_dict(state)


class RLVEHook(StepHook):
    """RLVE's difficulty controllers in the local loop (module docstring).

    Args:
        source: the :class:`rlec.environments.EnvironmentSource` of the loader's dataset.
    """

    name = "rlve"

    def __init__(self, source: Any) -> None:
        self.source = source

    def after_step(self, step: int, data: Any, infos: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, float]:
        samples = [{"environment": (extra or {}).get("environment"), "difficulty": (extra or {}).get("difficulty"),
                    "correct": float(info.get("correct", 0.0))}
                   for extra, info in zip(data.non_tensor_batch["extra_info"], infos)]
        return self.source.update(samples)


@register_hook("e3", lambda cfg: bool(select(cfg, "rlec.e3.enable", False)), section="rlec.e3", doc="e3.md")
def _e3(cfg: Any, loader: Any) -> StepHook:
    vocab = getattr(getattr(loader, "tokenizer", None), "vocab_size", None)
    return E3Hook(cfg, vocab_size=_model_vocab(cfg) or vocab)


@register_hook("passk", lambda cfg: select(cfg, "algorithm.adv_estimator") == PASSK_ESTIMATOR, section="algorithm.passk",
               doc="passk.md")
def _passk(cfg: Any, loader: Any) -> StepHook:
    import rlec.verl_plugin.estimators  # noqa: F401 - registers rlec_passk with verl

    return PasskHook(cfg)


@register_hook("rlve", lambda cfg: bool(select(cfg, "data.rlve.enable", False)), section="rlec.rlve",
               doc="environments.md")
def _rlve(cfg: Any, loader: Any) -> StepHook:
    source = getattr(getattr(loader, "dataset", None), "rlve_source", None)
    if source is None:
        raise ValueError("data.rlve.enable is true but the prompt dataset has no environment source: use algorithm=rlve "
                         "(data.custom_cls = rlec.verl_plugin.rlve_dataset.RLVEDataset)")
    return RLVEHook(source)


def _model_vocab(cfg: Any) -> int | None:
    """``vocab_size`` of the policy's config.json (the model folder or the tiny model's config)."""
    from rlec.models import TINY_MODEL_CONFIG, read_model_config

    path = select(cfg, "actor_rollout_ref.model.path")
    try:
        config = read_model_config(path) if path else __import__("json").loads(TINY_MODEL_CONFIG.read_text())
    except (OSError, ValueError):
        return None
    return int(config["vocab_size"]) if config.get("vocab_size") else None
