"""The deliberate stop of a training run: the one exception type both sides of the launch know.

The trainer's plugins (a non-finite update, :class:`rlec.verl_plugin.update_guard.NonFiniteUpdateError`; a
mismatch above its stop level, :class:`rlec.verl_plugin.mismatch.MismatchError`) raise a subclass inside verl's
TaskRunner; the launcher's training entry (:mod:`rlec.cluster.main_ppo`) finds it in the error chain, prints its
message as one line and exits 2. It lives below both, so the trainer never imports the launcher's entry (an
import-linter contract in pyproject.toml).
"""

from __future__ import annotations

__all__ = ["RunStopError"]


class RunStopError(RuntimeError):
    """The base of rlec's errors that stop a run on purpose inside verl's TaskRunner (module docstring): the
    driver prints its message as one line and exits 2."""
