"""``python -m rlec.demo``: the learning demo (:func:`rlec.demo.pipeline.main`)."""

from rlec.demo.pipeline import main

raise SystemExit(main())
