# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what is sent to an OpenAI-compatible endpoint to test or measure it: a tool schema, fresh images, and
prompts of a given token length counted with the server's own tokenizer.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import zlib

from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import ProbeError, Response
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import classify


WEATHER_TOOL = {
    "type": "function",
    "function": {
        # vLLM renders tools with model_dump(): keep the key order name, description, parameters.
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}


# --- fresh images -----------------------------------------------------------------------------------

def random_png(width=64, height=64):
    """A PNG of random RGB pixels, built with zlib and struct. Fresh every call: the seed's fixtures lied
    because cached images bypassed enough processor work to stay below the 2048 boundary."""
    raw = bytearray()
    row = width * 3
    noise = os.urandom(row * height)
    for y in range(height):
        raw.append(0)  # filter type 0 (None) before each scanline
        raw.extend(noise[y * row:(y + 1) * row])

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + \
        chunk(b"IEND", b"")


def image_message(count, size, text="Describe what these camera frames show, in one sentence."):
    """A user message with ``count`` fresh PNGs as data URLs, like the ten-frame camera request."""
    parts = [{"type": "text", "text": text}]
    digests = []
    for dummy in range(count):
        png = random_png(size, size)
        digests.append(hashlib.sha256(png).hexdigest())
        parts.append({"type": "image_url",
                      "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode("ascii")}})
    return {"role": "user", "content": parts}, digests


# --- long prompts to a token target ---------------------------------------------------------------

FILLER = "The camera on the north side saw a grey cat cross the yard at dusk. "


def build_prompt(client, model, target, prefix="Reply with OK. ", unit=FILLER):
    """Messages whose chat prompt is at most ``target`` tokens and as close to it as the filler allows.

    Counts with the server's own tokenizer (/tokenize, or usage.prompt_tokens) instead of guessing
    characters per token; a handful of counting calls whatever the target. Returns (messages, count,
    tokens per filler unit).
    """
    def msgs(reps, extra=""):
        return [{"role": "user", "content": prefix + unit * reps + extra}]

    def count(messages):
        """Token count, or None when the server refuses the prompt as longer than its context (counting
        through usage.prompt_tokens sends the prompt itself)."""
        try:
            return client.count_tokens(model, messages)
        except ProbeError as exc:
            if classify(exc.response)[0] == "context_limit":
                return None
            raise

    base = count(msgs(0))
    if base is None:
        raise ProbeError(Response(client.base_url, 400, None, "even the shortest prompt is too long"), "counting")
    per = max(1, (count(msgs(8)) or base + 8) - base) / 8.0
    reps = max(0, int((target - base) / per))
    current = count(msgs(reps))
    for dummy in range(8):  # BPE merges at boundaries make the per-unit cost a little uneven: correct
        if current is None:  # over the server's context: step back 10 %
            reps = int(reps * 0.9)
        elif current > target:
            reps = max(0, reps - int((current - target) / per) - 1)
        elif target - current > per:
            reps += int((target - current) / per)
        else:
            break
        current = count(msgs(reps))
    if current is None:
        raise ProbeError(Response(client.base_url, 400, None, "could not build a prompt under the context"),
                         "building a %d-token prompt" % target)
    if current >= target:
        return msgs(reps), current, per
    # top up with short words to land within a few tokens of the target
    words = "ok " * int(per + 2)
    lo, hi = 0, len(words)
    best = ("", current)
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = count(msgs(reps, " " + words[:mid]))
        if trial is not None and trial <= target:
            best = (" " + words[:mid], trial)
            lo = mid + 1
        else:
            hi = mid - 1
        if best[1] == target:
            break
    return msgs(reps, best[0]), best[1], per
