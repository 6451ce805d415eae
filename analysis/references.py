"""Reference points from the seed papers, drawn beside a sweep's one-parameter effects.

They come from another data set and backbone (CIFAR-100 in the thesis), so they are shown on their
own axis and labelled as reference values, never mixed into this sweep's numbers: the shape of the
curve is what compares, not the level.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.columns import config_column


@dataclass(frozen=True)
class Reference:
    param: str  # config column, e.g. ``config.normaliser.lambda_mu``
    x: tuple[float, ...]
    y: tuple[float, ...]
    unit: str
    dataset: str
    source: str

    @property
    def label(self) -> str:
        return f"reference values on {self.dataset} from the paper ({self.source})"

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"param_value": self.x, "reference_value": self.y, "unit": self.unit,
                             "dataset": self.dataset, "source": self.source})


REFERENCES: dict[str, Reference] = {
    # Thesis Table 5.14, lambda_mu row: PC-XBN with lambda_mu swept from 0 to 1 on CIFAR-100.
    "config.normaliser.lambda_mu": Reference(
        param="config.normaliser.lambda_mu",
        x=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        y=(72.5, 74.9, 84.8, 91.7, 60.4, 63.9),
        unit="%", dataset="CIFAR-100", source="thesis Table 5.14, lambda_mu row"),
}


def reference_for(param: str) -> Reference | None:
    """The reference points for a parameter (dotted name or config column), or None."""
    return REFERENCES.get(config_column(param))
