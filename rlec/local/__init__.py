"""The local CPU run: the cluster's training loop at toy scale on verl's and Megatron's pieces.

``python -m rlec.local.runner`` (``make run``); see :mod:`rlec.local.runner` for the step and
``docs/local_run.md`` for the guide.
"""
