"""mico.numerics: NaN and Inf stop at the boundary, named (issue 12, part D)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.errors import DatasetError, InputError, ParameterError
from mico.numerics import check_finite_parameters, check_finite_samples


def test_finite_and_integer_samples_pass():
    check_finite_samples(np.zeros((3, 1, 8, 8), np.float32))
    check_finite_samples(torch.full((2, 4), 3e38))
    check_finite_samples(np.array([[1, 2]], dtype=np.int64))  # token ids: not floats
    check_finite_samples(torch.tensor([[np.finfo(np.float32).tiny / 2]]))  # a denormal
    check_finite_samples("not numbers")  # the model says what is wrong with that


@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "torch"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_the_first_bad_sample_and_element_are_named(as_tensor, value):
    x = np.zeros((4, 2, 3, 3), np.float32)
    x[2, 1, 0, 2] = value
    x[3, 0, 0, 0] = np.nan  # a later one is not the one reported
    with pytest.raises(InputError) as info:
        check_finite_samples(torch.from_numpy(x) if as_tensor else x)
    message = str(info.value)
    assert f"input sample 2 holds {value} at element 11 (index (1, 0, 2))" in message
    assert "nan_to_num" in message and "\n" not in message


def test_tuples_of_inputs_and_custom_wording():
    good, bad = torch.zeros(2, 3), torch.zeros(2, 5)
    bad[1, 4] = float("inf")
    with pytest.raises(InputError, match=r"^calibration sample 1 holds inf at element 4"):
        check_finite_samples((good, bad), "calibration sample")
    with pytest.raises(InputError, match=r"sample 0 holds nan at element 0"):
        check_finite_samples(np.float32("nan"))  # a scalar is one sample


def test_parameters_and_buffers_are_named():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    check_finite_parameters(model)
    with torch.no_grad():
        model[0].bias[1] = float("-inf")
        model[0].weight[0, 0, 1, 1] = float("nan")
    with pytest.raises(ParameterError) as info:
        check_finite_parameters(model)
    assert "parameter '0.weight' of Sequential holds 1 non-finite value(s)" in str(info.value)
    assert "index (0, 0, 1, 1)" in str(info.value)
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    model[1].running_var.fill_(float("inf"))
    with pytest.raises(ParameterError, match=r"'1.running_var' .* holds 2 non-finite"):
        check_finite_parameters(model)


def test_an_explicit_dataset_of_another_shape_is_an_error():
    from mico.deploy import DeployOptions, samples_for
    from mico.models import from_zoo

    model = from_zoo("small_cnn")
    with pytest.raises(DatasetError, match=r"'mnist1d' has samples of shape \(1, 40\), but"):
        samples_for(model, "small_cnn", DeployOptions(dataset="mnist1d", samples=2))
    digits = samples_for(model, "small_cnn", DeployOptions(dataset="digits", samples=3))
    assert digits.shape == (3, 1, 8, 8)


def test_a_missing_default_dataset_falls_back_to_random_inputs_and_says_so(monkeypatch):
    import mico.data
    from mico.deploy import DeployOptions, samples_for
    from mico.models import from_zoo

    def missing(name: str, **_: object) -> None:
        raise DatasetError(f"{name} is not on disk;\n  download it")

    monkeypatch.setattr(mico.data, "load_dataset", missing)
    logged: list[str] = []
    x = samples_for(from_zoo("small_cnn"), "small_cnn", DeployOptions(samples=2), logged.append)
    assert x.shape == (2, 1, 8, 8) and np.isfinite(x).all()
    assert logged == [
        "using 2 seeded random inputs of shape (1, 8, 8): its dataset is not available "
        "(digits is not on disk; download it)"
    ]
