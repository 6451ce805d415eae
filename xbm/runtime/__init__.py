"""Where and how a run computes, below everything that trains or evaluates: the device and mixed precision
(``device.py``), full-fp32 matrix products for neighbour searches and group sums (``precision.py``), the CPUs a
process may use (``cpus.py``) and the progress bars a run draws (``progress.py``)."""
