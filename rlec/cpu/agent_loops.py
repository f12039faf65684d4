"""The CPU run's agent loops: verl's single-turn loop with scripted answers and per-request seeds on ``rlec_hf``.

A tiny random model is never right, so every group's rewards are equal and every mean-only advantage is 0:
:class:`ScriptedAnswersMixin` lets a share of each group answer by script (``rlec.cpu.scripted_fraction``, set by the
launcher for the tiny random model only) and gives every request on the CPU rollout its own sampling seed. Registered
in verl's agent-loop registry when the process imports verl's agent loop (:mod:`rlec.cpu` registers the hook), after
rlec's GPU loop of the same name, which they replace on the CPU platform:

- ``rlec_scripted_agent`` (:class:`ScriptedAgentLoop`, the CPU layout's ``rollout.agent.default_agent_loop``);
- ``rlec_e3_agent`` (:class:`ScriptedE3AgentLoop`): E3's loop (:class:`rlec.verl_plugin.e3.E3AgentLoop`, the prompt's
  temperature) with the same scripted answers and seeds. On a GPU ``rlec_e3_agent`` is E3's loop alone.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from rlec.cpu.rollout_server import FORCED_TOKENS
from rlec.run_config import RunConfig, worker_run_config
from rlec.verl_plugin.cpu_interface import ROLLOUT_NAME, request_seed
from rlec.verl_plugin.e3 import E3_AGENT_LOOP, E3AgentLoop

__all__ = ["SCRIPTED_AGENT_LOOP", "ScriptedAgentLoop", "ScriptedAnswersMixin", "ScriptedE3AgentLoop"]

SCRIPTED_AGENT_LOOP = "rlec_scripted_agent"


class ScriptedAnswersMixin:
    """For an agent loop: the last ``round(rollout.n x rlec.cpu.scripted_fraction)`` samples of each
    prompt answer a scripted ``\\boxed{<gold>}`` or ``\\boxed{I don't know}`` (seeded coin per prompt
    and sample) instead of the rollout's generation, for the tiny random model: a random model is never right, so every group's rewards
    are equal, every mean-only advantage is 0 and nothing downstream (the update, RLVE's difficulty
    controller) sees a correct answer. Off-policy demonstrations: 0 (the default) for real training.
    Validation (one sample per prompt) is never scripted.

    On the CPU rollout (``rlec_hf``) it also gives every request its own sampling seed
    (:func:`request_seed` of ``data.seed``, the global step, the prompt's ``index`` and the sample's
    ``session_id``), so sampling is reproducible per sample: a resumed run draws what an
    uninterrupted one drew.
    """

    def _rlec_run(self) -> RunConfig:
        """The config this agent loop was handed, converted once per worker config (:func:`rlec.run_config.worker_run_config`)."""
        return worker_run_config(self.config)

    def _with_request_seed(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``sampling_params`` plus this sample's ``seed`` on the CPU rollout; unchanged on any other rollout."""
        if str(getattr(self.rollout_config, "name", "")) != ROLLOUT_NAME or "seed" in sampling_params:
            return sampling_params
        sample = kwargs.get("index")
        if sample is None:  # a prompt source without an index: the prompt itself names the sample
            sample = repr(kwargs.get("raw_prompt"))
        seed = request_seed(self._rlec_run().keys.data_seed, kwargs.get("global_steps"), sample,
                            kwargs.get("session_id", 0))
        return {**sampling_params, "seed": seed}

    def _scripted_text(self, kwargs: dict[str, Any]) -> str | None:
        fraction = self._rlec_run().rlec.cpu.scripted_fraction
        n = int(self.rollout_config.n)
        session = int(kwargs.get("session_id", 0))
        k = round(n * fraction)
        if not k or session < n - k:
            return None
        import random

        from rlec.environments import reference_answer

        gold = reference_answer(kwargs.get("data_source", ""), kwargs["reward_model"]["ground_truth"])
        coin = random.Random(f"{kwargs['reward_model']['ground_truth']}/{session}").random()  # same problem, same script
        return f"\\boxed{{{gold}}}" if coin < 0.5 else "\\boxed{I don't know}"

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """verl's agent loop, once per sample: on the CPU rollout the sample gets its own seed
        (:meth:`_with_request_seed`); a scripted sample is generated with the rollout client swapped, for this call
        only, for one that returns the scripted tokens; any other sample runs the parent loop unchanged."""
        sampling_params = self._with_request_seed(sampling_params, kwargs)
        text = self._scripted_text(kwargs)
        if text is None:
            return await super().run(sampling_params, **kwargs)
        from verl.workers.rollout.replica import TokenOutput

        tokenizer, budget = self.tokenizer, int(self.rollout_config.response_length)
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: budget - 1] + [end]

        real = self.server_manager
        scores = str(getattr(self.rollout_config, "name", "")) == ROLLOUT_NAME  # vLLM's generate takes no extra kwarg

        class _Scripted:  # the rollout's answer (its weights version and stop fields) with the scripted tokens
            async def generate(self, request_id: str, **kw: Any) -> TokenOutput:
                if scores:  # rlec_hf scores the scripted tokens (log-probs, routes) as it would a sample of its own
                    return await real.generate(request_id, **kw, **{FORCED_TOKENS: ids})
                out = await real.generate(request_id, **kw)  # other rollouts: a sample, its tokens replaced
                return out.model_copy(update={"token_ids": ids, "log_probs": None, "routed_experts": None,
                                              "stop_reason": "completed"})

        self.server_manager = _Scripted()
        try:
            return await super().run(sampling_params, **kwargs)
        finally:
            self.server_manager = real


@register_agent_loop(SCRIPTED_AGENT_LOOP)
class ScriptedAgentLoop(ScriptedAnswersMixin, SingleTurnAgentLoop):
    """verl's single-turn agent loop with the CPU run's scripted answers (:class:`ScriptedAnswersMixin`)."""


@register_agent_loop(E3_AGENT_LOOP)
class ScriptedE3AgentLoop(ScriptedAnswersMixin, E3AgentLoop):
    """E3's agent loop on the CPU platform: the prompt's E3 temperature (:class:`rlec.verl_plugin.e3.E3AgentLoop`) and
    the CPU run's scripted answers and request seeds (:class:`ScriptedAnswersMixin`, scripted answers off unless
    ``rlec.cpu.scripted_fraction`` > 0). The two commute: the mixin adds a ``seed`` and may swap the answer, E3's loop
    replaces the ``temperature``."""
