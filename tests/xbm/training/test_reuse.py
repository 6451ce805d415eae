"""References and warm-up computed once per node and reused (xbm.training.reuse, issue 18): reused results
equal fresh ones bit for bit, the key separates what matters from what does not, corrupt entries and
concurrent runs are handled."""
import copy
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.xbm.conftest import assert_same
from xbm.config import TrainConfig
from xbm.data import build_dataset
from xbm.data.splits import assemble
from xbm.data.toy import make_toy
from xbm.trainer import TIMING_KEYS, Trainer
from xbm.evaluate import epoch as evaluation
from xbm.training.reuse import REFERENCES_IGNORES, WARMUP_FIELDS, WARMUP_IGNORES, Reuse, ignored, state_digest

# The tiny toy of tests/xbm/conftest.py (24 training classes x 8 samples, batches of 32: 6 steps an epoch).
TOY = {"dataset": "toy", "model": "mlp", "device": "cpu", "embedding_size": 16, "epochs": 2, "warmup_epochs": 2,
       "lr": 1e-3, "batch_size": 32, "samples_per_class": 4, "seed": 0}
TIMINGS = TIMING_KEYS  # the machine, not the run
# Runs sharing the warm-up: the swept normaliser and memory keys differ, nothing the warm-up reads does.
PRODUCER = {"normaliser.kind": "none", "memory.ratio": 0.5}
CONSUMER = {"normaliser.kind": "xbn", "memory.ratio": 0.3, "lr": 3e-3}


def toy_trainer(folder=None, **values) -> Trainer:
    cfg = TrainConfig.from_dict({**TOY, **values})
    splits = assemble(make_toy(num_classes=48, samples_per_class=8), cfg.val_fraction, cfg.image_size)
    return Trainer(cfg, splits=splits, reuse_dir=None if folder is None else str(folder))


def run(trainer: Trainer):
    """The run's metrics and its state right after its last epoch (the RNG state is global: read it now)."""
    history = list(trainer.fit())
    return history, copy.deepcopy(trainer.state_dict())


def assert_same_history(a, b):
    assert_same([{k: v for k, v in m.items() if k not in TIMINGS} for m in a],
                [{k: v for k, v in m.items() if k not in TIMINGS} for m in b], "history")


def test_reused_references_equal_fresh_ones_and_only_the_same_inputs_hit(tmp_path):
    """Bugs caught: reused references that differ from freshly measured ones (rounded, another split), a key
    that includes the swept normaliser or memory keys (no trial of a sweep would ever reuse), or one that
    misses the seed or the embedding size (another untrained model's references reused)."""
    fresh = evaluation.references  # the function the trainer measures them with
    first = toy_trainer(tmp_path)
    expected = fresh(first.model, first.splits.test, first.embed)
    next(first.fit())
    assert not first.reused_references and first.references == expected
    for values in ({"normaliser.kind": "pcxbn"}, {"memory.ratio": 0.1}, {"memory.enabled": False, "lr": 1e-2}):
        again = toy_trainer(tmp_path, **values)
        next(again.fit())
        assert again.reused_references, values
        assert again.references == expected  # exact: the stored floats
    for values in ({"seed": 1}, {"embedding_size": 8}, {"val_fraction": 0.25}):
        other = toy_trainer(tmp_path, **values)
        next(other.fit())
        assert not other.reused_references, values
        assert other.references == fresh(toy_trainer(**values).model, other._selection_split(), other.embed)


def test_references_of_another_model_are_not_reused(tmp_path):
    """Bug caught: a key without the model: a sweep over backbones would report one model's references for all."""
    values = {**TOY, "dataset": "digits", "image_size": 16, "batch_size": 20, "embedding_size": 8}
    splits = build_dataset(TrainConfig.from_dict({**values, "model": "test_resnet"}))
    reuse = Reuse(str(tmp_path))
    results = []
    for model in ("test_resnet", "test_efficientnet", "test_resnet"):
        trainer = Trainer(TrainConfig.from_dict({**values, "model": model}), splits=splits)
        results.append(reuse.references(trainer, lambda: evaluation.references(
            trainer.model, trainer.splits.test, trainer.embed)))
    assert [reused for _, reused in results] == [False, False, True]
    assert results[2][0] == results[0][0] and results[1][0] != results[0][0]


def test_references_that_draw_from_a_global_rng_are_not_stored(tmp_path):
    """Bug caught: storing references whose computation moved a global RNG: a run reusing them skips the draw
    and trains on other random numbers than a fresh run."""
    trainer = toy_trainer()
    reuse = Reuse(str(tmp_path))
    with pytest.warns(UserWarning, match="moved a global RNG"):
        _, reused = reuse.references(trainer, lambda: {"reference_raw_recall_at_1": float(torch.rand(()))})
    assert not reused and not list(tmp_path.glob("references-*.pt"))


@pytest.mark.parametrize("values", [{}, {"objective": "moco", "num_workers": "1"},
                                    {"objective": "neighbours", "neighbours.k": 3, "num_workers": "1"}],
                         ids=["supervised", "moco-persistent-workers", "neighbours-persistent-workers"])
def test_a_run_that_reuses_the_warmup_trains_bit_identically_to_one_that_ran_its_own(tmp_path, values):
    """Bugs caught: a restored warm-up missing part of what the warm-up changes (head weights, SGD momentum,
    the sampler's class order, the pass count, the objective's key encoder, an RNG stream), or one that leaves
    the RNG one draw off (a persistent-worker loader drawing its base seed at the first main epoch instead of
    the warm-up's first pass): the losses, the metrics and the final weights would differ from a fresh run's."""
    producer = toy_trainer(tmp_path, **values, **PRODUCER)
    run(producer)
    assert not producer.reused_warmup and len(list(tmp_path.glob("warmup-*.pt"))) == 1
    reused_history, reused_state = run(consumer := toy_trainer(tmp_path, **values, **CONSUMER))
    assert consumer.reused_warmup and consumer.reused_references
    fresh_history, fresh_state = run(toy_trainer(**values, **CONSUMER))
    assert_same_history(reused_history, fresh_history)
    assert_same(reused_state, fresh_state)


@pytest.mark.slow
def test_an_image_moco_run_with_loader_workers_reuses_the_warmup_bit_identically(tmp_path):
    """Bug caught: the restored RNG followed by one extra draw (the persistent workers' base seed, drawn at the
    first main epoch instead of the warm-up's first pass): MoCo's key shuffle then permutes other images
    across its BatchNorm splits, and the first epoch's loss differs (6.4266 vs 6.3779 here)."""
    values = {**TOY, "dataset": "digits", "model": "test_resnet", "image_size": 16, "batch_size": 20,
              "embedding_size": 8, "epochs": 1, "warmup_epochs": 1, "num_workers": "1", "objective": "moco"}
    splits = build_dataset(TrainConfig.from_dict(values))

    def trainer(folder, extra):
        return Trainer(TrainConfig.from_dict({**values, **extra}), splits=splits, reuse_dir=folder)

    run(trainer(str(tmp_path), PRODUCER))
    reused_history, reused_state = run(consumer := trainer(str(tmp_path), CONSUMER))
    assert consumer.reused_warmup
    fresh_history, fresh_state = run(trainer(None, CONSUMER))
    assert_same_history(reused_history, fresh_history)
    assert_same(reused_state, fresh_state)


@pytest.mark.parametrize("values", [{}, {"objective": "moco"}, {"objective": "neighbours", "batch_size": 32,
                                                                   "neighbours.k": 3}],
                         ids=["supervised", "moco", "neighbours"])
def test_the_warmup_changes_no_trainer_state_but_the_stored_fields(values):
    """Bug caught: the warm-up changing a part of the trainer's state that the cache does not store (a new
    field of state_dict): a run reusing the warm-up would start its first epoch from another state."""
    trainer = toy_trainer(**values)
    trainer.references = evaluation.references(trainer.model, trainer.splits.test, trainer.embed)
    before = copy.deepcopy(trainer.state_dict())
    trainer._warmup()
    after = trainer.state_dict()
    changed = {k for k in before if state_digest(before[k]) != state_digest(after[k])}
    assert changed <= set(WARMUP_FIELDS), changed - set(WARMUP_FIELDS)
    assert {"model", "warmup_optimizer", "passes", "rng", "warmup_done"} <= changed


def test_a_warmup_entry_holds_the_head_not_the_frozen_backbone(tmp_path):
    """Bug caught: entries holding the whole model: at ResNet50 scale 100 MB per distinct warm-up, in the
    node's temp folder, for weights the warm-up never changes (the backbone is frozen)."""
    trainer = toy_trainer(tmp_path)
    run(trainer)
    entry = torch.load(next(tmp_path.glob("warmup-*.pt")), weights_only=True)
    head = {k for k in trainer.model.state_dict() if k.startswith("head.")}
    assert head and set(entry["value"]["model"]) == head


def test_a_corrupt_entry_is_computed_again_with_a_warning_naming_it(tmp_path):
    """Bug caught: an unreadable entry (a killed writer, a full disk) failing every later trial, or being
    replaced silently: it is recomputed, the warning names it, and the rewritten entry serves the next run."""
    run(toy_trainer(tmp_path, **PRODUCER))
    entry = next(tmp_path.glob("warmup-*.pt"))
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    with pytest.warns(UserWarning, match=f"cannot read {entry}.*computing it again"):
        history, state = run(second := toy_trainer(tmp_path, **CONSUMER))
    assert not second.reused_warmup and second.reused_references
    assert_same(state, run(toy_trainer(**CONSUMER))[1])
    third = toy_trainer(tmp_path, **CONSUMER)
    run(third)
    assert third.reused_warmup


def test_an_unusable_folder_costs_the_reuse_not_the_run(tmp_path):
    """Bug caught: a reuse folder that cannot be created (a file in its place, a read-only disk) failing every
    trial of the sweep instead of computing as without one."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.warns(UserWarning, match=f"cannot use {blocked}"):
        history, state = run(trainer := toy_trainer(blocked, **CONSUMER))
    assert not trainer.reused_references and not trainer.reused_warmup
    fresh_history, fresh_state = run(toy_trainer(**CONSUMER))
    assert_same_history(history, fresh_history)
    assert_same(state, fresh_state)


def test_a_resumed_run_reads_and_writes_no_entry(tmp_path):
    """Bug caught: a resumed trainer redoing (or re-reading) the warm-up over the weights it was resumed with."""
    first = toy_trainer(epochs=2)
    next(first.fit())
    resumed = toy_trainer(tmp_path / "reuse", epochs=2)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    list(resumed.fit())
    assert not resumed.reused_references and not resumed.reused_warmup
    assert not (tmp_path / "reuse").exists()


def test_ignored_keys_name_real_config_keys():
    """Bug caught: a misspelt ignored key (e.g. ``normalizer.``) that ignores nothing, so that every trial of a
    sweep misses the cache; and the keys the warm-up reads counted as ignored."""
    keys = TrainConfig.keys()
    for name in REFERENCES_IGNORES + WARMUP_IGNORES:
        assert any(ignored(key, (name,)) for key in keys), name
    for read in ("seed", "model", "embedding_size", "warmup_epochs", "batch_size", "samples_per_class", "amp",
                 "clip_grad", "objective", "loss.temperature", "augment", "val_fraction", "device"):
        assert not ignored(read, WARMUP_IGNORES), read
    assert ignored("normaliser.lambda_mu", WARMUP_IGNORES) and not ignored("normaliser", WARMUP_IGNORES)


CHILD = textwrap.dedent("""
    import json, logging, pathlib, sys, time
    sys.path.insert(0, sys.argv[4])
    from test_reuse import toy_trainer, CONSUMER, PRODUCER
    from xbm.trainer import Trainer
    from xbm.training.reuse import state_digest
    folder, name, values = pathlib.Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    counts, contended = folder.parent / "counts", folder.parent / "contended"

    class Waiting(logging.Handler):  # the other run waits for this run's warm-up
        def emit(self, record):
            if "waiting for" in record.getMessage() and "warmup-" in record.getMessage():
                contended.touch()
    logging.getLogger("xbm.training.reuse").addHandler(Waiting())
    logging.getLogger("xbm.training.reuse").setLevel(logging.INFO)
    warmup = Trainer._warmup

    def counted(self):
        with open(counts, "a") as f:
            f.write(name + "\\n")
        if len(counts.read_text().split()) > 1:
            contended.touch()  # a second computation: the bug; let the first go on
        deadline = time.time() + 120  # hold the lock until the other run is seen waiting for it
        while not contended.exists() and time.time() < deadline:
            time.sleep(0.05)
        warmup(self)
    Trainer._warmup = counted
    trainer = toy_trainer(folder, **values)
    history = [m["loss"] for m in trainer.fit()]
    print(json.dumps({"reused": trainer.reused_warmup, "loss": history, "state": state_digest(trainer.state_dict())}))
""")


def test_two_runs_started_at_once_with_one_key_compute_the_warmup_once(tmp_path):
    """Bug caught: no lock around compute-and-store, so that runs starting together on a node each compute the
    warm-up (the cost the cache removes), or a waiting run that reads a half-written entry."""
    folder = tmp_path / "reuse"
    here = str(__import__("pathlib").Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(folder), name, json.dumps(values), here],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, values in (("a", PRODUCER), ("b", CONSUMER))]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len((tmp_path / "counts").read_text().split()) == 1
    assert sorted(r["reused"] for r in results) == [False, True]
    fresh_history, fresh_state = run(toy_trainer(**CONSUMER))
    consumer = results[1]
    assert consumer["loss"] == [m["loss"] for m in fresh_history] and consumer["state"] == state_digest(fresh_state)
