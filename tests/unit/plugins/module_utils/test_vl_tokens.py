"""The image check's sizing: image tokens per frame from a Qwen-VL processor geometry. The check itself over a
scripted chat client is tests/unit/plugins/module_utils/test__verify_checks.py; the served path (a real vLLM 0.25.1
serving a tiny Qwen2.5-VL checkpoint, unpatched and patched) is tests/integration/verify/test_image_truncation.py."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens

QWEN25_VL = {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056}
QWEN3_VL = {"patch_size": 16, "merge_size": 2, "size": {"shortest_edge": 65536, "longest_edge": 16777216}}


@pytest.mark.parametrize("config, side, tokens", [
    (QWEN25_VL, 448, 256),  # 32 x 32 patches of 14 px, merged 2 x 2
    (QWEN3_VL, 448, 196),   # 28 x 28 patches of 16 px
    (None, 448, 196),       # the default is the pinned checkpoint's family
    (QWEN25_VL, 64, 4),     # 64 -> 56: 4 x 4 patches, one merged token per 2 x 2
    (QWEN3_VL, 64, 64),     # below min_pixels: scaled up to 256 x 256
    ({"patch_size": 14, "merge_size": 2, "max_pixels": 200704}, 2000, 256),  # capped at max_pixels (448 x 448)
])
def test_image_tokens_follow_the_processor_geometry(config, side, tokens):
    assert vl_tokens.image_tokens(side, side, vl_tokens.geometry(config)) == tokens


def test_a_resized_image_keeps_whole_merged_patches_within_the_bounds():
    geo = vl_tokens.geometry(QWEN25_VL)
    for height, width in ((480, 640), (1080, 1920), (37, 3000), (4000, 4000)):
        h, w = vl_tokens.resized(height, width, geo)
        assert h % 28 == 0 and w % 28 == 0
        assert geo["min_pixels"] <= h * w <= geo["max_pixels"]


def test_geometry_errors_name_the_field():
    with pytest.raises(vl_tokens.GeometryError, match="merge_size"):
        vl_tokens.geometry({"merge_size": "2"})
    with pytest.raises(vl_tokens.GeometryError, match="min_pixels 10 is above max_pixels 5"):
        vl_tokens.geometry({"min_pixels": 10, "max_pixels": 5})


def test_the_default_request_crosses_the_seeds_boundary_for_both_families():
    for config in (QWEN25_VL, QWEN3_VL):
        assert 12 * vl_tokens.image_tokens(448, 448, vl_tokens.geometry(config)) > vl_tokens.SEED_TRUNCATION
    assert vl_tokens.frames_below(2048, 448, vl_tokens.geometry(QWEN3_VL)) == 10  # 10 x 198 = 1,980
