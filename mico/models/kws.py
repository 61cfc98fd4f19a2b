"""Keyword-spotting models for Speech Commands: ``DSCNN`` and ``KWSConv1d`` on MFCCs, ``M5`` on
raw audio."""

from __future__ import annotations

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, ConvBNReLU1d, global_avg_pool
from mico.models.zoo import register_model


class DepthwiseSeparable(nn.Sequential):
    """``dw3x3-BN-ReLU -> pw1x1-BN-ReLU``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__(
            ConvBNReLU(in_channels, in_channels, 3, stride, groups=in_channels),
            ConvBNReLU(in_channels, out_channels, 1),
        )


@register_model(
    "dscnn",
    input_shape=(1, 49, 10),
    dataset="speechcommands",
    description="DS-CNN (Hello Edge / MLPerf Tiny KWS): conv 10x4 + 4 DS blocks (~23k params)",
)
class DSCNN(MiCoModel):
    """DS-CNN for keyword spotting (Zhang et al., "Hello Edge", 2017; MLPerf Tiny KWS).

    Input: 49 frames x 10 MFCCs as ``(1, 49, 10)``. ``conv(10x4, stride 2, 64)-BN-ReLU``
    (output 25x5), four depthwise-separable blocks (``dw3x3-BN-ReLU -> pw1x1(64)-BN-ReLU``),
    global average pooling, dropout, linear to 12 classes. About 23k parameters,
    10 quantizable layers (9 Conv2d of which 4 depthwise, 1 Linear).
    """

    default_input_shape = (1, 49, 10)

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 12,
        channels: int = 64,
        n_blocks: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, 49, 10)
        self.conv1 = ConvBNReLU(in_channels, channels, (10, 4), stride=2, padding=(5, 1))
        self.blocks = nn.Sequential(
            *(DepthwiseSeparable(channels, channels) for _ in range(n_blocks))
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(global_avg_pool(self.blocks(self.conv1(x)))))


@register_model(
    "m5",
    input_shape=(1, 16000),
    dataset="speechcommands",
    description="M5 (Dai et al. 2017): 4 Conv1d on 1 s of 16 kHz raw audio (~25k params)",
)
class M5(MiCoModel):
    """M5 raw-waveform CNN (Dai et al., "Very deep CNNs for raw waveforms", 2017).

    Input ``(1, 16000)`` (one second at 16 kHz). ``conv1d(k80, stride 16, 32)-BN-ReLU-pool4``,
    then ``conv1d(k3)-BN-ReLU-pool4`` with 32, 64, 64 channels (time 996 -> 249 -> 61 -> 14 -> 3),
    global average pooling, linear. About 25k parameters, 5 quantizable layers
    (4 Conv1d, 1 Linear).
    """

    default_input_shape = (1, 16000)

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 12,
        channels: int = 32,
        samples: int = 16000,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, samples)
        c = channels
        self.features = nn.Sequential(
            ConvBNReLU1d(in_channels, c, 80, stride=16, padding=0),
            nn.MaxPool1d(4),
            ConvBNReLU1d(c, c, 3, padding=0),
            nn.MaxPool1d(4),
            ConvBNReLU1d(c, 2 * c, 3, padding=0),
            nn.MaxPool1d(4),
            ConvBNReLU1d(2 * c, 2 * c, 3, padding=0),
            nn.MaxPool1d(4),
        )
        self.fc = nn.Linear(2 * c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.features(x)))


@register_model(
    "kws_conv1d",
    input_shape=(10, 49),
    dataset="speechcommands",
    description="Conv1d KWS net: 10 MFCC channels over 49 frames, 3 conv layers (~11k params)",
)
class KWSConv1d(MiCoModel):
    """A small temporal CNN for keyword spotting: the 10 MFCC coefficients are the channels of
    a 49-frame sequence, input ``(10, 49)``.

    ``conv1d(k3, 32)-BN-ReLU -> conv1d(k3, s2, 32)-BN-ReLU -> conv1d(k3, s2, 64)-BN-ReLU``
    (49 -> 25 -> 13 frames), global average pooling, linear to 12 classes. About 11k
    parameters, 4 quantizable layers (3 Conv1d, 1 Linear).
    """

    default_input_shape = (10, 49)

    def __init__(
        self,
        in_channels: int = 10,
        num_classes: int = 12,
        channels: tuple[int, int, int] = (32, 32, 64),
        frames: int = 49,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, frames)
        c1, c2, c3 = channels
        self.features = nn.Sequential(
            ConvBNReLU1d(in_channels, c1, 3),
            ConvBNReLU1d(c1, c2, 3, stride=2),
            ConvBNReLU1d(c2, c3, 3, stride=2),
        )
        self.fc = nn.Linear(c3, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.features(x)))
