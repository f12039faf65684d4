"""Shared command-line helpers of ``rlec.eval.evaluate``, ``rlec.eval.metrics`` and ``tools/convert_hf_to_mcore.py``."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where X says something: not for None / False, nor when the
    help text already states its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)
