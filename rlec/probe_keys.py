"""The metric keys of the probe set (``rlec/probe/*``), one home for the hook that logs them and the experiments that
read them.

:mod:`rlec.verl_plugin.probe` logs them inside verl's trainer; :mod:`rlec.experiments.keys` names them for the
experiments' gates and tables. Pure: no verl, no torch, so the experiments read the names without importing the hook.
"""

from __future__ import annotations

__all__ = ["ENTROPY", "LOW_Q", "RESPONSE_LENGTH", "TIMING", "pass_at_k_key"]

ENTROPY = "rlec/probe/entropy"  # mean per-token entropy of the probe responses (nats)
RESPONSE_LENGTH = "rlec/probe/response_length"  # mean tokens per probe response
TIMING = "timing_s/rlec_probe"  # seconds the probe took in its step

LOW_Q = "low_q"  # the probe file's boolean column: the prompts whose base pass rate is low (the pilot's)


def pass_at_k_key(k: int, subset: str | None = None) -> str:
    """The metric key of the probe's pass@k: ``rlec/probe/pass@<k>``, or over a subset ``rlec/probe/pass@<k>/<subset>``
    (``pass_at_k_key(4, LOW_Q)`` = ``rlec/probe/pass@4/low_q``).

    Raises:
        ValueError: ``k`` is not an integer (``int(k)`` fails).
    """
    return f"rlec/probe/pass@{int(k)}" + (f"/{subset}" if subset else "")
