"""Checkpoints: round trips, recorded metadata, quantized checkpoints, refusals, atomic saves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

import mico
from mico.errors import CheckpointError, MicoError
from mico.models.base import MiCoModel
from mico.quant import TERNARY, QuantConfig, QuantPlan, bit_layers, calibrate, quantize_model
from mico.train import load_checkpoint, read_checkpoint, save_checkpoint


class TinyNet(MiCoModel):
    """Conv1d -> ReLU -> Linear over 6-step, 1-channel sequences."""

    default_input_shape = (1, 6)

    def __init__(self, width: int = 4, num_classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, width, 3, padding=1)
        self.fc = nn.Linear(width * 6, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class OtherNet(TinyNet):
    pass


def _tiny(seed: int = 0, **kwargs: int) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(**kwargs).eval()


def _x(n: int = 5) -> torch.Tensor:
    return torch.randn(n, 1, 6, generator=torch.Generator().manual_seed(42))


def _out(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(_x())


# --------------------------------------------------------------------------- round trips


def test_float_round_trip_and_metadata(tmp_path: Path) -> None:
    model = _tiny(width=5)
    path = save_checkpoint(model, tmp_path / "sub" / "tiny.pt", epoch=3, note="hello")
    assert path == tmp_path / "sub" / "tiny.pt"
    assert path.is_file()
    ckpt = read_checkpoint(path)
    assert ckpt.model_class == "TinyNet"
    assert ckpt.args == []
    assert ckpt.kwargs == {"width": 5}
    assert ckpt.mico_version == mico.__version__
    assert ckpt.plan is None and ckpt.quant_config is None
    assert ckpt.extra == {"epoch": 3, "note": "hello"}
    loaded = load_checkpoint(path, _tiny(seed=1, width=5))
    assert isinstance(loaded, TinyNet)
    assert torch.equal(_out(loaded), _out(model))


def test_model_save_and_load_methods(tmp_path: Path) -> None:
    model = _tiny()
    model.save(tmp_path / "m.pt")
    other = _tiny(seed=9)
    assert other.load(tmp_path / "m.pt") is other
    assert torch.equal(_out(other), _out(model))


def test_positional_arguments_are_recorded(tmp_path: Path) -> None:
    model = TinyNet(3, 2)
    ckpt = read_checkpoint(save_checkpoint(model, tmp_path / "p.pt"))
    assert ckpt.args == [3, 2]
    assert ckpt.kwargs == {}


@pytest.mark.parametrize(
    "config",
    [
        QuantConfig(weight_granularity="channel"),
        QuantConfig(act_mode="dynamic", weight_granularity="channel"),
        QuantConfig(learned_step=True),
    ],
    ids=["static", "dynamic", "lsq"],
)
def test_quantized_checkpoint_loads_into_a_float_model(tmp_path: Path, config: QuantConfig) -> None:
    model = _tiny()
    quantize_model(model, [[TERNARY, 4], [8, 3]], config)
    if config.act_mode == "static":
        calibrate(model, [_x(16)])
    expected = _out(model)
    path = save_checkpoint(model, tmp_path / "q.pt")
    ckpt = read_checkpoint(path)
    assert ckpt.plan == QuantPlan.parse("conv=1.58/8,fc=4/3")
    assert ckpt.quant_config == config
    fresh = _tiny(seed=3)
    assert bit_layers(fresh) == {}
    load_checkpoint(path, fresh)
    layers = bit_layers(fresh)
    assert list(layers) == ["conv", "fc"]
    assert (layers["conv"].w_bits, layers["conv"].a_bits) == (TERNARY, 8)
    assert (layers["fc"].w_bits, layers["fc"].a_bits) == (4, 3)
    assert all(layer.qconfig == config for layer in layers.values())
    assert all(layer.calibrated and layer.mode == "quant" for layer in layers.values())
    assert torch.equal(_out(fresh), expected)


def test_set_qscheme_checkpoint_round_trip(tmp_path: Path) -> None:
    model = _tiny()
    model.set_qscheme([[8, 2], [8, 8]])
    path = model.save(tmp_path / "qat.pt")
    fresh = _tiny(seed=4).load(path)
    assert torch.equal(_out(fresh), _out(model))
    assert read_checkpoint(path).quant_config == QuantConfig(act_mode="dynamic")


def test_plain_state_dict_file_still_loads(tmp_path: Path) -> None:
    model = _tiny()
    path = tmp_path / "plain.pt"
    torch.save(model.state_dict(), path)
    ckpt = read_checkpoint(path)
    assert ckpt.model_class == "unknown"
    loaded = load_checkpoint(path, _tiny(seed=5))
    assert torch.equal(_out(loaded), _out(model))
    # ... into any class (nothing recorded to check against)
    assert torch.equal(_out(load_checkpoint(path, OtherNet().eval())), _out(model))


def test_zoo_model_is_rebuilt_from_its_checkpoint(tmp_path: Path) -> None:
    from mico.models import from_zoo

    torch.manual_seed(0)
    model = from_zoo("small_cnn", channels=(2, 4)).eval()
    model.set_qscheme([[8, 4, 2], [8, 8, 8]])
    path = model.save(tmp_path / "zoo.pt")
    ckpt = read_checkpoint(path)
    assert ckpt.zoo_name == "small_cnn"
    rebuilt = load_checkpoint(path)
    assert type(rebuilt) is type(model)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(x), model(x))


# --------------------------------------------------------------------------- refusals


def test_checkpoint_of_another_class_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(), tmp_path / "tiny.pt")
    other = OtherNet().eval()
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, other)
    message = str(info.value)
    assert "TinyNet" in message and "OtherNet" in message
    assert all(torch.equal(other.state_dict()[k], v) for k, v in before.items())


def test_checkpoint_with_other_constructor_arguments_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(width=4), tmp_path / "w4.pt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, _tiny(width=6))
    message = str(info.value)
    assert "does not fit this TinyNet" in message
    assert "width" in message and "4" in message


def test_non_zoo_checkpoint_needs_a_model(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(), tmp_path / "tiny.pt")
    with pytest.raises(CheckpointError, match=r"TinyNet.*not a mico model"):
        load_checkpoint(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"'.*nope\.pt' does not exist"):
        read_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt", _tiny())


def test_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.pt"
    path.write_bytes(os.urandom(2048))
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert "corrupt.pt" in str(info.value)
    assert "corrupt or not a torch.save file" in str(info.value)
    assert isinstance(info.value, MicoError)


def test_truncated_checkpoint(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(), tmp_path / "t.pt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path, _tiny())


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(), tmp_path / "new.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 99
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert "format version 99" in message
    assert "upgrade mico" in message


@pytest.mark.parametrize("field", ["state_dict", "model"])
def test_checkpoint_missing_a_field_is_a_checkpoint_error(tmp_path: Path, field: str) -> None:
    path = save_checkpoint(_tiny(), tmp_path / "damaged.pt")
    payload = torch.load(path, weights_only=True)
    del payload[field]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=r"damaged\.pt"):
        read_checkpoint(path)


def test_other_torch_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointError, match="not a mico checkpoint"):
        read_checkpoint(path)


def test_invalid_plan_in_checkpoint(tmp_path: Path) -> None:
    model = _tiny()
    model.set_qscheme([[8, 8], [8, 8]])
    path = save_checkpoint(model, tmp_path / "bad.pt")
    payload = torch.load(path, weights_only=True)
    payload["plan"]["fc"]["w"] = "12"
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=r"invalid plan.*layer 'fc'"):
        read_checkpoint(path)


# --------------------------------------------------------------------------- atomic saves


def test_interrupted_save_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _tiny()
    path = save_checkpoint(first, tmp_path / "ckpt.pt")
    original = path.read_bytes()
    real_save = torch.save

    def broken_save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        real_save({"partial": torch.zeros(3)}, f)  # some bytes reach the temporary file
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(_tiny(seed=7), path)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no temporary files
    assert torch.equal(_out(load_checkpoint(path, _tiny(seed=8))), _out(first))


def test_interrupted_first_save_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_save(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(_tiny(), tmp_path / "ckpt.pt")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_the_checkpoint(tmp_path: Path) -> None:
    path = save_checkpoint(_tiny(seed=0), tmp_path / "c.pt")
    second = _tiny(seed=1)
    save_checkpoint(second, path)
    assert torch.equal(_out(load_checkpoint(path, _tiny(seed=2))), _out(second))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
