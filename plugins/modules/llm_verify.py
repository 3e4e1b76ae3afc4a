#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify an OpenAI-compatible LLM endpoint with real requests and classify what fails."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_verify
short_description: Prove an LLM route or replica answers real requests, and say why when it does not
description:
  - Sends real chat completions to an OpenAI-compatible endpoint (a GPUStack route, with O(model) set to the
    route name, or one vLLM replica directly) and checks the answers, the way the application uses them.
  - "Checks: V(text) (an answer and a reasoning with O(text.reasoning_effort), enough O(text.max_tokens) for the
    reasoning budget); V(tool_call) (a tool schema must give a parsed C(tool_calls) entry); V(images) (O(image_count)
    fresh random PNGs built at run time, never cached, past the 2,048 image tokens of the seed's tokenizer
    truncation, must answer 200, and the server must count exactly the image tokens that O(image_processor) gives;
    a control request below 2,048 follows, pass or fail); V(images_refused) (the text profile's side: one fresh image
    must get vLLM's refusal, since the replica runs without its vision tower); V(context) (a prompt just inside
    O(max_model_len) must answer 200 and one past it must get vLLM's 400); V(token_count) (C(usage.prompt_tokens) of
    a fixed prompt must equal O(token_count.reference))."
  - With expected answers (O(text.expect_content), O(text.expect_reasoning), O(tool_call.expect_name),
    O(tool_call.expect_arguments)) the answers must match exactly after C(str.strip) at temperature 0 - the mode for a
    deterministic test model. Without them the structure is checked (non-empty reasoning, known tool name, JSON
    arguments with the required keys) - the mode for the real model.
  - Long prompts are built to a token target with the server's own tokenizer (vLLM's C(/tokenize) at
    O(tokenize_url); without it, C(usage.prompt_tokens) of one-token requests), not guessed from characters.
  - Every failure gets a class. Permanent ones (C(context_limit), C(tokenizer_truncation), C(tools_disabled),
    C(bad_request), C(server_error), C(wrong_answer), C(config), C(auth), C(tls) for a server certificate that
    cannot be verified) will not pass by waiting; transient ones
    (C(not_ready) for 404, C(unavailable) for 502/503/504, C(unreachable), C(timeout)) may during a cold start.
    A vLLM 400 wrapped in a 503 by a proxy is still classified as the 400 it is.
  - When O(boot_log), O(boot_log_path) or O(gpustack) with O(instances) is given, the replica's boot log is parsed
    (C(KV cache size), C(Maximum concurrency), KV failures) and the module fails when the profile's context cannot
    be served at least once, naming the setting to change.
  - On failure the message lists the replica and check, the failure class and what to do, and - with O(gpustack)
    and O(instances) - each instance's state and the tail of its log from the GPUStack API.
version_added: 0.1.0
author:
  - pairserve.llm maintainers (@pairserve)
extends_documentation_fragment:
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
options:
  base_url:
    description:
      - Root URL of the OpenAI-compatible API, without C(/v1). For GPUStack, the server URL; for a replica, C(http://host:port).
      - C(module_defaults) for C(group/pairserve.llm.openai) sets it (with O(api_key)) once per play.
    type: str
    required: true
  api_key:
    description: Bearer token for the API (a GPUStack inference API key). Omit for a replica without a key.
    type: str
  model:
    description: The C(model) of every request - the GPUStack route name, or the served model name of a replica.
    type: str
    required: true
  name:
    description: Label of the target in results and messages (a replica or route name). Defaults to O(model).
    type: str
  checks:
    description: Checks to run, always in the order text, tool_call, images, images_refused, context, token_count.
    type: list
    elements: str
    choices: [text, tool_call, images, images_refused, context, token_count]
    default: [text, tool_call, context, token_count]
  max_model_len:
    description:
      - The profile's context length, in tokens. Required for the V(context) check and for judging the boot log.
    type: int
  text:
    description: The text check.
    type: dict
    default: {}
    suboptions:
      messages:
        description: Chat messages. The default asks for the verification phrase.
        type: list
        elements: dict
      max_tokens:
        description:
          - Completion budget; must leave room for the reasoning (the seed sends reasoning_effort medium).
          - Lowered to O(max_model_len) - 256 when the context is smaller, because vLLM before 0.32 rejects a request
            whose prompt plus C(max_tokens) exceeds the context.
        type: int
        default: 4096
      reasoning_effort:
        description: Sent as C(reasoning_effort). An empty string leaves it out.
        type: str
        default: medium
      expect_content:
        description: Exact expected answer (compared after strip). Omit to check only that it is non-empty.
        type: str
      expect_reasoning:
        description: Exact expected reasoning (compared after strip). Omit to check only that it is non-empty.
        type: str
  tool_call:
    description: The tool-call check.
    type: dict
    default: {}
    suboptions:
      messages:
        description: Chat messages. The default asks for the weather in Paris.
        type: list
        elements: dict
      tools:
        description: OpenAI tool schemas. The default is one C(get_weather(city)) function.
        type: list
        elements: dict
      max_tokens:
        description: Completion budget.
        type: int
        default: 1024
      expect_name:
        description: Exact expected function name.
        type: str
      expect_arguments:
        description: Exact expected arguments (the parsed JSON object).
        type: dict
  token_count:
    description: The token-count check.
    type: dict
    default: {}
    suboptions:
      messages:
        description: The fixed prompt. The default is the text check's default prompt.
        type: list
        elements: dict
      reference:
        description:
          - Recorded C(usage.prompt_tokens) of that prompt. Without it the count is recorded in the result, not checked.
        type: int
  image_count:
    description:
      - Fresh random frames in the V(images) request (the seed's camera requests send ten to sixteen).
      - Their image tokens (O(image_size) and O(image_processor) decide how many a frame makes) must be past the
        2,048 tokens of the seed's tokenizer truncation, or the check could pass on a broken checkpoint - the module
        refuses a smaller request before sending anything.
    type: int
    default: 12
  image_size:
    description:
      - Width and height of each random PNG, in pixels. 448 x 448 makes 196 image tokens with 16-pixel patches
        (Qwen3-VL, Qwen3.5) and 256 with 14-pixel patches (Qwen2.5-VL).
    type: int
    default: 448
  image_processor:
    description:
      - The checkpoint's C(preprocessor_config.json) (its C(patch_size), C(merge_size) and pixel bounds, as
        C(min_pixels)/C(max_pixels) or C(size.shortest_edge)/C(size.longest_edge)), to count the image tokens of a
        frame as the server's processor does. Omitted, the geometry of the Qwen3-VL / Qwen3.5 family (16-pixel
        patches, 2 x 2 merge) is used.
    type: dict
  tokenize_url:
    description:
      - URL of vLLM's C(/tokenize) for counting prompt tokens. Defaults to O(base_url)/tokenize; a GPUStack route does
        not proxy it, so give a replica's address or an empty string to count through C(usage.prompt_tokens).
    type: str
  timeout:
    description: Seconds to wait for one response (a near-limit prompt on a cold replica takes a while).
    type: float
    default: 600
  validate_certs:
    description:
      - Verify the TLS certificates of O(base_url), O(tokenize_url) and O(gpustack.api_url), against O(ca_path) when
        it is set, else against the system trust store. For a private CA give it in O(ca_path).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate; the system trust store when not set. Ignored for
        V(http://) URLs and with O(validate_certs=false), but a path given must be a readable PEM file either way.
      - With it only the CAs of that file are trusted, as with O(ansible.builtin.uri#module:ca_path).
      - The same file verifies O(base_url), O(tokenize_url) and O(gpustack.api_url).
    type: path
  boot_log:
    description: The replica's boot log text, to judge whether the profile's context can be served.
    type: str
  boot_log_path:
    description: A file with the replica's boot log (read line by line, any size).
    type: path
  gpustack:
    description:
      - GPUStack connection, to read instance logs for the boot-log check and the failure diagnosis.
    type: dict
    suboptions:
      api_url:
        description: GPUStack server URL.
        type: str
        required: true
      api_key:
        description: A GPUStack API key allowed to read model instances.
        type: str
        required: true
      log_tail_lines:
        description: Log lines of each instance shown when a check fails.
        type: int
        default: 40
  instances:
    description:
      - The replica's model instances as gathered by M(pairserve.llm.gpustack_info) (C(id), C(name), C(state),
        C(state_message), C(worker_name), C(worker_id), C(worker_ip), C(port)), for the diagnosis.
      - On a failure with O(gpustack) given, the diagnosis first names each node that cannot serve its instance,
        with the address tried - its worker's C(/healthz) (GPUStack reaches a replica only through the worker of its
        node) or the replica's own C(/health) - before the HTTP reason; an instance whose worker does not answer is
        not shown as running.
    type: list
    elements: dict
    default: []
notes:
  - The image check is proved in both directions against a real vLLM 0.25.1 (its CPU build) serving a tiny
    Qwen2.5-VL checkpoint - it fails as C(tokenizer_truncation) with the seed's unpatched tokenizer files and passes,
    with the exact image-token count, after M(pairserve.llm.tokenizer_patch) and a restart - and V(images_refused)
    against the same checkpoint served with C(--language-model-only). What it cannot prove there is the real
    checkpoint's processor geometry, so give its C(preprocessor_config.json) as O(image_processor); a wrong geometry
    fails the exact count (class C(config)).
seealso:
  - module: pairserve.llm.llm_bench
  - module: pairserve.llm.gpustack_info
"""

EXAMPLES = r"""
- name: Verify the route with a deterministic test model's expected answers
  pairserve.llm.llm_verify:
    base_url: http://gpustack.example:80
    api_key: "{{ pairserve_inference_api_key }}"
    model: qwen
    max_model_len: 65536
    checks: [text, tool_call, images, context, token_count]
    text:
      expect_content: The pair is ready.
      expect_reasoning: verification
    tool_call:
      expect_name: get_weather
      expect_arguments: {city: Paris}
    token_count:
      reference: 14

- name: Verify one replica directly, judging its boot log
  pairserve.llm.llm_verify:
    base_url: http://10.0.0.11:40001
    model: qwen-node-a
    max_model_len: 98304
    boot_log_path: /var/log/pairserve/qwen-node-a.log
"""

RETURN = r"""
checks:
  description: One entry per check, in the order run.
  returned: always
  type: list
  elements: dict
  sample:
    - check: text
      ok: true
      status: 200
      class: null
      permanent: null
      message: answer and reasoning present
      content: The pair is ready.
      reasoning: verification
failed_checks:
  description: Names of the checks that failed.
  returned: always
  type: list
  elements: str
  sample: [tool_call]
boot:
  description: Facts parsed from the boot log (KV cache tokens, maximum concurrency, CUDA graph modes, KV errors).
  returned: when a boot log was read
  type: dict
  sample: {kv_cache_tokens: 262144, max_concurrency: 4.0, concurrency_tokens_per_request: 65536}
boot_problems:
  description: Why the profile's context cannot be served, from the boot log, each with the setting to change.
  returned: always
  type: list
  elements: str
  sample: []
diagnosis:
  description: The failure report a person reads (also the failure message).
  returned: always
  type: str
  sample: "[qwen] check images failed (HTTP 400, permanent: tokenizer_truncation): ..."
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens
from ansible_collections.pairserve.llm.plugins.module_utils import vllm_log
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client
from ansible_collections.pairserve.llm.plugins.module_utils._openai_prompts import WEATHER_TOOL
from ansible_collections.pairserve.llm.plugins.module_utils._verify_checks import run_checks
from ansible_collections.pairserve.llm.plugins.module_utils._verify_diagnosis import diagnosis, probes, with_reach
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import CaPathError

DEFAULT_TEXT_PROMPT = [{"role": "user", "content": "Say the verification phrase."}]
DEFAULT_TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]


def _instance_logs(module, client, instances, tail):
    """Read each instance's log tail from GPUStack (GET /v2/model-instances/{id}/logs?tail=N)."""
    out = []
    for inst in instances:
        entry = dict(inst)
        if inst.get("id") is not None:
            resp = client.request("%s/v2/model-instances/%s/logs?tail=%d" % (client.base_url, inst["id"], tail),
                                  timeout=30)
            entry["log_tail"] = resp.text if resp.ok else "(log not available: HTTP %s %s)" % (
                resp.status, resp.error_message()[:200])
        out.append(entry)
    return out


def _reachability(gp_client, instances, timeout=5):
    """Each instance with ``reach``: whether its worker's /healthz and the replica's /health answer from here (the
    Ansible controller, which the node firewall lets through), the node-first part of a failure's diagnosis. What
    to ask and how an answer reads are _verify_diagnosis's (probes, with_reach), as for the verify role's check."""
    resp = gp_client.request("%s/v2/workers?page=1&perPage=100" % gp_client.base_url, timeout=30)
    workers = resp.body.get("items", []) if resp.ok and isinstance(resp.body, dict) else []
    answers = {}
    for probe in probes(instances, workers):
        url = probe["url"]
        if url not in answers:
            got = Client(url, None, timeout, validate_certs=False).request(url, timeout=timeout)
            answers[url] = (got.status, got.error)
    return with_reach(instances, workers, answers)


def _boot_facts(module, gp_client, instances):
    params = module.params
    if params["boot_log"] is not None:
        return vllm_log.parse_boot_log(params["boot_log"])
    if params["boot_log_path"]:
        path = params["boot_log_path"]
        if not os.path.isfile(path):
            module.fail_json(msg="boot_log_path %s does not exist: give the replica's boot log file, or leave "
                                 "boot_log_path out to skip the boot-log check." % path)
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return vllm_log.parse_boot_log(handle)
    if gp_client is not None and instances and instances[0].get("id") is not None:
        # Streamed line by line: a long-running replica's log can be gigabytes.
        url = "%s/v2/model-instances/%s/logs" % (gp_client.base_url, instances[0]["id"])
        handle, failure = gp_client.open(url, timeout=60)
        if failure is not None:
            module.warn("could not read the boot log of instance %s from GPUStack (HTTP %s %s); the boot-log "
                        "check is skipped" % (instances[0].get("name"), failure.status, failure.error_message()[:200]))
            return None
        try:
            return vllm_log.parse_boot_log(line.decode("utf-8", "replace") for line in handle)
        finally:
            handle.close()
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str", required=True),
            name=dict(type="str"),
            checks=dict(type="list", elements="str", default=["text", "tool_call", "context", "token_count"],
                        choices=["text", "tool_call", "images", "images_refused", "context", "token_count"]),
            max_model_len=dict(type="int"),
            text=dict(type="dict", default={}, options=dict(
                messages=dict(type="list", elements="dict"),
                max_tokens=dict(type="int", default=4096, no_log=False),
                reasoning_effort=dict(type="str", default="medium"),
                expect_content=dict(type="str"),
                expect_reasoning=dict(type="str"),
            )),
            tool_call=dict(type="dict", default={}, options=dict(
                messages=dict(type="list", elements="dict"),
                tools=dict(type="list", elements="dict"),
                max_tokens=dict(type="int", default=1024, no_log=False),
                expect_name=dict(type="str"),
                expect_arguments=dict(type="dict"),
            )),
            token_count=dict(type="dict", default={}, options=dict(
                messages=dict(type="list", elements="dict"),
                reference=dict(type="int"),
            )),
            image_count=dict(type="int", default=12),
            image_size=dict(type="int", default=448),
            image_processor=dict(type="dict"),
            tokenize_url=dict(type="str", no_log=False),
            timeout=dict(type="float", default=600),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            boot_log=dict(type="str"),
            boot_log_path=dict(type="path"),
            gpustack=dict(type="dict", options=dict(
                api_url=dict(type="str", required=True),
                api_key=dict(type="str", required=True, no_log=True),
                log_tail_lines=dict(type="int", default=40),
            )),
            instances=dict(type="list", elements="dict", default=[]),
        ),
        mutually_exclusive=[("boot_log", "boot_log_path")],
        supports_check_mode=True,
    )
    params = module.params
    target = params["name"] or params["model"]
    checks = params["checks"]

    # Bad input fails before any request is sent.
    if "context" in checks and not params["max_model_len"]:
        module.fail_json(msg="the context check needs max_model_len (the profile's context length in tokens); give "
                             "max_model_len or remove 'context' from checks.")
    if params["max_model_len"] is not None and params["max_model_len"] < 64:
        module.fail_json(msg="max_model_len %d is not a usable context length; give the profile's --max-model-len."
                             % params["max_model_len"])
    if params["image_count"] < 1 or params["image_size"] < 8:
        module.fail_json(msg="image_count must be >= 1 and image_size >= 8 (got %d and %d)."
                             % (params["image_count"], params["image_size"]))
    if "images" in checks:
        try:
            per_frame = vl_tokens.image_tokens(params["image_size"], params["image_size"],
                                               vl_tokens.geometry(params["image_processor"]))
        except vl_tokens.GeometryError as err:
            module.fail_json(msg="image_processor: %s; give the checkpoint's preprocessor_config.json." % err)
        if per_frame * params["image_count"] <= vl_tokens.SEED_TRUNCATION:
            module.fail_json(msg="the image check would send %d frames of %dx%d = %d image tokens, not past the %d "
                                 "tokens of the seed's tokenizer truncation: it would pass on a checkpoint that still "
                                 "truncates. Raise image_count (at least %d) or image_size."
                                 % (params["image_count"], params["image_size"], params["image_size"],
                                    per_frame * params["image_count"], vl_tokens.SEED_TRUNCATION,
                                    vl_tokens.SEED_TRUNCATION // per_frame + 1))
    if params["text"]["max_tokens"] < 16:
        module.fail_json(msg="text.max_tokens %d leaves no room for reasoning: the seed sends reasoning_effort "
                             "medium with a budget of thousands of tokens." % params["text"]["max_tokens"])

    text = dict(params["text"])
    text["messages"] = text["messages"] or DEFAULT_TEXT_PROMPT
    if params["max_model_len"] and text["max_tokens"] > params["max_model_len"] - 256:
        # vLLM before 0.32 rejects prompt + max_tokens > max_model_len with a 400 instead of clamping: keep the
        # budget inside a small context (the short verification prompt needs far less than 256 tokens).
        text["max_tokens"] = max(16, params["max_model_len"] - 256)
    tool = dict(params["tool_call"])
    tool["messages"] = tool["messages"] or DEFAULT_TOOL_PROMPT
    tool["tools"] = tool["tools"] or [WEATHER_TOOL]
    for index, schema in enumerate(tool["tools"]):
        if not isinstance(schema.get("function"), dict) or not schema["function"].get("name"):
            module.fail_json(msg="tool_call.tools[%d] is not an OpenAI tool schema: it needs "
                                 "{type: function, function: {name, description, parameters}}." % index)
    tokens = dict(params["token_count"])
    tokens["messages"] = tokens["messages"] or text["messages"]
    spec = {"text": text, "tool_call": tool, "token_count": tokens, "max_model_len": params["max_model_len"],
            "image_count": params["image_count"], "image_size": params["image_size"],
            "image_processor": params["image_processor"]}

    try:
        client = Client(params["base_url"], params["api_key"], params["timeout"], params["validate_certs"],
                        params["tokenize_url"], ca_path=params["ca_path"])
        gp_client = None
        if params["gpustack"]:
            gp_client = Client(params["gpustack"]["api_url"], params["gpustack"]["api_key"], 60,
                               params["validate_certs"], ca_path=params["ca_path"])
    except CaPathError as err:
        module.fail_json(msg=str(err))

    boot = _boot_facts(module, gp_client, params["instances"])
    boot_problems = []
    if boot is not None and params["max_model_len"]:
        boot_problems = vllm_log.assess_context(boot, params["max_model_len"], target)

    # Requests only read: they run in check mode too, so --check still proves the service answers.
    results = run_checks(client, params["model"], checks, spec)
    failed = [r["check"] for r in results if not r["ok"]]

    result = dict(changed=False, checks=results, failed_checks=failed, boot_problems=boot_problems, diagnosis="")
    if boot is not None:
        result["boot"] = boot
    if failed or boot_problems:
        instances = params["instances"]
        if gp_client is not None and instances:
            instances = _instance_logs(module, gp_client, instances, params["gpustack"]["log_tail_lines"])
            instances = _reachability(gp_client, instances)
        result["diagnosis"] = diagnosis(target, results, instances, boot_problems)
        module.fail_json(msg="verification of %s failed:\n%s" % (target, result["diagnosis"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
