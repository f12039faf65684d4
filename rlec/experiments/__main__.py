"""``python -m rlec.experiments <name>`` (:func:`rlec.experiments.cli.main`)."""

from rlec.experiments.cli import main

raise SystemExit(main())
