"""E3's registration in verl 0.9.1: the agent loop ``rlec_e3_agent`` that samples at the step's temperature.

Everything else of E3 is :mod:`rlec.algorithms.e3` (the math, the settings,
:class:`rlec.algorithms.e3.algorithm.E3`), driven by the generic
:class:`rlec.verl_plugin.trainers.AlgorithmsMixin`. Every agent-loop worker samples with its own
config copy, so the trainer-config temperature (the plan's, which the mixin writes there for the actor's
log-probs) cannot reach vLLM: each training prompt carries it as ``rlec_temperature`` and
:class:`E3AgentLoop` puts it into that prompt's sampling params (:func:`e3_sampling_params`).
Selected by ``actor_rollout_ref.rollout.agent.default_agent_loop=rlec_e3_agent``
(``megatron_configs/algorithm/e3.yaml``). On the CPU platform the CPU wing registers its subclass under the same name
(:class:`rlec.cpu.agent_loops.ScriptedE3AgentLoop`: the CPU run's scripted answers and request seeds besides).
"""

from __future__ import annotations

from typing import Any, Mapping

from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from rlec.algorithms.e3 import E3_AGENT_LOOP
from rlec.algorithms.e3.algorithm import LENGTH_MU_KEY, PROMPT_KEY, TEMPERATURE_KEY, prompt_key_of

__all__ = ["E3AgentLoop", "E3_AGENT_LOOP", "LENGTH_MU_KEY", "PROMPT_KEY", "TEMPERATURE_KEY", "e3_sampling_params",
           "prompt_key_of"]


def e3_sampling_params(sampling_params: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling params of one prompt: its E3 temperature replaces the worker's configured one.

    Args:
        sampling_params: what verl's agent-loop worker built from its own config copy.
        fields: the prompt's fields (the agent loop's keyword arguments).

    Returns:
        A copy with ``temperature`` = ``fields["rlec_temperature"]`` when the prompt carries it
        and the request samples (temperature > 0); greedy requests and prompts without the key
        (validation) are left as they are.
    """
    out = dict(sampling_params)
    value = fields.get(TEMPERATURE_KEY)
    if value is not None and float(out.get("temperature", 0.0)) > 0.0:
        out["temperature"] = float(value)
    return out


@register_agent_loop(E3_AGENT_LOOP)
class E3AgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop sampling at the prompt's E3 temperature (:func:`e3_sampling_params`)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        return await super().run(e3_sampling_params(sampling_params, kwargs), **kwargs)
