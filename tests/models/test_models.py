import pytest
import torch

from mico.errors import MicoError, UnknownModelError
from mico.models import SmallCNN, create_model, model_names
from mico.quant import quantizable_layers
from mico.train import accuracy


def test_small_cnn_shapes_and_layers():
    model = SmallCNN(channels=(4, 8))
    assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    assert quantizable_layers(model) == ["conv1", "conv2", "fc"]
    big = SmallCNN(in_channels=3, num_classes=5, image_size=16)
    assert big(torch.zeros(2, 3, 16, 16)).shape == (2, 5)


def test_small_cnn_rejects_bad_image_size():
    with pytest.raises(ValueError, match="divisible by 4"):
        SmallCNN(image_size=10)


def test_zoo_lookup():
    assert "small_cnn" in model_names()
    assert isinstance(create_model("small_cnn", channels=(2, 2)), SmallCNN)
    with pytest.raises(
        UnknownModelError, match=r"unknown model 'resnet1000'; available: .*small_cnn"
    ) as info:
        create_model("resnet1000")
    assert isinstance(info.value, MicoError)


def test_training_learns_digits(trained_cnn, digits_split):
    _, test_loader = digits_split.loaders()
    assert accuracy(trained_cnn, test_loader) > 0.8
