"""The training run on the CPU toy (tiny MLP): learning, every normaliser, exact resume, NaN handling,
and one epoch of an image data set with a tiny timm backbone."""
import io
import math
import threading

import pytest
import torch

from analysis.contract import PAPER_METRICS
from xbm.config import TrainConfig
from xbm.data import build_dataset
from xbm.errors import NonFiniteLossError
from xbm.evaluate import retrieval_metrics
from xbm.evaluate.signals import collapsed
from xbm.evaluate.step_drift import drift_names
from xbm.normalisers import NormaliserConfig
from xbm.trainer import TIMING_KEYS as TIMINGS, Trainer

from ..conftest import needs_cuda, same

BASE = {"dataset": "toy", "model": "mlp", "device": "cpu", "embedding_size": 32, "epochs": 2, "warmup_epochs": 1,
        "lr": 1e-3, "batch_size": 64, "samples_per_class": 4, "seed": 3}
METRICS = ("epoch", "loss", "lr", "epoch_time_s", "images_per_s", "recall_at_1", "recall_at_10", "map_at_r",
           "r_precision", "eval_split", "drift_mean", "drift_max", "staleness_mean", "inter_distance_mean",
           "intra_distance_mean", "superclass_neighbour_share", "memory_neg_pairs", "batch_neg_pairs", "memory_fill",
           "memory_pos_pairs", "batch_pos_pairs", "loss_pos_pairs", "embedding_spread",
           "reference_untrained_recall_at_1", "reference_raw_recall_at_1", "skipped_images", "train_s",
           "data_wait_s", "eval_s", "gpu_memory_peak_gib", "memory_bytes", "train_classes", "nmi",
           "valid_neg_memory", "valid_neg_batch", *(f"superclass_top_{k}" for k in range(1, 6)), *drift_names())


def config(**values):
    return TrainConfig.from_dict({**BASE, **values})


def train(**values):
    return list(Trainer(config(**values)).fit())


def test_toy_recall_rises_and_every_contract_metric_is_reported():
    history = train(epochs=4)
    assert [m["epoch"] for m in history] == [1, 2, 3, 4]
    for m in history:
        assert set(METRICS) <= set(m), set(METRICS) - set(m)
        assert m["eval_split"] == "test" and math.isfinite(m["loss"])
    assert math.isnan(history[0]["drift_mean"]) and history[1]["drift_mean"] > 0
    assert history[-1]["recall_at_1"] > history[0]["recall_at_1"] + 0.03, [m["recall_at_1"] for m in history]
    assert history[-1]["memory_fill"] == 1.0 and history[-1]["memory_neg_pairs"] > history[-1]["batch_neg_pairs"]
    assert history[0]["staleness_mean"] > 0
    # the papers' metrics (issue 32 item 4): 25 steps per epoch, so drift over 100 steps from epoch 4 on
    assert history[0]["drift_10_mean"] > 0 and history[2]["drift_100_mean"] is None
    assert history[-1]["drift_100_max"] >= history[-1]["drift_100_mean"] > 0 and history[-1]["drift_1000_mean"] is None
    last = history[-1]
    assert 0 < last["nmi"] <= 1 and 0 < last["superclass_top_1"] <= last["superclass_top_5"] <= 1
    assert last["valid_neg_memory"] > last["valid_neg_batch"] > 0
    assert set(PAPER_METRICS) <= set(last)   # the contract's names are the trainer's


_RUNS: dict = {}


def first_epoch(tiny, **values):
    """The first-epoch metrics and trainer of a tiny run (cached: baselines are shared by several cases)."""
    key = tuple(sorted(values.items()))
    if key not in _RUNS:
        trainer = tiny(**values)
        _RUNS[key] = (next(trainer.fit()), trainer)
    return _RUNS[key]


@pytest.mark.parametrize("normaliser, baseline", [
    ({"normaliser.kind": "xbn"}, {"normaliser.kind": "none"}),
    ({"normaliser.kind": "axbn", "normaliser.kalman_r": 0.1}, {"normaliser.kind": "none"}),
    ({"normaliser.kind": "ema", "normaliser.ema_momentum": 0.5}, {"normaliser.kind": "none"}),
    ({"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.2}, {"normaliser.kind": "none"}),
    ({"normaliser.kind": "scxbn", "normaliser.absent": "skip"}, {"normaliser.kind": "none"}),
    ({"normaliser.kind": "xbn", "normaliser.centre_only": True}, {"normaliser.kind": "xbn"}),
    ({"normaliser.kind": "pcxbn", "normaliser.unit_norm": True}, {"normaliser.kind": "pcxbn"}),
    ({"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.2}, {"normaliser.kind": "pcxbn"}),
], ids=lambda d: "-".join(str(v) for v in d.values()))
def test_every_normaliser_kind_trains_end_to_end_and_changes_the_run(tiny, normaliser, baseline):
    """Bug caught: the trainer building another normaliser than configured (e.g. always kind "none", or
    from kind and delay only): the built normaliser must be the kind's class with exactly the configured
    options, it must adapt the memory during the epoch, and the run must differ from its baseline."""
    m, trainer = first_epoch(tiny, **normaliser)
    built = trainer.xbm.normaliser
    options = {k.split(".", 1)[1]: v for k, v in normaliser.items()}
    assert built.kind == options["kind"] and built.cfg == NormaliserConfig(**options)
    assert trainer.xbm.last_stats["adapted"] == 1.0
    assert math.isfinite(m["loss"]) and 0.0 <= m["recall_at_1"] <= 1.0 and m["memory_fill"] > 0
    assert m["loss"] != first_epoch(tiny, **baseline)[0]["loss"]


def test_normaliser_delay_is_plain_xbm_until_its_epoch():
    plain = train(**{"normaliser.kind": "none"})
    delayed = train(**{"normaliser.kind": "xbn", "normaliser.delay_epochs": 1})
    assert delayed[0]["loss"] == plain[0]["loss"] and delayed[0]["recall_at_1"] == plain[0]["recall_at_1"]
    assert delayed[1]["loss"] != plain[1]["loss"]


def test_memory_start_epoch_and_disabled_memory():
    late = train(**{"memory.start_epoch": 1})
    assert late[0]["memory_fill"] == 0 and late[0]["memory_neg_pairs"] == 0 and late[1]["memory_fill"] > 0
    none = train(**{"memory.enabled": False}, epochs=1)
    assert none[0]["memory_fill"] == 0 and math.isnan(none[0]["staleness_mean"])
    # The same run without memory in its first epoch: identical trajectory until the memory starts.
    assert none[0]["loss"] == late[0]["loss"]


def test_scxbn_needs_super_classes():
    splits = build_dataset(config())
    splits.superclass_of = None
    with pytest.raises(ValueError, match="scxbn needs a data set with super-classes"):
        Trainer(config(**{"normaliser.kind": "scxbn"}), splits=splits)


def test_resume_after_epoch_k_repeats_the_uninterrupted_run_exactly():
    values = {"epochs": 4, "normaliser.kind": "axbn", "memory.start_epoch": 1, "lr_step": 2, "val_fraction": 0.2,
              "evaluate_test": True}
    full = train(**values)
    first = Trainer(config(**values))
    fit = first.fit()
    resumed = [next(fit), next(fit)]
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = Trainer(config(**values))
    second.load_state_dict(torch.load(buffer, weights_only=True))
    resumed += list(second.fit())
    assert [m["epoch"] for m in resumed] == [1, 2, 3, 4]
    assert "test_recall_at_1" in full[-1] and full[-1]["eval_split"] == "val"
    for a, b in zip(full, resumed):
        assert set(a) == set(b)
        diffs = {k: (a[k], b[k]) for k in a if k not in TIMINGS and not same(a[k], b[k])}
        assert not diffs, f"epoch {a['epoch']}: {diffs}"


def test_resume_refuses_another_config():
    state = Trainer(config()).state_dict()
    with pytest.raises(ValueError, match="lr \\(saved 0.001, now 0.01\\)"):
        Trainer(config(lr=1e-2)).load_state_dict(state)
    longer = Trainer(config(epochs=5))
    longer.load_state_dict(state)  # more epochs is a valid continuation
    assert longer.epoch == 0


def test_a_checkpoint_without_loss_scaling_resumes_where_fp16_scales_the_loss():
    """Bug caught: ``device`` may change on resume, and ``amp=auto`` then picks fp16 (a pre-Ampere GPU) where
    the checkpoint's run had no scaler (CPU or bf16): loading its empty scaler state into the enabled
    GradScaler raised "the source state dict is empty". The resumed run starts with a fresh scaler."""
    state = Trainer(config()).state_dict()
    assert state["scaler"] == {}
    resumed = Trainer(config())
    resumed.scaler = torch.amp.GradScaler("cpu", enabled=True)  # what an fp16 runtime builds
    resumed.load_state_dict(state)
    assert resumed.scaler.is_enabled() and resumed.scaler.get_scale() == torch.amp.GradScaler("cpu").get_scale()


def test_an_image_run_whose_workers_cannot_fit_shared_memory_is_refused_before_any_work(monkeypatch, tiny):
    """Bug caught: the shared-memory check not wired into the trainer (or counting vector data, which has no
    workers), so a container with 64 MB of /dev/shm crashed in the first batches instead."""
    import xbm.training.loaders as loaders

    monkeypatch.setattr(loaders.os, "statvfs", lambda folder: type("S", (), {"f_blocks": 1, "f_frsize": 4096}))
    with pytest.raises(loaders.SharedMemoryError, match="2 workers x 4 batches x 20 images"):
        tiny(dataset="digits", model="test_resnet", image_size=16, batch_size=20, num_workers=2)
    assert tiny(dataset="digits", model="test_resnet", image_size=16, batch_size=20, num_workers=0).workers == 0
    monkeypatch.setattr(loaders, "EVAL_WORKERS_FROM", 10)   # digits' splits now get evaluation workers
    with pytest.raises(loaders.SharedMemoryError, match="2 workers x 2 batches x 256 images"):
        tiny(dataset="digits", model="test_resnet", image_size=16, batch_size=20, num_workers=2)


class PoisonAt(torch.nn.Module):
    """Wraps a criterion; its loss becomes NaN at the n-th call."""

    def __init__(self, inner, n):
        super().__init__()
        self.inner, self.n, self.calls = inner, n, 0

    @property
    def last_stats(self):
        return self.inner.last_stats

    def forward(self, *args, **kwargs):
        self.calls += 1
        loss = self.inner(*args, **kwargs)
        return loss * float("nan") if self.calls == self.n else loss


def test_non_finite_loss_names_epoch_and_iteration_before_any_step_uses_it():
    trainer = Trainer(config(warmup_epochs=0))
    trainer.xbm = PoisonAt(trainer.xbm, 3)
    with pytest.raises(NonFiniteLossError) as info:
        next(trainer.fit())
    assert (info.value.epoch, info.value.iteration) == (1, 3) and math.isnan(info.value.value)
    assert "epoch 1, iteration 3" in str(info.value)
    steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
    assert steps == {2}  # the NaN step never reached the optimiser
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert trainer.epoch == 0  # nothing to checkpoint from the failed epoch


def test_a_fused_adamw_skips_the_nan_step_on_the_device_and_the_error_names_it():
    """Bugs caught (issue 18): with the fused AdamW of CUDA runs (it exists on the CPU too) the NaN step's
    update applied (``found_inf`` not handed over), its step count or moments advanced, or the error,
    noticed one step late, naming the step after the bad one."""
    trainer = Trainer(config(warmup_epochs=0))
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-3, weight_decay=1e-4, fused=True)
    trainer.xbm = PoisonAt(trainer.xbm, 3)
    with pytest.raises(NonFiniteLossError) as info:
        next(trainer.fit())
    assert (info.value.epoch, info.value.iteration) == (1, 3) and math.isnan(info.value.value)
    assert {int(s["step"]) for s in trainer.optimizer.state.values()} == {2}
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert all(torch.isfinite(s["exp_avg"]).all() for s in trainer.optimizer.state.values())
    assert trainer.xbm.calls == 4  # the next step's forward ran, its update did not


@pytest.mark.slow
def test_image_data_set_trains_an_epoch_with_a_tiny_timm_backbone():
    history = train(dataset="digits", model="test_resnet", image_size=32, epochs=1, warmup_epochs=1,
                    batch_size=20, samples_per_class=4, embedding_size=32)  # digits trains on 5 classes
    m = history[0]
    assert math.isfinite(m["loss"]) and m["recall_at_1"] > 0.5 and m["images_per_s"] > 0


def test_a_collapsing_run_counts_no_positive_pair_and_says_so():
    """Bug caught: the silent collapse of issue 8. A pos_margin beyond the sphere's diameter (2) leaves the
    miner no positive pair: SupCon is exactly 0, and every epoch must report it as collapsed."""
    history = train(**{"miner.pos_margin": 2.5, "memory.enabled": False}, epochs=2, warmup_epochs=0)
    for m in history:
        assert m["batch_pos_pairs"] == 0 and m["loss_pos_pairs"] == 0 and m["loss"] == 0.0 and collapsed(m)
    healthy = train(epochs=1, warmup_epochs=0)[0]
    assert healthy["memory_pos_pairs"] > healthy["batch_pos_pairs"] > 0 and not collapsed(healthy)
    assert healthy["loss_pos_pairs"] == healthy["memory_pos_pairs"]  # batch_loss_weight 0: memory pairs only


def test_references_are_the_untrained_model_and_raw_inputs_measured_once_before_training():
    """Bug caught: references measured after training (then they equal the trained model), on another split,
    or recomputed (and so drifting) every epoch."""
    cfg = config(epochs=2)
    trainer = Trainer(cfg)
    query = trainer.splits.test.query
    raw = torch.stack([query[i][0] for i in range(len(query))])
    expected_raw = retrieval_metrics(raw, query.labels, ks=(1,))["recall_at_1"]
    expected_untrained = retrieval_metrics(trainer.embed(trainer.model, query)[0], query.labels, ks=(1,))["recall_at_1"]
    history = list(trainer.fit())
    for m in history:
        assert m["reference_raw_recall_at_1"] == pytest.approx(expected_raw)
        assert m["reference_untrained_recall_at_1"] == pytest.approx(expected_untrained)
    assert history[-1]["recall_at_1"] > expected_untrained + 0.05
    assert 0.0 < history[-1]["embedding_spread"] <= 2.0
    assert history[-1]["inter_distance_mean"] > history[-1]["intra_distance_mean"]


def test_num_workers_auto_is_the_runs_cpus_minus_one_for_images_and_zero_for_vectors():
    """Bug caught: auto starting workers for the CPU toy (pure overhead) or leaving a GPU trial unfed."""
    assert Trainer(config(num_workers="auto"), cpus=4).workers == 0  # toy: vectors
    splits = build_dataset(config(dataset="digits", model="test_resnet", image_size=16, batch_size=20))
    assert Trainer(config(dataset="digits", model="test_resnet", image_size=16, batch_size=20), splits=splits,
                   cpus=4).workers == 3
    assert Trainer(config(dataset="digits", model="test_resnet", image_size=16, batch_size=20, num_workers="0"),
                   splits=splits, cpus=4).workers == 0


@pytest.mark.slow
def test_augmentations_do_not_depend_on_the_number_of_workers():
    """Bug caught: augmentations drawn from each worker's own RNG, so that num_workers (and so num_workers=auto
    on another machine, or a resume) changes the numbers."""
    values = dict(dataset="digits", model="test_resnet", image_size=16, batch_size=20, epochs=2, warmup_epochs=0,
                  embedding_size=16)
    splits = build_dataset(config(**values))
    runs = [list(Trainer(config(**values, num_workers=w), splits=splits).fit()) for w in ("0", "1")]
    for a, b in zip(*runs):
        assert a["loss"] == b["loss"] and a["recall_at_1"] == b["recall_at_1"]


def test_warmup_trains_the_head_alone_with_the_backbone_frozen_in_eval_mode(tiny):
    """Bug caught: a warm-up that does nothing (learning rate 0), that moves the backbone, that leaves it in
    training mode (BatchNorm statistics would move) or that leaves it frozen for the main epochs."""
    def weights():
        return ({k: v.clone() for k, v in trainer.model.backbone.state_dict().items()},
                {k: v.clone() for k, v in trainer.model.head.state_dict().items()})

    phases, snapshots, modes = ["init"], {}, []

    def progress(batches, desc):  # called as each epoch starts: remember the phase and the weights
        phases.append(desc)
        snapshots[desc] = weights()
        return batches

    trainer = tiny(warmup_epochs=2, progress=progress)
    # the drift probe's eval-mode passes between steps (xbm.evaluate.step_drift) are not steps: left out here
    trainer.step_drift.begin_epoch, trainer.step_drift.after_step = (lambda length: None), (lambda: None)
    trainer.model.backbone.register_forward_pre_hook(lambda module, args: modes.append((phases[-1], module.training)))
    backbone0, head0 = weights()
    next(trainer.fit())
    backbone1, head1 = snapshots["epoch 1/1"]  # after the warm-up, before the main epoch
    assert all(torch.equal(backbone0[k], backbone1[k]) for k in backbone0)
    assert all(not torch.equal(head0[k], head1[k]) for k in head0)
    warm = [training for desc, training in modes if desc.startswith("warm-up")]
    main = [training for desc, training in modes if desc == "epoch 1/1"]
    assert len(warm) == 2 * len(trainer.loader) and not any(warm)
    assert main[:len(trainer.loader)] == [True] * len(trainer.loader)  # training mode for the main steps
    assert all(p.requires_grad for p in trainer.model.parameters())
    backbone2, _ = weights()
    assert not any(torch.equal(backbone1[k], backbone2[k]) for k in backbone1)  # the main epoch trains it


def test_warmup_step_is_sgd_at_1e_3_on_the_head(tiny):
    """Bug caught: the warm-up using the main optimiser or another learning rate: one warm-up step moves the
    head by exactly -1e-3 x its gradient (SGD, zero momentum buffer, hand computation)."""
    from xbm.training.epoch import Step, run_epoch

    trainer = tiny(warmup_epochs=1)
    batch = next(iter(trainer.loader))
    head0 = trainer.model.head.weight.detach().clone()
    x, y, idx = batch
    loss = trainer.warmup_loss(trainer.model(x), y, epoch=0, indices=idx)
    grad = torch.autograd.grad(loss, trainer.model.head.weight)[0]
    step = Step(trainer.model, trainer.objective, trainer.warmup_loss, trainer.warmup_optimizer, trainer.scaler,
                list(trainer.model.head.parameters()), clip_grad=0.0)
    run_epoch(step, [batch], trainer.runtime, epoch=0, epoch_index=0)
    assert torch.allclose(trainer.model.head.weight, head0 - 1e-3 * grad, atol=1e-7)


def test_evaluate_test_never_changes_training(tiny):
    """The documented claim: evaluating the test split as well (own DataLoader generator) leaves the
    training trajectory unchanged. Bug caught: evaluation drawing from the global RNG or leaving the model
    in eval mode, so that the sampler order, augmentations or weights of the next epoch would move."""
    from xbm.training.rng import rng_state

    def run(trainer):
        """Each epoch's metrics, and the global RNG streams after it (the toy set draws no augmentation, so
        a moved stream shows only here; image data sets would train differently)."""
        history, streams = [], []
        for metrics in trainer.fit():
            history.append(metrics)
            state = rng_state()
            streams.append((state["torch"], state["numpy"]["keys"], state["numpy"]["pos"], state["python"]))
        return history, streams

    values = {"epochs": 3, "val_fraction": 0.25, "normaliser.kind": "xbn"}
    plain_trainer = tiny(**values)
    plain, plain_streams = run(plain_trainer)
    tested_trainer = tiny(**values, evaluate_test=True)
    tested, tested_streams = run(tested_trainer)
    for a, b in zip(plain_streams, tested_streams):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2:] == b[2:]
    assert "test_recall_at_1" in tested[-1] and "test_recall_at_1" not in plain[-1]
    for a, b in zip(plain, tested):
        diffs = {k: (a[k], b[k]) for k in a if k not in TIMINGS and not same(a[k], b[k])}
        assert not diffs, f"epoch {a['epoch']}: {diffs}"
    for (name, p), q in zip(plain_trainer.model.state_dict().items(), tested_trainer.model.state_dict().values()):
        assert torch.equal(p, q), name



@needs_cuda
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
@pytest.mark.parametrize("values", [
    {"normaliser.kind": "xbn"},
    {"normaliser.kind": "axbn"},
    {"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.2},
    {"normaliser.kind": "scxbn"},
    {"objective": "moco", "normaliser.kind": "xbn"},
    {"objective": "instance"},
    {"objective": "neighbours", "neighbours.threshold": 0.3, "neighbours.pool": 10},
], ids=lambda d: "-".join(str(v) for v in d.values()))
def test_a_cuda_run_keeps_its_state_on_the_gpu_and_matches_the_cpu_run(tiny, values):
    """Bugs caught: a tensor of the step built on or left on the CPU (the memory, a normaliser's moments,
    MoCo's key encoder or queue, the neighbours' pools, labels or indices from the loader): a
    device-mismatch crash at the first GPU step, or state that silently stays on the CPU; and a
    CUDA-only path (one-chunk moments, pools searched by torch instead of faiss) computing other numbers
    than the CPU's. fp32 on both (amp=off), so the first epoch agrees up to summation order."""
    cpu = next(tiny(device="cpu", **values).fit())
    trainer = tiny(device="cuda", amp="off", **values)
    gpu = next(trainer.fit())
    tensors = {**trainer.model.state_dict(prefix="model."), **trainer.xbm.state_dict(prefix="xbm."),
               **{f"objective.{k}": v for k, v in trainer.objective.state_dict().items()}}
    assert {k: v.device.type for k, v in tensors.items() if v.device.type != "cuda"} == {}
    assert gpu["memory_fill"] == cpu["memory_fill"] > 0
    assert gpu["loss"] == pytest.approx(cpu["loss"], rel=1e-3)
    assert gpu["recall_at_1"] == pytest.approx(cpu["recall_at_1"], abs=0.02)


@needs_cuda
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_a_cuda_run_resumes_exactly_from_a_checkpoint_loaded_onto_the_cpu(tiny, tmp_path, monkeypatch):
    """Bugs caught: the CUDA generators not saved or not restored (a resumed GPU run draws other dropout /
    shuffles than the uninterrupted one), or a checkpoint that cannot be loaded with ``map_location="cpu"``
    (how the Ray trainable reads it) and restored into a GPU trainer, or resumed on a CPU-only laptop; and
    ``xbm-tune train``'s background checkpoint of a GPU trainer's whole state (copies queued into pinned
    buffers) taking in the next epoch, which trains before the file is written."""
    from xbm.training.checkpoint import CheckpointWriter, load_checkpoint

    trained, save = threading.Event(), torch.save
    monkeypatch.setattr(torch, "save", lambda *a, **k: (trained.wait(60), save(*a, **k)))

    values = {"device": "cuda", "amp": "off", "epochs": 3, "normaliser.kind": "axbn", "objective": "moco"}
    full = list(tiny(**values).fit())
    first = tiny(**values)
    fit = first.fit()
    resumed = [next(fit)]
    writer, path = CheckpointWriter(), tmp_path / "checkpoint.pt"
    writer.save(first.state_dict(), path)
    assert next(fit)["epoch"] == 2   # the next epoch, before the file is written
    trained.set()
    writer.wait()
    for device in ("cuda", "cpu"):
        second = tiny(**{**values, "device": device})
        second.load_state_dict(load_checkpoint(path))
        rest = list(second.fit())
        assert [m["epoch"] for m in rest] == [2, 3]
        if device == "cuda":
            for a, b in zip(full, resumed + rest):
                diffs = {k: (a[k], b[k]) for k in a if k not in TIMINGS and not same(a[k], b[k])}
                assert not diffs, f"epoch {a['epoch']}: {diffs}"
        else:
            assert second.xbm.memory.embeddings.device.type == "cpu"
            assert rest[-1]["loss"] == pytest.approx(full[-1]["loss"], rel=1e-2)


def test_scxbn_checks_the_training_labels_against_the_superclass_map_once_at_construction():
    """Bug caught (issue 18): the super-class range check dropped from the step without a replacement, so a
    data set whose super-class map misses its last training class fails deep in a step (an index error, or
    a device-side assert on CUDA) instead of naming the rule before training."""
    from xbm.data.splits import assemble
    from xbm.data.toy import make_toy
    cfg = TrainConfig.from_dict({"dataset": "toy", "model": "mlp", "device": "cpu", "embedding_size": 16,
                                 "epochs": 1, "warmup_epochs": 0, "batch_size": 32, "samples_per_class": 4,
                                 "normaliser.kind": "scxbn"})
    splits = assemble(make_toy(num_classes=48, samples_per_class=8), cfg.val_fraction, cfg.image_size)
    classes = int(splits.train.labels.max()) + 1
    Trainer(cfg, splits=splits)   # the full map: accepted
    splits.superclass_of = splits.superclass_of[: classes - 1]
    with pytest.raises(ValueError, match=rf"labels must lie in \[0, {classes - 1}\).*\[0, {classes - 1}\]"):
        Trainer(cfg, splits=splits)


def test_memory_bytes_is_the_memory_buffers_size_and_zero_without_a_memory():
    """Bug caught: memory_bytes (an objective of several-metric sweeps, issue 22) counting the embeddings
    alone, the filled part, or reported for a run that has no memory."""
    trainer = Trainer(config(epochs=1, warmup_epochs=0))
    rows = list(trainer.fit())
    slots = trainer.xbm.memory.size
    assert rows[0]["memory_bytes"] == slots * (32 * 4 + 3 * 8) + 2 * 8  # fp32 [M, 32]; 3 longs per slot; 2 scalars
    assert train(epochs=1, warmup_epochs=0, **{"memory.enabled": False})[0]["memory_bytes"] == 0


def test_kalman_gain_is_axbns_gain_in_the_rows_and_none_for_other_normalisers():
    """Bug caught: ``kalman_gain`` missing from the epoch rows, reported for a normaliser that has no gain
    (XBN's rows would read as K = 0 or 1), or not the gain the filter used (AXBN paper Algorithm 1)."""
    trainer = Trainer(config(epochs=2, warmup_epochs=0, **{"normaliser.kind": "axbn", "normaliser.kalman_ratio": 0.5}))
    rows = list(trainer.fit())
    assert all(isinstance(r["kalman_gain"], float) for r in rows)
    assert rows[-1]["kalman_gain"] == float(trainer.xbm.normaliser.gain) and 0.0 < rows[-1]["kalman_gain"] < 1.0
    for other in ({"normaliser.kind": "xbn"}, {"memory.enabled": False}):
        assert [r["kalman_gain"] for r in train(epochs=1, warmup_epochs=0, **other)] == [None]
