"""The trainer's parts, one concern per module: devices and AMP, optimisers, losses, data loading,
the epoch loop, evaluation with diagnostics, and RNG state. ``xbm.trainer.Trainer`` assembles them."""
