"""xbm/data/preprocess.py: one object for decode, evaluation transform and batch statistics."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from xbm.data import build_dataset
from xbm.data.preprocess import Preprocessing, decode_image

from .conftest import make_drawings


def test_the_batch_it_makes_is_the_trainers_evaluation_input(tmp_path, config):
    """Bug caught: ``Preprocessing(items)`` differs from what evaluation feeds the model (decode, polarity,
    geometry or statistics of another place)."""
    make_drawings(tmp_path)
    splits = build_dataset(config(dataset="omniglot", data_root=str(tmp_path), normalize="dataset"))
    prep, query = splits.preprocessing, splits.test.query
    files = [query.source.file_of(int(j)) for j in query.indices[:5]]
    expected = splits.batch_transform("eval")(torch.stack([query[i][0] for i in range(5)]))
    assert torch.equal(prep(files), expected)
    assert prep.invert and prep.mode == "L" and prep.mean is not None and prep.preset == "shift"
    # the statistics at work: strokes (255) map to (1 - mean) / std
    assert torch.allclose(expected.max(), torch.tensor((1.0 - prep.mean[0]) / prep.std[0]))


def test_round_trip_and_rules():
    """Bug caught: a saved preprocessing that does not load back equal, or a bad one accepted."""
    prep = Preprocessing("RGB", False, 36, 32, "metric", (0.5, 0.4, 0.3), (0.2, 0.2, 0.2))
    assert Preprocessing.from_dict(prep.to_dict()) == prep and prep.to_dict()["mean"] == [0.5, 0.4, 0.3]
    assert Preprocessing.from_dict({**prep.to_dict(), "mean": None, "std": None}).stats is None
    for bad, match in (({"mode": "CMYK"}, "mode must be one of"), ({"preset": "bogus"}, "preset must be one of"),
                       ({"mean": [0.5]}, "mean must have 3 value"), ({"std": None}, "given together"),
                       ({"load_size": 0}, "load_size must be >= 1"), ({"colour": 1}, "unknown keys")):
        with pytest.raises(ValueError, match=match):
            Preprocessing.from_dict({**prep.to_dict(), **bad})
    with pytest.raises(ValueError, match="uint8"):
        prep.pixels(torch.zeros(3, 4, 4))


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_decode_flips_the_polarity_of_every_band_exactly(mode):
    """Bug caught: dark strokes left dark (no flip), or flipped with a wrong table or in only one band (Omniglot
    reads as bright strokes on black, the drawings' pixels are 255 - x)."""
    pixels = np.random.default_rng(0).integers(0, 256, (6, 9, 3) if mode == "RGB" else (6, 9), dtype=np.uint8)
    flipped = decode_image(Image.fromarray(pixels, mode), mode, invert=True, load_size=64)
    assert np.array_equal(np.asarray(flipped), 255 - pixels)
    same = decode_image(Image.fromarray(pixels, mode), mode, invert=False, load_size=64)
    assert np.array_equal(np.asarray(same), pixels)
