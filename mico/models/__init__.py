"""The model zoo: every model registered by name with its default input shape and dataset.

Importing this package imports every model module, which registers the models; build one with
``from_zoo("resnet8")`` (or ``create_model``), list them with ``model_names()`` / ``model_zoo()``.
"""

from __future__ import annotations

from mico.models.base import MiCoModel
from mico.models.cnn import CNN, SmallCNN
from mico.models.kws import DSCNN, M5, KWSConv1d
from mico.models.lenet import LeNet
from mico.models.llama import LLaMa
from mico.models.mlp import HARMLP, MLP
from mico.models.mnist1d import MNIST1DCNN
from mico.models.mobilenet import MobileNetV2
from mico.models.resnet import CifarResNet, ResNet8, ResNet20
from mico.models.shufflenet import ShuffleNetV2
from mico.models.squeezenet import SqueezeNet
from mico.models.vgg import VGG
from mico.models.vit import ViT
from mico.models.wrap import TorchModel, from_torch
from mico.models.zoo import (
    ZooEntry,
    from_zoo,
    model_names,
    model_zoo,
    register_model,
    zoo_entry,
)

#: Kept for compatibility: the same as :func:`from_zoo`.
create_model = from_zoo

__all__ = [
    "CNN",
    "DSCNN",
    "HARMLP",
    "M5",
    "MLP",
    "MNIST1DCNN",
    "VGG",
    "CifarResNet",
    "KWSConv1d",
    "LLaMa",
    "LeNet",
    "MiCoModel",
    "MobileNetV2",
    "ResNet8",
    "ResNet20",
    "ShuffleNetV2",
    "SmallCNN",
    "SqueezeNet",
    "TorchModel",
    "ViT",
    "ZooEntry",
    "create_model",
    "from_torch",
    "from_zoo",
    "model_names",
    "model_zoo",
    "register_model",
    "zoo_entry",
]
