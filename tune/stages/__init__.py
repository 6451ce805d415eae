"""The stages that re-run a sweep's configurations (``xbm-tune confirm``, ``xbm-tune refit``): which trials to re-run,
their seeds, their configs and the checks before Ray starts. The commands (``tune.commands``) parse the arguments,
call these and print."""
