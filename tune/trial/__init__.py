"""A trial: the Ray trainable around ``xbm.Trainer``, its epoch loop, checkpoints, resources, data-parallel
launch, and what its process logs and draws."""
