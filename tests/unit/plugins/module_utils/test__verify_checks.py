"""llm_verify's image check over a scripted chat client that counts image tokens with a processor geometry and
truncates like the seed's unpatched tokenizer: the request past the 2,048 boundary, its text-only twin, and the
control request below it. The geometry itself is tests/unit/plugins/module_utils/test_vl_tokens.py's; the served
path (a real vLLM 0.25.1 serving a tiny Qwen2.5-VL checkpoint, unpatched and patched) is
tests/integration/verify/test_image_truncation.py."""

from __future__ import annotations

import base64
import io
import re

import pytest
from PIL import Image

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Response
from ansible_collections.pairserve.llm.plugins.module_utils._verify_checks import check_images

QWEN25_VL = {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056}
QWEN3_VL = {"patch_size": 16, "merge_size": 2, "size": {"shortest_edge": 65536, "longest_edge": 16777216}}


class ScriptedVisionServer:
    """A chat client whose server counts each image's tokens with a processor geometry (plus the two wrapper
    tokens of Qwen's chat template), and answers 400 when a request's image tokens pass ``truncate``."""

    def __init__(self, geometry, truncate=None, text_tokens=40):
        self.geo = vl_tokens.geometry(geometry)
        self.truncate = truncate
        self.text_tokens = text_tokens
        self.requests = []

    def chat(self, payload, timeout=None):
        parts = payload["messages"][0]["content"]
        images = [p for p in parts if p.get("type") == "image_url"]
        tokens = 0
        for part in images:
            data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            with Image.open(io.BytesIO(data)) as img:
                tokens += vl_tokens.image_tokens(img.height, img.width, self.geo) + vl_tokens.WRAPPER_TOKENS
        self.requests.append({"images": len(images), "image_tokens": tokens})
        url = "http://replica/v1/chat/completions"
        if self.truncate is not None and tokens > self.truncate:
            body = {"error": {"message": "Failed to apply Qwen2_5_VLProcessor on data={'text': ...}",
                              "type": "BadRequestError", "code": 400}}
            return Response(url, 400, body, str(body), 0.1)
        body = {"choices": [{"message": {"content": "A yard at dusk."}}],
                "usage": {"prompt_tokens": self.text_tokens + tokens, "completion_tokens": 5}}
        return Response(url, 200, body, str(body), 0.1)


def test_a_patched_checkpoint_answers_and_the_server_counts_the_image_tokens_sent():
    server = ScriptedVisionServer(QWEN25_VL)
    result = check_images(server, "qwen", 12, 448, text_ok=True, geometry=QWEN25_VL)
    assert result["ok"], result
    assert result["image_tokens_per_frame"] == 256
    assert result["image_tokens_expected"] == result["image_tokens_server"] == 12 * (256 + 2)
    assert result["prompt_tokens"] == 40 + 12 * 258
    assert [r["images"] for r in server.requests] == [12, 0, 7], "the request, its text-only twin, the control"
    assert "past the 2048-token truncation" in result["message"] and "answered too" in result["message"]
    assert result["control"] == {"images": 7, "image_tokens_expected": 7 * 258, "status": 200, "ok": True}


@pytest.mark.parametrize("text_ok", [True, None], ids=["after-text-check", "image-check-alone"])
def test_an_unpatched_checkpoint_fails_as_the_truncation_and_the_control_request_shows_where(text_ok):
    server = ScriptedVisionServer(QWEN25_VL, truncate=2048)
    result = check_images(server, "qwen", 12, 448, text_ok=text_ok, geometry=QWEN25_VL)
    assert not result["ok"] and result["class"] == "tokenizer_truncation" and result["permanent"]
    assert "run tokenizer_patch" in result["message"]
    # The control request stays below the boundary, wrappers included: 7 frames of 256 + 2 tokens.
    assert result["control"] == {"images": 7, "image_tokens_expected": 7 * 258, "status": 200, "ok": True}
    assert "A control request with 7 fresh frames" in result["message"]
    assert [r["images"] for r in server.requests] == [12, 7]


def test_a_control_request_that_fails_too_is_not_called_the_truncation():
    server = ScriptedVisionServer(QWEN25_VL, truncate=0)
    result = check_images(server, "qwen", 12, 448, text_ok=False, geometry=QWEN25_VL)
    assert not result["ok"] and result["control"]["ok"] is False
    assert "fails whatever the size" in result["message"]


@pytest.mark.parametrize("served, counted", [
    # The checkpoint's processor caps frames at 224 x 224 (64 tokens each): 12 frames are 792 tokens, below
    # 2,048, so a pass would prove nothing about the truncation.
    ({"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 50176}, 12 * 66),
    # Its patches are 16 px where the check assumed 14: 196 tokens a frame, not 256. Still past 2,048, but the
    # check's sizing (and its control request) rest on a geometry that is not the replica's.
    (QWEN3_VL, 12 * 198),
])
def test_a_server_whose_processor_differs_from_the_geometry_fails_the_check(served, counted):
    server = ScriptedVisionServer(served)
    result = check_images(server, "qwen", 12, 448, text_ok=True, geometry=QWEN25_VL)
    assert not result["ok"] and result["class"] == "config"
    assert result["image_tokens_server"] == counted
    assert re.search(r"counted %d image tokens for 12 frames of 448x448, the processor geometry .* gives 3096" % counted,
                     result["message"])
    assert "preprocessor_config.json as image_processor" in result["message"]


def test_a_control_request_that_fails_where_the_large_one_answered_fails_the_check():
    class Flaky(ScriptedVisionServer):
        def chat(self, payload, timeout=None):
            resp = super().chat(payload, timeout)
            if len(self.requests) == 3:
                return Response(resp.url, 500, {"error": {"message": "EngineDeadError"}}, "EngineDeadError", 0.1)
            return resp

    result = check_images(Flaky(QWEN25_VL), "qwen", 12, 448, text_ok=True, geometry=QWEN25_VL)
    assert not result["ok"] and result["class"] == "server_error" and result["control"]["status"] == 500
    assert "the image path is not reliable" in result["message"]
