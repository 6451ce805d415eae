"""Augmentation presets and input statistics (xbm/data/augment.py)."""
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from xbm.data.augment import (PRESETS, InputNorm, Stats, dataset_stats, imagenet_stats, preset, statistics_kind)
from xbm.data.preprocess import Preprocessing
from xbm.data.style import DARK_STROKES, PHOTO, STROKES

STATS = Stats((0.25,), (0.5,))


def ops(transform):
    return list(transform.transforms)


def kinds(transform):
    return [type(t).__name__ for t in ops(transform)]


def test_auto_means_the_data_sets_preset_and_bogus_names_the_valid_ones():
    """Bug caught: augment=auto ignoring the data set (strokes flipped like photos), or a typo accepted."""
    assert preset("auto", DARK_STROKES).name == "shift" and preset("auto", PHOTO).name == "metric"
    assert preset("randaugment", STROKES).name == "randaugment"
    names = r"\['auto', 'none', 'shift', 'metric', 'randaugment', 'papers'\]"
    with pytest.raises(ValueError, match=f"augment must be one of {names}"):
        preset("bogus", PHOTO)


def test_shift_is_a_small_affine_without_flip_filled_with_background():
    """Bug caught: characters mirrored (a flip makes another character) or shifted-in border not 0."""
    train = PRESETS["shift"].train(32, STATS, 1)
    assert kinds(train) == ["Resize", "CenterCrop", "RandomAffine", "PILToTensor"]
    affine = ops(train)[2]
    assert affine.degrees == [-10.0, 10.0] and affine.translate == (0.08, 0.08) and affine.scale == (0.9, 1.1)
    assert affine.fill == 0
    assert not any("Flip" in k for k in kinds(train))


def test_metric_is_random_resized_crop_and_flip_with_the_reality_check_eval():
    """Bug caught: the DML standard's crop scale or its eval resize (s / 0.875 then centre crop) drifting."""
    train = PRESETS["metric"].train(224, None, 3)
    assert kinds(train) == ["RandomResizedCrop", "RandomHorizontalFlip", "PILToTensor"]
    assert ops(train)[0].scale == (0.16, 1.0) and ops(train)[0].size == (224, 224)
    evaluation = PRESETS["metric"].eval(224)
    assert kinds(evaluation) == ["Resize", "CenterCrop", "PILToTensor"]
    assert ops(evaluation)[0].size == 256 and ops(evaluation)[1].size == (224, 224)
    assert PRESETS["metric"].load_size(224) == 256 and PRESETS["shift"].load_size(32) == 32


def test_randaugment_is_timms_pipeline_with_erasing_on_the_normalised_batch():
    """Bug caught: the thesis's pipeline losing RandAugment or random erasing, or erasing raw pixels."""
    p = PRESETS["randaugment"]
    names = kinds(p.train(32, STATS, 1))
    assert "RandAugment" in names and "RandomHorizontalFlip" in names and names[-1] == "MaybePILToTensor"
    grey = Image.fromarray(np.zeros((40, 40), dtype=np.uint8), "L")
    for seed in range(30):  # geometric ops fill grey images with a one-channel mean (timm's default is RGB)
        torch.manual_seed(seed)
        assert p.train(32, STATS, 1)(grey).dtype == torch.uint8
    erasing = p.batch_train(STATS).after.erasing
    assert erasing.probability == 0.2 and erasing.mode == "pixel"
    torch.manual_seed(0)
    import random
    random.seed(0)
    batch = torch.full((64, 1, 8, 8), 255, dtype=torch.uint8)
    out = p.batch_train(STATS)(batch)
    erased = ~torch.isclose(out, torch.tensor(1.5)).flatten(1).all(1)  # (1 - 0.25) / 0.5 = 1.5 where not erased
    assert 0 < int(erased.sum()) < 64


def test_papers_is_timms_own_rand_m9_mstd05_with_random_erasing_02():
    """Bug caught: the papers' augmentation (AXBN paper §5.1, thesis §5.2: timm's rand-m9-mstd0.5, reprob 0.2) built
    with another magnitude, without its magnitude noise, with another erasing probability, or erasing raw pixels
    (timm erases after normalising, with N(0, 1) noise)."""
    from timm.data.auto_augment import RandAugment
    from timm.data.random_erasing import RandomErasing

    train = PRESETS["papers"].train(224, imagenet_stats(3), 3)
    (rand_augment,) = [t for t in ops(train) if isinstance(t, RandAugment)]
    assert rand_augment.num_layers == 2 and rand_augment.ops
    assert {(op.magnitude, op.magnitude_std) for op in rand_augment.ops} == {(9, 0.5)}
    (erasing,) = [t for t in ops(train) if isinstance(t, RandomErasing)]
    assert erasing.probability == 0.2 and erasing.mode == "pixel"
    names = kinds(train)
    assert names.index("RandAugment") < names.index("Normalize") < names.index("RandomErasing") == len(names) - 1
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 260, 3), dtype=np.uint8), "RGB")
    torch.manual_seed(0)
    out = train(image)
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    (normalize,) = [t for t in ops(train) if type(t).__name__ == "Normalize"]   # the run's statistics, not timm's
    assert torch.allclose(normalize.mean, torch.tensor(imagenet_stats(3).mean))
    batch = out[None]
    assert PRESETS["papers"].batch_train(imagenet_stats(3))(batch) is batch   # normalised once, per sample


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_presets_eval_transform_uses_the_same_statistics_as_its_training(name):
    """Bug caught: training inputs normalised one way and evaluation inputs another."""
    p = PRESETS[name]
    image = Image.fromarray(np.full((40, 40), 255, dtype=np.uint8), "L")  # all foreground
    evaluated = p.eval(32)(image)
    assert evaluated.dtype == torch.uint8 and bool((evaluated == 255).all())
    evaluation = Preprocessing("L", False, 32, 32, name, STATS.mean, STATS.std).batch_norm()  # the trainer's
    for batch in (evaluation, InputNorm(STATS) if name == "randaugment" else p.batch_train(STATS)):
        assert torch.allclose(batch(evaluated[None]), torch.full((1, 1, 32, 32), (1.0 - 0.25) / 0.5))
    torch.manual_seed(0)
    assert p.train(32, STATS, 1)(image).shape == evaluated.shape == (1, 32, 32)


def test_none_trains_on_exactly_the_eval_inputs():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 30), dtype=np.uint8), "L")
    p = PRESETS["none"]
    assert torch.equal(p.train(16, STATS, 1)(image), p.eval(16)(image))


def test_input_norm_is_x_over_255_minus_mean_over_std_per_channel():
    """Bug caught: statistics applied per pixel row instead of per channel, or to already-float inputs twice."""
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).repeat(2, 1, 2, 2)
    out = InputNorm(Stats((0.1, 0.2, 0.3), (0.5, 0.25, 2.0)))(x)
    expected = torch.tensor([(0 - 0.1) / 0.5, (0.2 - 0.2) / 0.25, (1.0 - 0.3) / 2.0]).view(1, 3, 1, 1)
    assert torch.allclose(out, expected.expand(2, 3, 2, 2), atol=1e-6)
    assert torch.allclose(InputNorm(None)(x)[0, :, 0, 0], torch.tensor([0.0, 0.2, 1.0]))
    floats = torch.rand(2, 3, 2, 2)
    assert InputNorm(Stats((0.1,) * 3, (0.5,) * 3))(floats) is floats


def test_statistics_kind_auto_is_imagenet_for_photos_and_pretrained_backbones():
    """Bug caught: Omniglot pushed through ImageNet statistics from scratch (the collapse of issue 8)."""
    assert statistics_kind("auto", DARK_STROKES, pretrained=False) == "dataset"
    assert statistics_kind("auto", DARK_STROKES, pretrained=True) == "imagenet"
    assert statistics_kind("auto", PHOTO, pretrained=False) == "imagenet"
    assert statistics_kind("none", PHOTO, pretrained=True) == "none"
    with pytest.raises(ValueError, match=r"normalize must be one of \['auto', 'imagenet', 'dataset', 'none'\]"):
        statistics_kind("bogus", PHOTO, False)


def test_imagenet_statistics_for_grey_are_the_channel_average():
    assert imagenet_stats(3).mean == (0.485, 0.456, 0.406)
    grey = imagenet_stats(1)
    assert grey.mean[0] == pytest.approx((0.485 + 0.456 + 0.406) / 3) and grey.std[0] == pytest.approx(0.226)


def test_dataset_statistics_match_a_hand_computation():
    """Bug caught: statistics over the wrong axis, of normalised inputs, or biased to a few images."""
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 256, (8, 8), dtype=np.uint8) for _ in range(5)]
    stats = dataset_stats(lambda j: Image.fromarray(arrays[j], "L"), 5, T.PILToTensor())
    pixels = np.stack(arrays).astype(np.float64) / 255.0
    assert stats.mean[0] == pytest.approx(pixels.mean()) and stats.std[0] == pytest.approx(pixels.std(ddof=1))


def test_the_config_s_augment_names_are_the_registry_s():
    """Bug caught: a preset added to (or renamed in) PRESETS but not to xbm.config.AUGMENT, the one list the
    config checks ``augment`` against (before Ray starts): the new name refused by the config, or an old one
    accepted there and refused by every trial."""
    from xbm.config import AUGMENT

    assert AUGMENT == ("auto", *PRESETS)
