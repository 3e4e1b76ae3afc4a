"""What is sent to test an endpoint: fresh images, valid PNGs that never repeat."""

from __future__ import annotations

import base64
import hashlib
import io

from PIL import Image

from ansible_collections.pairserve.llm.plugins.module_utils._openai_prompts import image_message


def test_fresh_images_are_valid_pngs_and_never_repeat():
    message, digests = image_message(10, 32)
    assert len(message["content"]) == 11 and message["content"][0]["type"] == "text"
    again, digests_again = image_message(10, 32)
    assert len(set(digests) | set(digests_again)) == 20, "every image of every run is new"
    for part, digest in zip(message["content"][1:], digests):
        url = part["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        data = base64.b64decode(url.split(",", 1)[1])
        assert hashlib.sha256(data).hexdigest() == digest
        with Image.open(io.BytesIO(data)) as img:  # a real decoder, CRCs checked
            img.load()
            assert img.format == "PNG" and img.size == (32, 32) and img.mode == "RGB"
            raw = img.tobytes()
            assert len({raw[i:i + 3] for i in range(0, len(raw), 3)}) > 500, "random content, not a flat fixture"
