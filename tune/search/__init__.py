"""Where the next trial comes from and when one stops: spaces, searchers, schedulers (ASHA, PBT, PB2),
the guards every scheduler carries (a trial whose learning failed, the sweep's budgets), Optuna export and
warm start."""
