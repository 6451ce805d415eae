"""The export folder and the embedder (xbm/evaluate/embedder.py): new images enter exactly as evaluation fed them."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xbm.config import TrainConfig
from xbm.errors import BadImageError
from xbm.evaluate.embedder import CARD, WEIGHTS, ExportFolderError, load_embedder, write_export
from xbm.trainer import Trainer

from ..data.conftest import make_drawings, truncate

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("cub_fixture", ROOT / "benchmarks" / "cub_fixture.py")
cub_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cub_fixture)

COMMON = {"model": "resnet18", "image_size": 16, "embedding_size": 8, "batch_size": 8, "samples_per_class": 4,
          "device": "cpu", "num_workers": "0", "epochs": 1, "warmup_epochs": 0, "seed": 0}


def omniglot_trainer(root: Path) -> Trainer:
    make_drawings(root)  # grey 1-bit PNGs; the omniglot data set flips their polarity (invert)
    return Trainer(TrainConfig.from_dict({**COMMON, "dataset": "omniglot", "data_root": str(root)}))


def photo_trainer(root: Path) -> Trainer:
    # 120 x 90 RGB JPEGs decoded at short side 18 (metric preset at 16 px): PIL's draft mode is used
    cub_fixture.write_cub(root, 32, classes=4, size=(120, 90))
    return Trainer(TrainConfig.from_dict({**COMMON, "dataset": "cub200", "data_root": str(root),
                                          "normalize": "dataset"}))


TRAINERS = {"omniglot": omniglot_trainer, "photos": photo_trainer}


def export(trainer: Trainer, folder: Path) -> Path:
    cfg = trainer.cfg
    return write_export(folder, trainer.model.state_dict(), model=cfg.model, embedding_size=cfg.embedding_size,
                        input_shape=trainer.splits.input_shape, preprocessing=trainer.splits.preprocessing,
                        provenance={"run": "test", "epoch": 0}, config=cfg.to_dict())


def query_files(trainer: Trainer) -> list[str]:
    query = trainer.splits.test.query
    return [query.source.file_of(int(j)) for j in query.indices]


@pytest.fixture(scope="module", params=sorted(TRAINERS))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    trainer = TRAINERS[request.param](root / "data")
    torch.manual_seed(1)
    with torch.no_grad():  # weights away from the init, BatchNorm statistics included
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        for name, b in trainer.model.named_buffers():
            if name.endswith("running_mean") or name.endswith("running_var"):
                b.mul_(1.5).add_(0.1)
    return request.param, trainer, export(trainer, root / "export")


def test_embed_paths_equals_the_trainers_evaluation_embeddings(exported):
    """Bug caught: the embedder decodes, crops or normalises new images differently from evaluation (the
    polarity flip of Omniglot forgotten, uint8 fed unnormalised, ImageNet statistics instead of the data
    set's, a JPEG decoded at full size where training used draft mode): embeddings differ."""
    name, trainer, folder = exported
    expected, _ = trainer.embed(trainer.model, trainer.splits.test.query)
    embedder = load_embedder(folder, device="cpu")
    got = embedder.embed(query_files(trainer), batch_size=5)
    assert got.dtype == torch.float32 and got.shape == expected.shape == (len(trainer.splits.test.query), 8)
    assert float((got - expected.cpu()).abs().max()) <= 1e-6
    assert torch.allclose(got.norm(dim=1), torch.ones(len(got)), atol=1e-5)
    if name == "omniglot":
        assert trainer.splits.preprocessing.invert and trainer.splits.preprocessing.mode == "L"


def test_pil_images_paths_and_uint8_tensors_embed_alike(exported):
    """Bug caught: a PIL image or a tensor skips a step the path goes through (polarity, mode, statistics)."""
    name, trainer, folder = exported
    embedder = load_embedder(folder, device="cpu")
    files = query_files(trainer)[:6]
    pil = [Image.open(f) for f in files]
    if name == "omniglot":  # grey [H, W]; PNGs are read whole, so a path and its PIL image agree
        tensors = [torch.from_numpy(np.array(Image.open(f).convert("L"))) for f in files]
        assert torch.equal(embedder.embed(files), embedder.embed(pil))
    else:  # RGB [3, H, W]
        tensors = [torch.from_numpy(np.array(Image.open(f).convert("RGB"))).permute(2, 0, 1) for f in files]
    assert torch.equal(embedder.embed(pil), embedder.embed(tensors))
    if name != "omniglot":  # same-sized RGB images also come as one uint8 batch [N, 3, H, W]
        assert torch.equal(embedder.embed(torch.stack(tensors)), embedder.embed(tensors))
    # one image alone: the same row up to the batch size's rounding
    assert float((embedder.embed(files[0]) - embedder.embed(files)[:1]).abs().max()) <= 1e-6


def test_export_card_records_the_preprocessing_and_where_the_weights_came_from(exported):
    """Bug caught: the preprocessing is not saved with the weights (a loader would have to guess it)."""
    import yaml

    _, trainer, folder = exported
    card = yaml.safe_load((folder / CARD).read_text())
    assert card["preprocessing"] == trainer.splits.preprocessing.to_dict()
    assert card["provenance"] == {"run": "test", "epoch": 0} and card["config"]["model"] == "resnet18"
    assert (folder / "README.md").read_text().startswith("# Image embedder: resnet18, 8 dimensions")
    # Bug caught: the weights written readable by their owner only (safetensors' save_file), while the card and
    # README are not: a folder handed to colleagues that they cannot load
    assert (folder / WEIGHTS).stat().st_mode & 0o777 == (folder / CARD).stat().st_mode & 0o777


@pytest.mark.slow
def test_export_loads_in_a_process_without_ray(exported):
    """Bug caught: loading an export imports Ray (through tune), so a user needs the sweep's stack to embed."""
    _, trainer, folder = exported
    files = query_files(trainer)[:2]
    code = ("import sys, json, xbm; e = xbm.load_embedder(sys.argv[1], device='cpu'); z = e.embed(sys.argv[2:]); "
            "print(json.dumps({'ray': 'ray' in sys.modules, 'tune': 'tune' in sys.modules, 'shape': list(z.shape)}))")
    out = subprocess.run([sys.executable, "-c", code, str(folder), *files], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ray": False, "tune": False, "shape": [2, 8]}


def test_an_export_folder_missing_a_file_is_named(exported, tmp_path):
    """Bug caught: a folder without its weights fails deep inside safetensors instead of naming the file."""
    _, _, folder = exported
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / CARD).write_text((folder / CARD).read_text())
    with pytest.raises(ExportFolderError, match=WEIGHTS):
        load_embedder(partial)


def test_an_undecodable_image_is_named_or_skipped(exported, tmp_path):
    """Bug caught: a corrupt image crashes anonymously, or ``skip`` drops the wrong rows."""
    name, trainer, folder = exported
    embedder = load_embedder(folder, device="cpu")
    files = query_files(trainer)[:3]
    bad = tmp_path / ("bad.png" if name == "omniglot" else "bad.jpg")
    bad.write_bytes(Path(files[1]).read_bytes())
    truncate(bad)
    items = [files[0], str(bad), files[2]]
    with pytest.raises(BadImageError, match="bad"):
        embedder.embed(items)
    batches = list(embedder.batches(items, batch_size=2, on_error="skip"))
    assert [b.positions for b in batches] == [[0], [2]] and [s[0] for b in batches for s in b.skipped] == [1]
    kept = torch.cat([b.rows for b in batches])
    assert float((kept - embedder.embed([files[0], files[2]])).abs().max()) <= 1e-6
