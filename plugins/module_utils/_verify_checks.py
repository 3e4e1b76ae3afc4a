# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: llm_verify's checks, each a few real requests through an OpenAI-compatible endpoint and one result
({check, ok, message, class, permanent, status, ...}): text with reasoning, a tool call, images past the seed's
2,048-token truncation (or refused by a text profile), the context limit and a fixed prompt's token count.
"""

from __future__ import annotations

import json

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import ProbeError
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import (
    TOKENIZER_FIX,
    backend_status,
    classify,
    classify_image_failure,
    is_permanent,
)
from ansible_collections.pairserve.llm.plugins.module_utils._openai_prompts import FILLER, build_prompt, image_message


def _result(check, ok, resp=None, message="", failure_class=None, **detail):
    out = {"check": check, "ok": ok, "message": message, "class": failure_class,
           "permanent": is_permanent(failure_class) if failure_class else None}
    if resp is not None:
        out["status"] = resp.status
        out["elapsed_s"] = round(resp.elapsed, 3)
    out.update(detail)
    return out


def _failed_response(check, resp, model):
    cls, why = classify(resp, model)
    return _result(check, False, resp, why, cls, response_message=resp.error_message()[:1000])


def _message(resp):
    try:
        return resp.body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None


def reasoning_of(message):
    # vLLM >= 0.10 puts it in "reasoning"; older ones and some proxies use "reasoning_content".
    return message.get("reasoning") or message.get("reasoning_content") or ""


def check_text(client, model, spec):
    """Text with reasoning: non-empty content and reasoning, or exactly the expected ones when given."""
    payload = {"model": model, "messages": spec["messages"], "max_tokens": spec["max_tokens"],
               "temperature": spec.get("temperature", 0)}
    if spec.get("reasoning_effort"):
        payload["reasoning_effort"] = spec["reasoning_effort"]
    resp = client.chat(payload)
    if not resp.ok:
        return _failed_response("text", resp, model)
    message = _message(resp) or {}
    content = (message.get("content") or "").strip()
    reasoning = reasoning_of(message).strip()
    finish = resp.body["choices"][0].get("finish_reason")
    detail = {"content": content[:500], "reasoning": reasoning[:500], "finish_reason": finish,
              "usage": resp.body.get("usage")}
    problems = []
    if not content:
        problems.append("the answer is empty%s" % (
            " (finish_reason 'length': max_tokens %d ran out inside the reasoning; give the reasoning budget "
            "more completion tokens)" % spec["max_tokens"] if finish == "length" else ""))
    if not reasoning:
        problems.append("no reasoning came back (is --reasoning-parser qwen3 set on the replica?)")
    if spec.get("expect_content") is not None and content != spec["expect_content"].strip():
        problems.append("content %r is not the expected %r" % (content[:200], spec["expect_content"].strip()))
    if spec.get("expect_reasoning") is not None and reasoning != spec["expect_reasoning"].strip():
        problems.append("reasoning %r is not the expected %r" % (reasoning[:200], spec["expect_reasoning"].strip()))
    if problems:
        return _result("text", False, resp, "; ".join(problems), "wrong_answer", **detail)
    return _result("text", True, resp, "answer and reasoning present", **detail)


def check_tool_call(client, model, spec):
    """A tool schema and tool_choice auto (what agents send) must give a parsed tool_calls entry."""
    payload = {"model": model, "messages": spec["messages"], "tools": spec["tools"], "tool_choice": "auto",
               "max_tokens": spec["max_tokens"], "temperature": spec.get("temperature", 0)}
    resp = client.chat(payload)
    if not resp.ok:
        return _failed_response("tool_call", resp, model)
    message = _message(resp) or {}
    calls = message.get("tool_calls") or []
    detail = {"tool_calls": calls[:4], "content": (message.get("content") or "")[:300]}
    if not calls:
        return _result("tool_call", False, resp,
                       "no parsed tool_calls in the answer (content %r): the tool-call parser did not recognise "
                       "the model's output; check --tool-call-parser (qwen3_coder for Qwen3 checkpoints)"
                       % (message.get("content") or "")[:200], "wrong_answer", **detail)
    function = calls[0].get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        arguments = None
    known = [t["function"]["name"] for t in spec["tools"]]
    problems = []
    if name not in known:
        problems.append("tool name %r is not one of %s" % (name, known))
    if not isinstance(arguments, dict):
        problems.append("arguments %r are not a JSON object" % function.get("arguments"))
    else:
        schema = next((t["function"].get("parameters") or {} for t in spec["tools"]
                       if t["function"]["name"] == name), {})
        missing = [k for k in schema.get("required", []) if k not in arguments]
        if missing:
            problems.append("required arguments %s are missing" % missing)
    if spec.get("expect_name") is not None and name != spec["expect_name"]:
        problems.append("tool %r is not the expected %r" % (name, spec["expect_name"]))
    if spec.get("expect_arguments") is not None and arguments != spec["expect_arguments"]:
        problems.append("arguments %s are not the expected %s" % (json.dumps(arguments),
                                                                  json.dumps(spec["expect_arguments"])))
    if problems:
        return _result("tool_call", False, resp, "; ".join(problems), "wrong_answer", **detail)
    return _result("tool_call", True, resp, "tool call %s(%s)" % (name, json.dumps(arguments)), **detail)


def _prompt_tokens(resp):
    try:
        return int(resp.body["usage"]["prompt_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def _control_request(client, model, size, geo, limit):
    """As many fresh frames as stay at or below ``limit`` image tokens, in one request: its outcome tells a failure
    that starts past the boundary (the truncation) from an image path that fails whatever the size."""
    control = vl_tokens.frames_below(limit, size, geo)
    if control < 1:
        return None
    small, _digests = image_message(control, size)
    answer = client.chat({"model": model, "messages": [small], "max_tokens": 16, "temperature": 0})
    return {"images": control, "image_tokens_expected": control * vl_tokens.frame_tokens(size, geo),
            "status": answer.status, "ok": answer.ok}


def check_images(client, model, count, size, text_ok=None, geometry=None, limit=vl_tokens.SEED_TRUNCATION):
    """``count`` fresh random PNGs in one request, sized so that their image tokens are past ``limit`` (the
    seed's 2,048 truncation) -> 200, and the server counts exactly the image tokens the processor geometry gives,
    each frame's pad tokens and its two wrapper tokens (``usage.prompt_tokens`` of the request minus that of the
    same text without images).

    A control request with as many fresh frames as stay below ``limit`` follows, pass or fail (its result is
    ``control``): when the large request failed and the control answered, the failure begins past the boundary,
    which is the tokenizer's truncation (the seed's symptom, whatever vLLM's message says)."""
    geo = vl_tokens.geometry(geometry)
    per_frame = vl_tokens.image_tokens(size, size, geo)
    expected = count * vl_tokens.frame_tokens(size, geo)
    message, digests = image_message(count, size)
    resp = client.chat({"model": model, "messages": [message], "max_tokens": 16, "temperature": 0})
    detail = {"images": count, "image_size": size, "image_sha256": digests,
              "unique_images": len(set(digests)) == len(digests), "image_tokens_per_frame": per_frame,
              "image_tokens_expected": expected, "limit": limit}
    if resp.ok:
        result = _counted_images(client, model, message, resp, detail, geo)
    else:
        result = _failed_response("images", resp, model)
        result.update(detail)
        result.update(classify_image_failure(resp, text_ok))
    control = _control_request(client, model, size, geo, limit)
    if control is None:
        return result
    result["control"] = control
    said = "a control request with %d fresh frames (%d image tokens, not past %d)" % (
        control["images"], control["image_tokens_expected"], limit)
    said_first = said[0].upper() + said[1:]
    if control["ok"] and result["ok"]:
        result["message"] += "; %s answered too." % said
    elif control["ok"]:
        if backend_status(resp) == 400 and result.get("class") not in ("config", "tokenizer_truncation"):
            # Past the boundary only, whatever vLLM's words: the seed's truncation (text_ok was not known).
            result.update({"class": "tokenizer_truncation", "permanent": True,
                           "message": "%d fresh frames (%d image tokens) failed with a permanent 400: %s. (vLLM said: %s)"
                                      % (count, expected, TOKENIZER_FIX, resp.error_message()[:300])})
        result["message"] += " %s answered: the failure starts past the boundary." % said_first
    elif result["ok"]:
        result.update(ok=False, **{"class": "server_error", "permanent": True})
        result["message"] += ("; but %s failed (HTTP %s): the image path is not reliable." % (said, control["status"]))
    else:
        result["message"] += (" %s failed too (HTTP %s): the image path fails whatever the size, not only past the "
                              "truncation." % (said_first, control["status"]))
    return result


def _counted_images(client, model, message, resp, detail, geo):
    """The image request answered: the server's image-token count (the request's prompt tokens minus its text-only
    twin's) must be exactly what the geometry gives."""
    count, size, expected, limit = detail["images"], detail["image_size"], detail["image_tokens_expected"], detail["limit"]
    text_only = {"role": "user", "content": [message["content"][0]]}
    twin = client.chat({"model": model, "messages": [text_only], "max_tokens": 1, "temperature": 0})
    with_images, without = _prompt_tokens(resp), _prompt_tokens(twin)
    if with_images is None or without is None:
        return _result("images", False, resp, "%d fresh images answered, but the server reported no "
                       "usage.prompt_tokens for the request or its text-only twin (HTTP %s): the image tokens it "
                       "counted cannot be checked" % (count, twin.status), "wrong_answer", **detail)
    counted = with_images - without
    detail = dict(detail, image_tokens_server=counted, prompt_tokens=with_images)
    if counted != expected:
        return _result("images", False, resp,
                       "the server counted %d image tokens for %d frames of %dx%d, the processor geometry %s gives %d "
                       "(%d per frame and %d wrapper tokens): the replica's processor is not the one this check sized "
                       "its request with, so it cannot tell whether the request crossed the %d-token boundary. Give "
                       "the checkpoint's preprocessor_config.json as image_processor"
                       % (counted, count, size, size, geo, expected, detail["image_tokens_per_frame"],
                          vl_tokens.WRAPPER_TOKENS, limit), "config", **detail)
    return _result("images", True, resp, "%d fresh %dx%d images answered; the server counted %d image tokens, as the "
                   "processor geometry gives, past the %d-token truncation the seed hit (prompt %d tokens)"
                   % (count, size, size, counted, limit, with_images), **detail)


def check_images_refused(client, model, size=64):
    """The text profile's side of the image check: a replica started without its vision tower
    (``--language-model-only``) or from a text-only checkpoint must refuse one fresh image with vLLM's own 400.
    An answer means the tower is loaded where the profile dropped it (its memory is gone from the KV cache) or the
    route is not the one it is labelled."""
    message, digests = image_message(1, size)
    resp = client.chat({"model": model, "messages": [message], "max_tokens": 1, "temperature": 0})
    detail = {"images": 1, "image_size": size, "image_sha256": digests}
    if resp.ok:
        return _result("images_refused", False, resp,
                       "a fresh image was answered by a route whose profile serves text only: the replica loaded its "
                       "vision tower (--language-model-only did not reach it) or the route is multimodal; re-render "
                       "and roll the replica, or mark the route multimodal: true", "config", **detail)
    refused = classify_image_failure(resp, text_ok=None)
    if refused["class"] == "config":
        return _result("images_refused", True, resp, "a fresh image was refused, as the text profile must: %s"
                       % resp.error_message()[:300], response_message=resp.error_message()[:1000], **detail)
    result = _failed_response("images_refused", resp, model)
    result.update(detail)
    result["message"] = ("a fresh image got no answer, but not vLLM's refusal of images either: %s" % result["message"])
    return result


def check_context(client, model, max_model_len, max_tokens=8):
    """A prompt near the context limit → 200; one past it → vLLM's 400 about the maximum context length."""
    results = []
    served = client.tokenize_count(model, [{"role": "user", "content": "x"}])[1]
    near_target = max_model_len - max_tokens - 1
    detail = {"max_model_len": max_model_len, "server_max_model_len": served}

    def too_short(resp, count):
        return ("a %s-token prompt, inside the profile's max_model_len %d, was refused: the replica serves a shorter "
                "context%s. Its --max-model-len is not the profile's: re-render and roll the replica, or lower the "
                "profile's max_model_len to what the KV cache holds. (vLLM said: %s)" % (
                    count if count is not None else "~%d" % near_target, max_model_len,
                    " (%s tokens)" % served if served else "", resp.error_message()[:300]))

    try:
        near_msgs, near_count, per = build_prompt(client, model, near_target)
    except ProbeError as exc:
        failed = _failed_response("context_near_limit", exc.response, model)
        failed.update(detail)
        if failed["class"] == "context_limit":  # even counting the prompt was refused as too long
            failed["message"] = too_short(exc.response, None)
        return [failed]
    resp = client.chat({"model": model, "messages": near_msgs, "max_tokens": max_tokens, "temperature": 0})
    if resp.ok:
        results.append(_result("context_near_limit", True, resp,
                               "%d-token prompt + %d completion tokens within %d answered"
                               % (near_count, max_tokens, max_model_len), prompt_tokens=near_count, **detail))
    else:
        failed = _failed_response("context_near_limit", resp, model)
        failed.update(detail, prompt_tokens=near_count)
        if failed["class"] == "context_limit":
            failed["message"] = too_short(resp, near_count)
        results.append(failed)
    # Past the limit: the near prompt plus filler worth ~128 tokens. Counting it may itself be refused by a
    # server that validates /tokenize against max_model_len, so vLLM's 400 is the judge here.
    extra = int(128 / per) + 1
    past_msgs = [{"role": "user", "content": near_msgs[0]["content"] + FILLER * extra}]
    resp = client.chat({"model": model, "messages": past_msgs, "max_tokens": max_tokens, "temperature": 0})
    detail = {"prompt_tokens_at_least": near_count + int(extra * per) - 1, "max_model_len": max_model_len}
    if backend_status(resp) == 400 and classify(resp)[0] == "context_limit":
        results.append(_result("context_past_limit", True, resp, "vLLM refused the over-long prompt with its 400"
                               + ("" if resp.status == 400 else " (passed on by GPUStack as HTTP %d)" % resp.status),
                               response_message=resp.error_message()[:300], **detail))
    elif resp.ok:
        results.append(_result("context_past_limit", False, resp,
                               "a prompt past max_model_len %d (%s tokens) was answered: the replica serves a longer "
                               "context than the profile says (check --max-model-len)"
                               % (max_model_len, resp.body.get("usage", {}).get("prompt_tokens")), "config", **detail))
    else:
        failed = _failed_response("context_past_limit", resp, model)
        failed.update(detail)
        results.append(failed)
    return results


def check_token_count(client, model, messages, reference):
    """usage.prompt_tokens of a fixed text prompt equals the recorded reference (the tokenizer patch
    must not change text token counts)."""
    resp = client.chat({"model": model, "messages": messages, "max_tokens": 1, "temperature": 0})
    if not resp.ok:
        return _failed_response("token_count", resp, model)
    count = int(resp.body["usage"]["prompt_tokens"])
    if reference is None:
        return _result("token_count", True, resp, "recorded %d prompt tokens (no reference given)" % count,
                       prompt_tokens=count, reference=None)
    if count != reference:
        return _result("token_count", False, resp,
                       "the fixed prompt now counts %d tokens, the reference is %d: the tokenizer changed (a patch "
                       "that touched more than truncation, or a different checkpoint revision)" % (count, reference),
                       "wrong_answer", prompt_tokens=count, reference=reference)
    return _result("token_count", True, resp, "%d prompt tokens, as recorded" % count,
                   prompt_tokens=count, reference=reference)


def run_checks(client, model, checks, spec):
    """Run the requested checks in a fixed order; text first, so the image check knows whether text works."""
    results = []
    text_ok = None
    if "text" in checks:
        text = dict(spec["text"])
        served = client.tokenize_count(model, [{"role": "user", "content": "x"}])[1]
        if served and text["max_tokens"] > served - 256:
            # The text check is about reasoning and answer, not the context: keep its budget inside what the
            # replica serves (vLLM before 0.32 rejects prompt + max_tokens > max_model_len with a 400).
            text["max_tokens"] = max(16, served - 256)
        results.append(check_text(client, model, text))
        text_ok = results[-1]["ok"]
    if "tool_call" in checks:
        results.append(check_tool_call(client, model, spec["tool_call"]))
    if "images" in checks:
        results.append(check_images(client, model, spec["image_count"], spec["image_size"], text_ok,
                                    spec.get("image_processor")))
    if "images_refused" in checks:
        results.append(check_images_refused(client, model))
    if "context" in checks:
        results.extend(check_context(client, model, spec["max_model_len"]))
    if "token_count" in checks:
        results.append(check_token_count(client, model, spec["token_count"]["messages"],
                                         spec["token_count"].get("reference")))
    return results
