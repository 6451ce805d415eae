"""What a sweep leaves: the sink that writes the Parquet contract, the sweep record, live lines, loggers,
and the status table read back from the Parquet."""
