"""One training run of the protocol (thesis seed 000 §5.2, AXBN paper seed 001 §5.1), no Ray:

    trainer = Trainer(TrainConfig.from_dict({"dataset": "toy", "model": "mlp", "epochs": 5}))
    for metrics in trainer.fit():          # one flat dict per main epoch, epoch = 1, 2, ...
        state = trainer.state_dict()       # everything needed to continue exactly

1. ``warmup_epochs`` of head-only training (backbone frozen, in eval mode) with SGD lr 1e-3 and the
   objective's in-batch loss (SupCon for ``supervised``; no miner, no memory);
2. ``epochs`` main epochs: AdamW + StepLR, AMP and clipping, the objective's pair loss (SupCon with the
   PairMarginMiner for ``supervised``; :mod:`xbm.objectives` for the label-free ones) in the batch
   before ``memory.start_epoch`` (0-based) and against the cross-batch memory (``XBMLoss``, with the
   configured normaliser) from then on; ``memory.enabled=False`` never uses the memory;
3. after each main epoch: retrieval metrics on the selection split (val when ``val_fraction > 0``, else
   test), test metrics as ``test_*`` when ``evaluate_test``, and the diagnostics (xbm.evaluate.epoch); the
   one-shot error of the validation episodes as ``val_oneshot_error`` and of the test split's as
   ``oneshot_error`` (:mod:`xbm.data.episodes`), with the held-out super-classes (``val_superclasses``);
   the pair counts of the epoch, among them ``loss_pos_pairs`` (0: the epoch collapsed, see ``collapsed``);
   and, on every row, the two references measured once before training (untrained model, raw inputs).

Resuming: ``Trainer(cfg).load_state_dict(state)`` then ``fit()`` continues after the saved epoch with the
same model, optimisers, scheduler, scaler, memory (buffers, pointer, fill), normaliser state, objective
state (MoCo's key encoder, the neighbours' candidate pools), sampler order and pass count (augmentation seeds), Python/NumPy/torch RNG states, drift probe and references, so
its metrics equal an uninterrupted run's on CPU, whatever the number of loader workers.
"""
from xbm.trainer.parts import TrainerParts
from xbm.trainer.run import RESUMABLE_CHANGES, STATE_VERSION, TIMING_KEYS, Trainer

__all__ = ["RESUMABLE_CHANGES", "STATE_VERSION", "TIMING_KEYS", "Trainer", "TrainerParts"]
