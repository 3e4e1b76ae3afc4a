#!/usr/bin/env python
"""Build the tiny, deterministic Qwen3 test model that the CPU vLLM test ground serves.

    scripts/build_tiny_model.py [--random | --vision] [--out DIR] [--force]
    -> prints the model directory (default .cache/tiny-model/qwen3-tiny, qwen3-tiny-random or qwen2_5-vl-tiny)

What it is: a Qwen3ForCausalLM with 2 layers, hidden 128, head size 32 (vLLM's CPU attention needs head
size 32...512), a byte-level BPE tokenizer trained here on the rendered training texts, and a ChatML +
tools chat template in Qwen3's shape (`<think>`, Qwen3-Coder XML `<tool_call>`, `enable_thinking`).
It is randomly initialised (seed 0) and then overfit on the verification conversations, so that vLLM
with `--reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser qwen3_coder` at
temperature 0 returns reasoning "verification", content "The pair is ready." and get_weather(Paris).
It memorises, it does not generalise: checks must send exactly the prompts in verification.json.
`--random` saves the untrained twin (same tokenizer and config), which fails those checks: the
proof that a check can fail.

Like the seed's checkpoint, tokenizer.json keeps `truncation.max_length: 2048` (the 4-bit calibration
length that broke image requests); the tokenizer_patch module is what removes it.

Files next to the weights:
  verification.json   the checks (messages, tools, chat_template_kwargs, expected reasoning / content /
                      tool call, prompt_tokens as vLLM counts them), loaded by the verify role and tests.
  build.json          versions, seconds, sha256 of every file: the build is reproducible bit for bit
                      with the same torch build (one thread, deterministic algorithms).

`--vision` builds the tiny Qwen2.5-VL instead (default .cache/tiny-model/qwen2_5-vl-tiny): the same tokenizer
with Qwen's vision tokens, a 2-layer language model and a 2-block vision tower (patch 14, merge 2), random weights
(seed 0; nothing is trained, the image check asks for HTTP 200 and the server's token count, not for words), and
a Qwen2VLImageProcessor whose max_pixels (448 x 448) keeps vLLM's CPU encoder warm-up short. Its tokenizer.json
keeps the seed's truncation too: served unpatched by vLLM 0.25.1, twelve fresh 448 x 448 frames (3,072 image
tokens) are refused with HTTP 400, as the seed's camera requests were. verification.json carries no text checks.

Needs torch, transformers and tokenizers; when this interpreter lacks them the script re-runs itself
with the CPU vLLM venv's Python (.cache/vllm-cpu/<lab/pins.py SERVE_VLLM>/venv, built by scripts/build_vllm_cpu.sh),
which has all three, so CI builds no extra venv; without that venv (`make lab` does not build it), with the lab's
serving venv of its pinned vLLM. The fingerprint in build.json names the libraries, so a model built with the one
is built again with the other once that exists. Training takes about 10-20 s on 2 cores.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from lab.pins import SERVE_VLLM, VLLM  # noqa: E402  pylint: disable=wrong-import-position

VLLM_VENV_PYTHON = REPO / ".cache" / "vllm-cpu" / SERVE_VLLM / "venv" / "bin" / "python"
CACHE = REPO / ".cache" / "tiny-model"

SEED = 0
# The seed checkpoint's tokenizer.json truncation (its 4-bit calibration length): kept on purpose.
TRUNCATION = {"direction": "Right", "max_length": 2048, "strategy": "LongestFirst", "stride": 0}
NATIVE_CONTEXT = 8192  # config.json max_position_embeddings: the "native context" of this checkpoint

# Qwen3-shaped ChatML template. Every line starts with {%- / {{- so template source newlines vanish;
# every real newline is a '\n' inside a Jinja string literal ({%- after a literal newline would eat it).
CHAT_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n<tools>' }}
{%- for t in tools %}{{- '\n' + (t | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nFor each function call, reply in this format:\n' }}
{{- '<tool_call>\n<function=name>\n<parameter=name>\nvalue\n</parameter>\n</function>\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for m in messages %}{%- if m.role != 'system' %}
{{- '<|im_start|>' + m.role + '\n' + (m.content if m.content is string else '') }}
{%- if m.tool_calls %}{%- for tc in m.tool_calls %}{%- set f = tc.function if tc.function is defined else tc %}
{{- '\n<tool_call>\n<function=' + f.name + '>\n' }}
{%- if f.arguments is mapping %}{%- for k, v in f.arguments | items %}
{{- '<parameter=' + k + '>\n' + (v | string) + '\n</parameter>\n' }}
{%- endfor %}{%- endif %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}{%- endif %}
{{- '<|im_end|>\n' }}
{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}"""

# The vision model's template: a message's content may be a list of parts (the OpenAI shape vLLM passes on);
# each image part becomes Qwen's <|vision_start|><|image_pad|><|vision_end|>, which the processor expands into
# the image's tokens; text parts are copied.
VISION_TEMPLATE = r"""{%- macro render_content(content) %}{%- if content is string %}{{- content }}{%- else %}
{%- for part in content %}{%- if part.type in ['image', 'image_url'] %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}
{%- elif part.type == 'text' %}{{- part.text }}{%- endif %}{%- endfor %}{%- endif %}{%- endmacro %}
""" + CHAT_TEMPLATE.replace("'\\n' + (m.content if m.content is string else '') }}", "'\\n' }}{{- render_content(m.content) }}")
VISION = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]  # special, as in Qwen2.5-VL
# Qwen2.5-VL's processor geometry with max_pixels at 448 x 448: 256 image tokens per 448 x 448 frame.
VISION_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
    "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 3136, "max_pixels": 200704,
    "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "do_convert_rgb": True,
    "resample": 3, "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
}


def _weather_tool():
    """The tool schema the collection's checks send, from its one owner (plugins/module_utils/_openai_prompts.py),
    read out of that file's source: this script runs in the CPU vLLM venv, which has no Ansible to import the
    collection with. The model memorises the tool as vLLM renders it, so the two must never differ."""
    source = (REPO / "plugins" / "module_utils" / "_openai_prompts.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WEATHER_TOOL" for t in node.targets):
            return ast.literal_eval(node.value)
    sys.exit("build_tiny_model: no WEATHER_TOOL = {...} in plugins/module_utils/_openai_prompts.py")


WEATHER_TOOL = _weather_tool()


def _tool_call_text(name, arguments):
    body = "".join("<parameter=%s>\n%s\n</parameter>\n" % (k, v) for k, v in arguments.items())
    return "<tool_call>\n<function=%s>\n%s</function>\n</tool_call>" % (name, body)


def _check(check_id, purpose, question, reasoning, content=None, tool=None, tools=None, thinking=True):
    completion = "" if reasoning is None else "<think>\n%s\n</think>\n\n" % reasoning
    completion += _tool_call_text(tool["name"], tool["arguments"]) if tool else content
    return {
        "id": check_id,
        "purpose": purpose,
        "messages": [{"role": "user", "content": question}],
        "tools": tools,
        "chat_template_kwargs": {} if thinking else {"enable_thinking": False},
        "expect": {
            "reasoning": reasoning,
            "content": content,
            "tool_calls": [tool] if tool else [],
        },
        "completion": completion,
    }


CHECKS = [
    _check("reasoning", "reasoning parser: message.reasoning and message.content", "Say the verification phrase.",
           "verification", content="The pair is ready."),
    _check("no_thinking", "chat_template_kwargs enable_thinking=false: content only", "Say the verification phrase.",
           None, content="The pair is ready.", thinking=False),
    _check("tool_paris", "tool parser qwen3_coder: tool_calls[0] = get_weather(city=Paris)", "What is the weather in Paris?",
           "weather", tool={"name": "get_weather", "arguments": {"city": "Paris"}}, tools=[WEATHER_TOOL]),
    _check("tool_tokyo", "tool parser qwen3_coder: a second city, so a hard-coded answer fails", "What is the weather in Tokyo?",
           "weather", tool={"name": "get_weather", "arguments": {"city": "Tokyo"}}, tools=[WEATHER_TOOL]),
    _check("arithmetic", "short answer", "What is 2+2?", "arithmetic", content="4"),
    _check("greeting", "short answer", "Say hello.", "greeting", content="Hello."),
]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # special: skipped when decoding
# Not special, as in Qwen3: the reasoning and tool parsers must see them in the decoded text.
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def _ml_pythons():
    """The venvs that have torch, transformers and tokenizers, in the order they are asked: the integration tier's
    CPU vLLM (the tiny model's usual builder), then the lab's serving venv and the parser venv of the lab's pinned
    vLLM (what `make lab` builds, without the integration tier's venv)."""
    cpu = REPO / ".cache" / "vllm-cpu"
    return [VLLM_VENV_PYTHON, cpu / (VLLM + "-serve") / "venv" / "bin" / "python", cpu / VLLM / "venv" / "bin" / "python"]


def _ensure_ml_python():
    try:
        import torch  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
        import transformers  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        # Compare venv prefixes: the venvs' python binaries resolve to the same system interpreter.
        for python in _ml_pythons():
            if python.exists() and Path(sys.prefix).resolve() != python.parent.parent.resolve():
                os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
        return False
    return True


def _fingerprint():
    import tokenizers  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel

    return dict(_recipe(), **{"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__})


def _recipe():
    """What the model is made from, whatever builds it: this script and the tool it teaches."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    tool = hashlib.sha256(json.dumps(WEATHER_TOOL, sort_keys=True).encode()).hexdigest()[:16]
    return {"script": digest, "tool": tool}


def _build_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # pylint: disable=import-outside-toplevel
    from transformers import PreTrainedTokenizerFast  # pylint: disable=import-outside-toplevel

    def wrap(tok):
        hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
                                     model_max_length=131072)
        hf.chat_template = CHAT_TEMPLATE
        return hf

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    hf = wrap(tok)
    # Train BPE on exactly the rendered training texts (plus a little general text for the long-prompt checks).
    texts = [_prompt(hf, c) + c["completion"] for c in CHECKS]
    texts += ["The quick brown fox jumps over the lazy dog. Hello, how are you today?",
              "Tell me a joke. What time is it? Where is London? Who are you? The pair is ready."]
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts * 10, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    return wrap(tok)


def _prompt(hf, check, tokenize=False):
    out = hf.apply_chat_template(check["messages"], tools=check["tools"], add_generation_prompt=True, tokenize=tokenize,
                                 **check["chat_template_kwargs"])
    if tokenize and not isinstance(out, list):
        out = out["input_ids"]
    return out


def _train(hf, randomise_only):
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import Qwen3Config, Qwen3ForCausalLM  # pylint: disable=import-outside-toplevel

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one thread: the same bits on every machine with the same torch build
    eos, pad = hf.convert_tokens_to_ids("<|im_end|>"), hf.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen3Config(vocab_size=((len(hf) + 63) // 64) * 64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=NATIVE_CONTEXT,
                      tie_word_embeddings=True, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, rope_theta=10000.0)
    model = Qwen3ForCausalLM(cfg)
    seqs = [(list(_prompt(hf, c, tokenize=True)), hf.encode(c["completion"] + "<|im_end|>", add_special_tokens=False)) for c in CHECKS]
    width = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), width), pad)
    labels = torch.full((len(seqs), width), -100)
    for i, (p, c) in enumerate(seqs):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p): len(p) + len(c)] = torch.tensor(c)  # loss on the answer (and its <|im_end|>) only

    def greedy_matches(mdl):
        # Teacher-forced argmax equals the target at every answer position <=> greedy decoding reproduces it.
        with torch.no_grad():
            pred = mdl(input_ids=ids).logits[:, :-1].argmax(-1)
        target = labels[:, 1:]
        mask = target != -100
        return bool((pred[mask] == target[mask]).all())

    steps = 0
    if not randomise_only:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        for steps in range(1, 2001):
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            if steps % 25 == 0:
                # vLLM serves bf16: the greedy answer must already hold after the cast, not only in fp32.
                bf16 = Qwen3ForCausalLM(cfg)
                bf16.load_state_dict(model.state_dict())
                bf16 = bf16.to(torch.bfloat16).eval()
                done = greedy_matches(model.eval()) and greedy_matches(bf16) and loss.item() < 0.02
                model.train()
                if done:
                    break
        else:
            sys.exit("build_tiny_model: training did not converge in 2000 steps; the checks would fail on noise")
    model = model.to(torch.bfloat16).eval()
    model.config.dtype = torch.bfloat16
    return model, seqs, steps


def _publish(out, hf, model, write_rest, **info):
    """Save tokenizer and model into a temp dir beside ``out``, keep the seed's truncation in tokenizer.json, let
    ``write_rest(tmp)`` add the other files, write build.json (``info`` with the files' hashes) and rename the
    directory into place: a build that stops leaves no half model at ``out``. Returns build.json's dict."""
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=out.parent))
    try:
        hf.save_pretrained(tmp)
        model.save_pretrained(tmp)
        tokenizer_json = tmp / "tokenizer.json"
        data = json.loads(tokenizer_json.read_text())
        data["truncation"] = TRUNCATION
        tokenizer_json.write_text(json.dumps(data, ensure_ascii=False, indent=2))
        write_rest(tmp)
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp.iterdir()) if p.is_file()}
        info = dict(info, parameters=sum(x.numel() for x in model.parameters()), vocab=len(hf), files=files)
        (tmp / "build.json").write_text(json.dumps(info, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return info


def build(out, randomise_only=False):
    """Build the model into `out` (atomically: a temp dir renamed into place). Returns build.json's dict."""
    fingerprint = _fingerprint()
    started = time.time()
    hf = _build_tokenizer()
    model, seqs, steps = _train(hf, randomise_only)

    def write_rest(tmp):
        eos, pad = model.config.eos_token_id, model.config.pad_token_id
        # Sampling defaults like a real Qwen3 release: vLLM applies them unless --override-generation-config wins,
        # which is why every check sends temperature 0.
        (tmp / "generation_config.json").write_text(json.dumps(
            {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "eos_token_id": [eos], "pad_token_id": pad}, indent=1))
        checks = []
        for check, (prompt_ids, _dummy) in zip(CHECKS, seqs):
            entry = {k: v for k, v in check.items() if k != "completion"}
            entry["prompt_tokens"] = len(prompt_ids)
            entry["completion"] = check["completion"]
            checks.append(entry)
        verification = {
            "model": "qwen3-tiny-random" if randomise_only else "qwen3-tiny",
            "trained": not randomise_only,
            "request": {"temperature": 0, "max_tokens": 64},
            "compare": "strip: compare message.reasoning / message.content after str.strip(); tool arguments as parsed JSON",
            "native_context": NATIVE_CONTEXT,
            "tokenizer_truncation_max_length": TRUNCATION["max_length"],
            "checks": checks,
        }
        (tmp / "verification.json").write_text(json.dumps(verification, indent=1) + "\n")

    info = dict(fingerprint, seconds=round(time.time() - started, 1), steps=steps, trained=not randomise_only)
    return _publish(out, hf, model, write_rest, **info)


def _vision_model(hf):
    """The tiny random Qwen2.5-VL (a shape vLLM 0.25.1's processor and model code accept), bf16, seed 0."""
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration  # pylint: disable=import-outside-toplevel

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    ids = {t: hf.convert_tokens_to_ids(t) for t in VISION}
    eos, pad = hf.convert_tokens_to_ids("<|im_end|>"), hf.convert_tokens_to_ids("<|endoftext|>")
    mrope = [4, 6, 6]  # halves of the 32-wide heads: temporal, height, width
    text = dict(vocab_size=((len(hf) + 63) // 64) * 64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=NATIVE_CONTEXT, eos_token_id=eos,
                pad_token_id=pad, bos_token_id=None, tie_word_embeddings=True,
                # transformers 5 reads rope_parameters, 4.x rope_scaling: both, so either release loads it alike.
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
                rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": mrope}, rope_theta=10000.0)
    vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=64, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1])
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True)
    model = Qwen2_5_VLForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    model.config.dtype = torch.bfloat16
    return model


def build_vision(out):
    """Build the tiny Qwen2.5-VL into `out` (atomically, as build()). Returns build.json's dict."""
    from tokenizers import AddedToken  # pylint: disable=import-outside-toplevel

    fingerprint = _fingerprint()
    started = time.time()
    hf = _build_tokenizer()
    hf.add_special_tokens({"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in VISION]})
    hf.chat_template = VISION_TEMPLATE
    model = _vision_model(hf)

    def write_rest(tmp):
        (tmp / "preprocessor_config.json").write_text(json.dumps(VISION_PREPROCESSOR, indent=1) + "\n")
        (tmp / "chat_template.jinja").write_text(VISION_TEMPLATE)
        verification = {"model": "qwen2_5-vl-tiny", "trained": False, "native_context": NATIVE_CONTEXT,
                        "tokenizer_truncation_max_length": TRUNCATION["max_length"], "request": {"temperature": 0, "max_tokens": 1},
                        "checks": [], "image_processor": VISION_PREPROCESSOR}
        (tmp / "verification.json").write_text(json.dumps(verification, indent=1) + "\n")

    info = dict(fingerprint, seconds=round(time.time() - started, 1), steps=0, trained=False, vision=True)
    return _publish(out, hf, model, write_rest, **info)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--random", action="store_true", help="save the untrained twin (the checks must fail on it)")
    kind.add_argument("--vision", action="store_true", help="build the tiny Qwen2.5-VL (the image check's model)")
    parser.add_argument("--out", type=Path, help="model directory (default .cache/tiny-model/qwen3-tiny[-random] or qwen2_5-vl-tiny)")
    parser.add_argument("--force", action="store_true", help="rebuild even when build.json matches this script and its libraries")
    args = parser.parse_args(argv)
    name = "qwen2_5-vl-tiny" if args.vision else "qwen3-tiny-random" if args.random else "qwen3-tiny"
    out = (args.out or CACHE / name).resolve()
    stamp = out / "build.json"
    if not _ensure_ml_python():
        # The venvs that built it may be gone (the lab tier frees them on a small disk): a model of this recipe is
        # kept, whatever libraries made it.
        if not args.force and stamp.exists():
            previous = json.loads(stamp.read_text())
            if all(previous.get(k) == v for k, v in _recipe().items()):
                print(out)
                return 0
        sys.exit("build_tiny_model: needs torch + transformers; run scripts/build_vllm_cpu.sh %s first (its venv has both)"
                 % SERVE_VLLM)
    out.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = _fingerprint()
    if not args.force and stamp.exists():
        previous = json.loads(stamp.read_text())
        if all(previous.get(k) == v for k, v in fingerprint.items()):
            print(out)
            return 0
    info = build_vision(out) if args.vision else build(out, randomise_only=args.random)
    print("build_tiny_model: %s in %.1f s (%d steps, %d parameters)" % (out, info["seconds"], info["steps"], info["parameters"]), file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
