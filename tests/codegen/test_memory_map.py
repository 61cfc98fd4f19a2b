"""The memory-map picture is a real PNG and the offset table matches the plan."""

from __future__ import annotations

import struct

from mico.codegen.memory_map import memory_map_rows, plot_memory_map
from mico.codegen.planner import Buffer, plan_buffers

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _plan():
    return plan_buffers(
        [
            Buffer("conv1.out", 256, 0, 1),
            Buffer("conv2.out", 128, 1, 2),
            Buffer("conv2.scratch", 40, 1, 1),
            Buffer("fc.out", 40, 2, 3),
        ],
        align=8,
    )


def test_rows_are_the_plan_sorted_by_offset():
    plan = _plan()
    rows = memory_map_rows(plan)
    assert [r["name"] for r in rows] == ["conv1.out", "fc.out", "conv2.out", "conv2.scratch"]
    assert rows == [
        {"name": "conv1.out", "offset": 0, "size": 256, "start": 0, "end": 1, "overwrites": None},
        {"name": "fc.out", "offset": 0, "size": 40, "start": 2, "end": 3, "overwrites": None},
        {"name": "conv2.out", "offset": 256, "size": 128, "start": 1, "end": 2, "overwrites": None},
        {
            "name": "conv2.scratch",
            "offset": 384,
            "size": 40,
            "start": 1,
            "end": 1,
            "overwrites": None,
        },
    ]
    assert all(r["offset"] == plan.offsets[r["name"]] for r in rows)
    assert plan.size == 424 and plan.lower_bound == 424


def test_rows_name_the_buffer_an_in_place_op_overwrites():
    buffers = [Buffer("x", 64, 0, 1), Buffer("y", 64, 1, 2)]
    plan = plan_buffers(buffers, align=8, ties={"y": ("x", -8)})
    rows = {r["name"]: r for r in memory_map_rows(plan)}
    assert rows["y"]["overwrites"] == "x" and rows["x"]["overwrites"] is None
    assert rows["x"]["offset"] - rows["y"]["offset"] == 8


def test_png_is_written(tmp_path):
    plan = _plan()
    bits = {"conv1.out": 4, "conv2.out": 8, "fc.out": 1.58}
    out = plot_memory_map(plan, tmp_path / "sub" / "map.png", title="cnn W4A4", bits=bits)
    assert out == tmp_path / "sub" / "map.png"
    width, height = _png_size(out)
    assert (width, height) == (1000, 600)
    assert out.stat().st_size > 5000
    assert [p.name for p in out.parent.iterdir()] == ["map.png"]  # no temporary left behind


def test_empty_plan_is_drawn(tmp_path):
    plan = plan_buffers([])
    assert memory_map_rows(plan) == []
    out = plot_memory_map(plan, tmp_path / "empty.png")
    assert _png_size(out) == (1000, 600)


def test_decoded_image_is_not_blank(tmp_path):
    from matplotlib.image import imread

    image = imread(plot_memory_map(_plan(), tmp_path / "map.png"))
    assert image.shape[:2] == (600, 1000)
    assert image[..., :3].std() > 0.05  # rectangles and text, not a blank canvas
