"""CIFAR ResNets (He et al. 2016): ``ResNet8`` (MLPerf Tiny) and ``ResNet20``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool
from mico.models.zoo import register_model


class BasicBlock(nn.Module):
    """``conv3x3-BN-ReLU -> conv3x3-BN`` plus the shortcut, then ReLU.

    The shortcut is the identity, or ``conv1x1-BN`` (projection) when stride or width change.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = ConvBNReLU(in_channels, out_channels, 3, stride)
        self.conv2 = ConvBNReLU(out_channels, out_channels, 3, 1, activation=None)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv2(self.conv1(x)) + self.shortcut(x))


class CifarResNet(MiCoModel):
    """A stem ``conv3x3-BN-ReLU``, three stages of :class:`BasicBlock`, global pool, linear.

    Stage ``i`` has ``blocks[i]`` blocks of width ``width * 2**i``; stages 2 and 3 start with
    stride 2 and a 1x1 projection shortcut. Conv2d count: ``1 + 2 * sum(blocks) + 2``.
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        blocks: Sequence[int],
        in_channels: int = 3,
        num_classes: int = 10,
        width: int = 16,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, 32, 32)
        self.stem = ConvBNReLU(in_channels, width, 3)
        stages: list[nn.Module] = []
        c_in = width
        for i, n in enumerate(blocks):
            c_out = width * 2**i
            stage = [BasicBlock(c_in, c_out, 1 if i == 0 else 2)]
            stage += [BasicBlock(c_out, c_out) for _ in range(n - 1)]
            stages.append(nn.Sequential(*stage))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.stages(self.stem(x))))


@register_model(
    "resnet8",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="ResNet-8 (MLPerf Tiny): 3 stages x 1 block, widths 16/32/64 (~78k params)",
)
class ResNet8(CifarResNet):
    """ResNet-8 as in MLPerf Tiny image classification: stem + 3 stages of one basic block.

    Widths 16/32/64: about 78k parameters; 9 Conv2d (7 3x3 convs + 2 1x1 projection shortcuts)
    and 1 Linear, so 10 quantizable layers.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 16) -> None:
        super().__init__((1, 1, 1), in_channels, num_classes, width)


@register_model(
    "resnet20",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="ResNet-20: 3 stages x 3 blocks, widths 8/16/32 (~69k params; width=16: 0.27M)",
)
class ResNet20(CifarResNet):
    """ResNet-20 for CIFAR: stem + 3 stages of three basic blocks (19 3x3 convs + 2 projections).

    21 Conv2d and 1 Linear (22 quantizable layers). The default ``width=8`` (widths 8/16/32,
    about 69k parameters) fits a small MCU; ``width=16`` is the paper's 0.27M-parameter model.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 8) -> None:
        super().__init__((3, 3, 3), in_channels, num_classes, width)
