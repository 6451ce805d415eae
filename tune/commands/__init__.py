"""xbm-tune's commands: one module per command, each with ``add_arguments(parser)`` and ``run(args) -> int``."""
