"""The sweep's driver: its options (``options``), every check before Ray starts (``plan.prepare``), the trials'
shape across workers and nodes (``workers``), the Ray session (``cluster``) and the run itself (``sweep``).

Commands call it; it calls ``tune.search``, ``tune.trial`` and ``tune.results``, none of which imports it back."""
