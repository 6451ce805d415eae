"""The spaces that reproduce a seed paper's table (search_spaces/<paper>_table*.yaml): each one's resolved config is
the protocol its paper states, key by key; its header cites the table and lists the paper's numbers (those of
analysis/references.py); ``xbm-tune show-space`` prints that header."""
from __future__ import annotations

import re

import pytest

from analysis.references import TABLES
from tune.cli import main
from tune.search.spaces import load_space
from tune.search.spaces.schema import header_comments
from xbm.config import TrainConfig

# AXBN paper §5.1 (Tables 1, 2): ImageNet ResNet-50, d 512, SupCon with PML's PairMarginMiner at its defaults 0.2 /
# 0.8, timm's augmentation with rand-m9-mstd0.5 and reprob 0.2, mixed precision, AdamW 1e-4 x0.33 every 15 epochs, 50
# epochs, 4 images per class at batch 64, a 2-epoch head-only warm-up, q = 1, p0 = 1, r = 0.01, Recall@1 and 10.
AXBN = {"model": "resnet50", "pretrained": True, "embedding_size": 512, "image_size": 224, "augment": "papers",
        "amp": "fp16", "eval_ks": "1,10", "epochs": 50, "warmup_epochs": 2, "batch_size": 64, "samples_per_class": 4,
        "sampler": "m_per_class", "optimizer": "adamw", "lr": 1e-4, "schedule": "step", "lr_step": 15,
        "lr_gamma": 0.33, "objective": "supervised", "loss.kind": "supcon", "loss.distance": "cosine",
        "miner.kind": "pair_margin", "miner.distance": "lp", "miner.pos_margin": 0.2, "miner.neg_margin": 0.8,
        "memory.enabled": True, "memory.batch_loss_weight": 0.0, "normaliser.kalman_q": 1.0,
        "normaliser.kalman_p0": 1.0, "normaliser.kalman_r": 0.01, "normaliser.kalman_ratio": -1.0}
# Thesis §5.2: the AXBN protocol as the thesis re-ran it (timm's train.py, --amp, gradients clipped to 10).
THESIS = {**{k: v for k, v in AXBN.items() if not k.startswith("normaliser.kalman")}, "clip_grad": 10.0,
          "memory.ratio": 0.5}
# XBM paper §4.1 and §3.3: ImageNet backbone, a 512-d layer, resize 256 / crop 224 with random crop and flip, Adam
# with weight decay 5e-4, PK batches of 64, cosine similarities, no separate miner, the memory after ~1k iterations.
XBM = {"pretrained": True, "embedding_size": 512, "image_size": 224, "augment": "metric", "warmup_epochs": 0,
       "sampler": "m_per_class", "optimizer": "adam", "weight_decay": 5e-4, "loss.distance": "cosine",
       "miner.kind": "none", "memory.start_epoch": 1, "memory.prefill": True, "memory.batch_loss_weight": 0.0,
       "normaliser.kind": "none",
       "eval_ks": "1,10,100,1000", "dataset": "sop"}

AXBN_TABLE1 = "AXBN paper (Ajanthan et al. 2023, seed 001), Table 1"
KINDS = {"normaliser.kind": ["none", "xbn", "axbn"]}
EXPECTED = {
    # AXBN paper Table 1: batch 64, memory 50% (SOP, In-Shop) or 100% (DeepFashion2); gain interval 100 or 10
    "axbn_table1_sop": ({**AXBN, "dataset": "sop", "memory.ratio": 0.5, "normaliser.kalman_interval": 100},
                        KINDS, AXBN_TABLE1),
    "axbn_table1_inshop": ({**AXBN, "dataset": "inshop", "memory.ratio": 0.5, "normaliser.kalman_interval": 100},
                           KINDS, AXBN_TABLE1),
    "axbn_table1_deepfashion2": ({**AXBN, "dataset": "deepfashion2", "memory.ratio": 1.0,
                                  "normaliser.kalman_interval": 10},
                                 KINDS, AXBN_TABLE1),
    # thesis Table 5.6: XBN delayed by tau epochs (15 in the table; 0 is plain XBN)
    "thesis_table5_6_delay": ({**THESIS, "dataset": "sop", "normaliser.kind": "xbn"},
                              {"normaliser.delay_epochs": [0, 5, 10, 15, 20, 30]}, "thesis (seed 000), Table 5.6"),
    # thesis Table 5.14: PC-XBN's lambda_mu row and lambda_sigma row on CIFAR-100, defaults 0.5 and 1 included
    "thesis_table5_14": ({**THESIS, "dataset": "cifar100", "normaliser.kind": "pcxbn"},
                         {"normaliser.lambda_mu": [0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0],
                          "normaliser.lambda_sigma": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]}, "thesis (seed 000), Table 5.14"),
    # thesis Table 5.15 and Table 9.1: PC-XBN (lambda_mu 0.5, lambda_sigma 1), margins 0.2 / 0.8 against 0.1 / 2.0
    "thesis_table5_15_margins": ({**{k: v for k, v in THESIS.items() if not k.startswith("miner.")},
                                  "miner.kind": "pair_margin", "miner.distance": "lp", "dataset": "cifar100",
                                  "normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.5,
                                  "normaliser.lambda_sigma": 1.0},
                                 {"miner.pos_margin": [0.1, 0.2], "miner.neg_margin": [0.8, 2.0]},
                                 "thesis (seed 000), Table 5.15"),
    # XBM paper Table 1: contrastive, triplet, MS without and with the memory (batch 64, memory ratio 1)
    "xbm_table1": ({**XBM, "batch_size": 64, "samples_per_class": 4, "memory.ratio": 1.0},
                   {"loss.kind": ["contrastive", "triplet", "multi_similarity"], "memory.enabled": [False, True]},
                   "XBM paper (Wang et al. 2020, seed 002), Table 1"),
    # XBM paper Table 2: the contrastive loss at batch 64 / 256 with 1% / 100% of the training set in memory
    "xbm_table2": ({**XBM, "loss.kind": "contrastive", "memory.enabled": True, "samples_per_class": 4},
                   {"batch_size": [64, 256], "memory.ratio": [0.01, 1.0]},
                   "XBM paper (Wang et al. 2020, seed 002), Table 2"),
}


def resolved(space) -> dict:
    """The config every trial of the space starts from: its fixed values over TrainConfig's defaults."""
    return TrainConfig.from_dict(space.base).to_dict()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_table_space_runs_its_papers_protocol_key_by_key(name):
    """Bug caught: a table space drifting from the protocol its paper states (a margin, the lr drop, the memory
    ratio, the Kalman interval, the augmentation, the backbone width ...), or sweeping other rows than the table's."""
    expected, grid, _ = EXPECTED[name]
    space = load_space(name)
    config = resolved(space)
    assert {key: config[key] for key in expected} == expected
    assert {key: param.branches[0].dist.values() for key, param in space.params.items()} == grid
    assert space.base["val_fraction"] == 0.2   # selection on held-out training classes (docs/spaces.md)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_header_cites_the_table_and_lists_every_number_of_it(name):
    """Bug caught: a header citing another table, or a paper number missing from it or misprinted (each cell of
    analysis/references.py must appear in the space's header, as the paper prints it)."""
    space = load_space(name)
    header = "\n".join(header_comments(space.text))
    assert header.startswith(f"Source: {EXPECTED[name][2]}")
    for cell in TABLES[name]:
        printed = re.compile(r"(?<![\d.])" + re.escape(repr(cell.value)) + r"0*(?![\d])")
        assert printed.search(header), (cell.row, cell.dataset, cell.metric, cell.value)
    assert "val_fraction 0.2" in header and "Not stated" in header


def test_show_space_prints_the_citation_and_the_papers_numbers(capsys):
    """Bug caught: YAML drops comments, so ``show-space`` printed a table space without the table it reproduces."""
    assert main(["show-space", "axbn_table1_deepfashion2"]) == 0
    out = capsys.readouterr().out
    assert "Source: AXBN paper (Ajanthan et al. 2023, seed 001), Table 1, DeepFashion2 columns" in out
    assert "No-XBM 36.45 / 61.44" in out and "33.45" in out
    assert main(["show-space", "quickstart"]) == 0
    assert "header" not in capsys.readouterr().out   # a file without opening comments prints none


def test_header_comments_stop_at_the_first_yaml_line():
    """Bug caught: a trailing comment of a YAML line (or a later comment block) printed as the file's header."""
    assert header_comments("# a\n#\n#  b\n\ndescription: x  # not header\n# nor this\n") == ["a", "", " b"]
