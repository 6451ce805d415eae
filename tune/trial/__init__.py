"""A trial: the Ray trainable around ``xbm.Trainer``, its epoch loop, checkpoints, resources, data-parallel
launch, and the guards that stop a trial whose learning has failed."""
