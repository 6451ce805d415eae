"""Embedding models: registry, L2-normalised output, pretrained weights offline and from a local file."""
import pytest
import timm
import torch

from xbm.config import TrainConfig
from xbm.errors import PretrainedWeightsError
from xbm.models import MODELS, create_embedding_model, model_kwargs

from .conftest import tiny_trainer

TINY_TIMM = "resnet10t"


def cfg(**values):
    return TrainConfig.from_dict({"embedding_size": 16, **values})


def build(input_shape, **values):
    """The model a run with these config values builds (the trainer's path: ``model_kwargs(cfg)``)."""
    return create_embedding_model(**model_kwargs(cfg(**values)), input_shape=input_shape)


def test_the_factory_takes_plain_arguments_without_a_config():
    """Bug caught: the model factory reaching into the whole TrainConfig, so a caller without one (an export, a
    notebook) has to invent a config; and the head's size not the one asked for."""
    model = create_embedding_model("mlp", (6,), embedding_size=8)
    assert model(torch.randn(3, 6)).shape == (3, 8)
    with pytest.raises(ValueError, match="pretrained must be false for model 'mlp'"):  # even with a local file
        create_embedding_model("mlp", (6,), embedding_size=8, pretrained=True, pretrained_path="weights.pth")


def test_mlp_embeds_vectors_and_flattened_images_on_the_unit_sphere():
    model = build(model="mlp", input_shape=(40,))
    z = model(torch.randn(5, 40))
    assert z.shape == (5, 16)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(5))
    flat = build(model="mlp", input_shape=(3, 8, 8))
    assert flat(torch.randn(2, 3, 8, 8)).shape == (2, 16)


def test_timm_backbone_has_no_classifier_and_a_linear_head():
    model = build(model=TINY_TIMM, image_size=32, input_shape=(3, 32, 32))
    assert model.backbone.num_classes == 0
    assert model.head.in_features == model.backbone.num_features
    z = model.eval()(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(z.norm(dim=1), torch.ones(2))


def test_unknown_model_and_wrong_input_kind_are_value_errors():
    with pytest.raises(ValueError, match=r"model must be one of \['mlp'\] or a timm model name"):
        build(model="resnet5000", input_shape=(3, 32, 32))
    with pytest.raises(ValueError, match="needs image inputs"):
        build(model=TINY_TIMM, input_shape=(40,))
    with pytest.raises(ValueError, match="pretrained must be false for model 'mlp'"):
        build(model="mlp", pretrained=True, input_shape=(40,))
    assert "mlp" in MODELS


def test_offline_pretrained_error_names_pretrained_path(monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("no network")

    import timm.models._builder as builder

    monkeypatch.setattr(builder, "load_state_dict_from_hf", offline)
    monkeypatch.setattr(builder, "load_state_dict_from_url", offline)
    monkeypatch.setattr(builder, "download_cached_file", offline)
    with pytest.raises(PretrainedWeightsError, match="pretrained_path") as info:
        build(model=TINY_TIMM, pretrained=True, input_shape=(3, 32, 32))
    assert "no network" in str(info.value)


@pytest.mark.parametrize("pretrained", [False, True])
def test_pretrained_path_loads_a_local_file(tmp_path, pretrained, monkeypatch):
    import timm.models._builder as builder

    monkeypatch.setattr(builder, "load_state_dict_from_hf", pytest.fail)  # a local file never downloads
    source = timm.create_model(TINY_TIMM, num_classes=7)  # with a classifier, as published checkpoints are
    path = tmp_path / "weights.pth"
    torch.save(source.state_dict(), path)
    model = build(model=TINY_TIMM, pretrained=pretrained, pretrained_path=str(path), input_shape=(3, 32, 32))
    loaded = model.backbone.state_dict()
    for name, value in source.state_dict().items():
        if not name.startswith("fc."):
            torch.testing.assert_close(loaded[name], value)


def test_pretrained_path_of_another_architecture_or_missing_file_fails(tmp_path):
    path = tmp_path / "mlp.pth"
    torch.save(build(model="mlp", input_shape=(40,)).backbone.state_dict(), path)
    with pytest.raises(ValueError, match="must hold this backbone's weights"):
        build(model=TINY_TIMM, pretrained_path=str(path), input_shape=(3, 32, 32))
    mlp = build(model="mlp", pretrained_path=str(path), input_shape=(40,))
    assert mlp.head.out_features == 16
    with pytest.raises(FileNotFoundError, match="pretrained_path"):
        build(model="mlp", pretrained_path=str(tmp_path / "absent.pth"), input_shape=(40,))


def test_compile_off_leaves_the_model_and_a_mode_keeps_its_state_dict_keys():
    """Bugs caught: ``compile=off`` compiling anyway; a compiled model whose state_dict keys gain torch's
    ``_orig_mod.`` prefix (``torch.compile(model)`` wraps it), so a checkpoint saved compiled would not load
    into an uncompiled trainer or the other way round."""
    from xbm.models import compile_model
    plain = create_embedding_model("mlp", (6,), embedding_size=8)
    assert compile_model(plain, "off") is plain and plain._compiled_call_impl is None
    compiled = create_embedding_model("mlp", (6,), embedding_size=8)
    assert compile_model(compiled, "max-autotune") is compiled and compiled._compiled_call_impl is not None
    assert list(compiled.state_dict()) == list(plain.state_dict())
    compiled.load_state_dict(plain.state_dict())   # loads either way


def test_compile_max_autotune_searches_kernels_without_cuda_graphs(monkeypatch):
    """Bug caught: ``compile=max-autotune`` passed on as torch's mode of that name, which also replays the
    model as CUDA graphs: every call returns the same output buffers, so an evaluation keeping each batch's
    embeddings reads overwritten ones (torch raises "accessing tensor output of CUDAGraphs that has been
    overwritten"). Only CUDA runs graphs, so the test reads the options the mode is compiled with."""
    import torch._inductor

    from xbm.models import compile_model
    modes = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: modes.append(kwargs["mode"]))
    model = create_embedding_model("mlp", (6,), embedding_size=8)
    compile_model(model, "max-autotune")
    compile_model(model, "default")
    options = torch._inductor.list_mode_options(modes[0])
    assert options.get("max_autotune") and not options.get("triton.cudagraphs")
    assert modes[1] == "default"


@pytest.mark.slow
def test_compile_default_trains_the_mlp_on_the_cpu_to_the_same_loss():
    """Bug caught (issue 18): ``compile=default`` changing what is computed, or unusable on the CPU (inductor
    needs a C++ compiler; ~30-40 s here, hence slow): one toy epoch's loss within 1e-4 of the uncompiled
    run's, and the checkpoint of one loads into the other."""
    off = tiny_trainer(compile="off")   # each built then trained: the sampler draws from the global RNG
    loss_off = next(off.fit())["loss"]
    compiled = tiny_trainer(compile="default")
    loss_compiled = next(compiled.fit())["loss"]
    assert compiled.model._compiled_call_impl is not None and off.model._compiled_call_impl is None
    assert abs(loss_compiled - loss_off) <= 1e-4 and loss_off > 0
    off.load_state_dict(compiled.state_dict())   # compile may differ on resume (RESUMABLE_CHANGES)
    assert off.epoch == 1
