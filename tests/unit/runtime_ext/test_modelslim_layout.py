"""The msModelSlim description we write and the checks a quantized checkpoint must pass
(pure logic: exact expectations, each error naming the layer)."""

from __future__ import annotations

import pytest

from runtime_ext.quant import modelslim as ms

GROUPS = (32, 64, 128, 256)
L = "model.layers.0.mlp.down_proj"


def good_shapes(scheme="w8a16", n=576, k=1536, group=128):
    cols = 1 if scheme == "w8a8_dynamic" else -(-k // group)
    return {
        f"{L}.weight": ([n, k], "I8"),
        f"{L}.weight_scale": ([n, cols], "F32"),
        f"{L}.weight_offset": ([n, cols], "F32"),
        "model.norm.weight": ([576], "BF16"),
    }


def test_describe_marks_every_tensor():
    desc = ms.describe(["model.norm.weight"], {L: "w4a16"}, 128)
    assert desc == {
        "model_quant_type": "W4A16",
        "group_size": 128,
        "model.norm.weight": "FLOAT",
        f"{L}.weight": "W4A16",
        f"{L}.weight_scale": "W4A16",
        f"{L}.weight_offset": "W4A16",
    }
    assert ms.describe([], {L: "w8a8_dynamic"}, 128)["group_size"] == 0  # per channel
    assert ms.layer_types(desc) == {L: "w4a16", "model.norm": "FLOAT"}


def test_a_consistent_checkpoint_passes():
    ms.check_tensors(ms.describe(["model.norm.weight"], {L: "w8a16"}, 128), good_shapes(), GROUPS)
    ms.check_tensors(ms.describe(["model.norm.weight"], {L: "w8a8_dynamic"}, 0), good_shapes("w8a8_dynamic"), GROUPS)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d, s: d.__setitem__(f"{L}.weight", "W2A16"), "has quantization type 'W2A16'"),
        (lambda d, s: s.pop(f"{L}.weight_scale"), "lacks model.layers.0.mlp.down_proj.weight_scale"),
        (lambda d, s: s.__setitem__(f"{L}.weight", ([576, 1536], "BF16")), "weight must be int8"),
        (lambda d, s: s.__setitem__(f"{L}.weight_offset", ([576, 3], "F32")), "weight_offset has shape"),
        (lambda d, s: d.__setitem__("group_size", 100), "group_size 100 is not supported"),
        (
            lambda d, s: d.__setitem__("model.layers.99.mlp.up_proj.weight", "W8A16"),
            "model.layers.99.mlp.up_proj is described but",
        ),
    ],
)
def test_bad_checkpoints_name_the_layer(mutate, message):
    desc, shapes = ms.describe(["model.norm.weight"], {L: "w8a16"}, 128), good_shapes()
    mutate(desc, shapes)
    with pytest.raises(ms.CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")):
        ms.check_tensors(desc, shapes, GROUPS)


def test_read_rejects_a_corrupt_description(tmp_path):
    assert ms.read(tmp_path) is None
    (tmp_path / ms.DESCRIPTION).write_text("{not json")
    with pytest.raises(ms.CheckpointError, match="not valid JSON"):
        ms.read(tmp_path)
