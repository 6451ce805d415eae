"""Errors of the analysis layer."""
from __future__ import annotations


class NotApplicable(ValueError):
    """The sweep's data cannot support this analysis (parameter not swept, metric never reported,
    no finished trial, ...). The message is one line saying why; ``write_report`` prints it in place
    of the section instead of failing."""
