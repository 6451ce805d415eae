"""The keys a trial's result rows carry besides the trainer's metrics: written by the trial (``tune.trial``),
read by the Parquet sink."""

#: result keys that mark the final report of a trial ended by a deterministic error, and why it stopped
ERROR_KEY, STOP_REASON_KEY = "error", "stop_reason"
#: trial-level facts reported with every epoch (strings; the sink puts them in trials.parquet too)
NODE_KEY, GPU_KEY = "node_id", "gpu_ids"
NOSET_VISIBLE_DEVICES = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
#: result key: {path key: value} a trial read instead of its config's (a sweep moved on resume)
RELOCATED_KEY = "relocated"
