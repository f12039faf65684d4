"""Data preparation: DAPO-Math + modified HotpotQA in verl's parquet schema (``docs/data.md``).

Pipeline: :mod:`~rlec.data.readers` (JSON / JSON Lines / parquet) -> :mod:`~rlec.data.sources`
(validated items) -> :mod:`~rlec.data.dedup` -> :mod:`~rlec.data.hotpot_modify` (paragraph drops)
-> :mod:`~rlec.data.mix` (selection, repeats, targets) -> :mod:`~rlec.data.lengths` (length
filter) -> :mod:`~rlec.data.writer` (atomic parquet). The command is :mod:`rlec.data.prepare`.
"""
