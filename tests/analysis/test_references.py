"""The seeds' reference points: thesis Table 5.14's lambda_mu row."""
from analysis.references import REFERENCES, reference_for


def test_lambda_mu_row_of_table_5_14():
    ref = reference_for("normaliser.lambda_mu")
    assert ref is reference_for("config.normaliser.lambda_mu") is REFERENCES["config.normaliser.lambda_mu"]
    frame = ref.frame()
    assert list(frame["param_value"]) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert list(frame["reference_value"]) == [72.5, 74.9, 84.8, 91.7, 60.4, 63.9]
    assert set(frame["dataset"]) == {"CIFAR-100"}
    assert ref.label.startswith("reference values on CIFAR-100 from the paper")
    assert reference_for("memory.ratio") is None
