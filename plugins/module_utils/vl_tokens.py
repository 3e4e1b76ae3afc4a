# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many image tokens a Qwen-VL style processor makes of an image, from the checkpoint's own
``preprocessor_config.json``.

Why the verify play needs it: the seed's failure was the tokenizer's ``truncation.max_length: 2048`` cutting
the image placeholders of one request once its *new* images added up to more than 2,048 tokens. An image check
whose frames stay below that boundary passes on a broken checkpoint ("fixtures lie"), so the check must know,
before it sends anything, that its request crosses the boundary, and afterwards, that the server counted the
image tokens it was sent.

The processors of Qwen2-VL, Qwen2.5-VL, Qwen3-VL and the Qwen3.5 family resize each image so that both sides are
multiples of ``patch_size * merge_size`` and its area lies within ``[min_pixels, max_pixels]``, cut it into
``patch_size`` squares and merge ``merge_size`` x ``merge_size`` of them into one token: a 448 x 448 frame is
256 tokens with 14-pixel patches (Qwen2.5-VL) and 196 with 16-pixel patches (Qwen3-VL, Qwen3.5).
"""

from __future__ import annotations

import math

# The truncation length the seed's checkpoint kept from its 4-bit calibration.
SEED_TRUNCATION = 2048

# Qwen3-VL / Qwen3.5 (the pinned checkpoint's family): the fewer tokens per frame of the two families, so a
# request sized with it crosses the boundary for either.
DEFAULT_GEOMETRY = {"patch_size": 16, "merge_size": 2, "min_pixels": 65536, "max_pixels": 16777216}


class GeometryError(ValueError):
    """A preprocessor configuration this module cannot size images with."""


def geometry(config=None):
    """The sizing parameters of a ``preprocessor_config.json`` (a dict), or the default family's.

    Newer configs give the pixel bounds as ``size: {shortest_edge, longest_edge}`` (areas, despite the names),
    older ones as ``min_pixels`` / ``max_pixels``; both are read.
    """
    config = dict(config or {})
    size = config.get("size") if isinstance(config.get("size"), dict) else {}
    out = dict(DEFAULT_GEOMETRY)
    for key, value in (("patch_size", config.get("patch_size")), ("merge_size", config.get("merge_size")),
                       ("min_pixels", config.get("min_pixels", size.get("shortest_edge"))),
                       ("max_pixels", config.get("max_pixels", size.get("longest_edge")))):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GeometryError("preprocessor %s is %r, not a positive whole number" % (key, value))
        out[key] = value
    if out["min_pixels"] > out["max_pixels"]:
        raise GeometryError("preprocessor min_pixels %d is above max_pixels %d" % (out["min_pixels"], out["max_pixels"]))
    return out


def resized(height, width, geo):
    """(height, width) the processor resizes an image to: multiples of patch x merge, area within the bounds."""
    factor = geo["patch_size"] * geo["merge_size"]
    if min(height, width) < 1:
        raise GeometryError("an image of %d x %d pixels has no area" % (width, height))
    h = max(factor, int(round(height / float(factor))) * factor)
    w = max(factor, int(round(width / float(factor))) * factor)
    if h * w > geo["max_pixels"]:
        beta = math.sqrt(height * width / float(geo["max_pixels"]))
        h = max(factor, int(math.floor(height / beta / factor)) * factor)
        w = max(factor, int(math.floor(width / beta / factor)) * factor)
    elif h * w < geo["min_pixels"]:
        beta = math.sqrt(geo["min_pixels"] / float(height * width))
        h = int(math.ceil(height * beta / factor)) * factor
        w = int(math.ceil(width * beta / factor)) * factor
    return h, w


def image_tokens(height, width, geo):
    """Placeholder tokens of one image (what the chat template expands its image pad into)."""
    h, w = resized(height, width, geo)
    return (h // geo["patch_size"]) * (w // geo["patch_size"]) // (geo["merge_size"] ** 2)


# Qwen's chat templates wrap each image's pad tokens in <|vision_start|> ... <|vision_end|>.
WRAPPER_TOKENS = 2


def frame_tokens(size, geo):
    """Prompt tokens of one ``size`` x ``size`` frame in a Qwen chat prompt: its pad tokens and the two wrappers."""
    return image_tokens(size, size, geo) + WRAPPER_TOKENS


def frames_below(limit, size, geo):
    """The most frames of ``size`` x ``size`` whose tokens, wrappers included, stay at or below ``limit`` (the
    control request of the image check)."""
    return limit // frame_tokens(size, geo)
