"""Where the next trial comes from and when one stops: spaces, searchers, schedulers (ASHA, PBT, PB2),
Optuna export and warm start."""
