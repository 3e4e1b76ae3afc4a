#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measure how long an OpenAI-compatible route does not answer, across a restart."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: route_downtime
short_description: Measure how long a GPUStack route does not answer while something restarts
description:
  - Sends one small chat completion (one token, temperature 0) through the route every O(interval) seconds and
    records each window in which none succeeded, from the start of its first failed request to the end of the
    next successful one (so a window is never shorter than the gap; it can be longer by one interval and one
    request).
  - Meant to run in the background (C(async), C(poll=0)) right before a restart, and to be read with
    C(ansible.builtin.async_status) after it. It ends by itself once the route has answered O(settle) times in a
    row after a window, when O(stop_file) appears (it removes it; during a window it first waits up to
    O(stop_grace) seconds for the route to answer again), or after O(max_seconds).
  - C(playbooks/upgrade.yml) runs it around the GPUStack server's restart and prints the figure (every request
    goes through that one server, so its restart is the route's one gap).
  - Sends requests only; changes nothing (C(changed) is always false).
version_added: 0.1.0
author:
  - pairserve.llm maintainers (@pairserve)
extends_documentation_fragment:
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
options:
  base_url:
    description:
      - Root URL of the OpenAI-compatible API, without C(/v1) (the GPUStack server).
      - C(module_defaults) for C(group/pairserve.llm.openai) sets it (with O(api_key)) once per play.
    type: str
    required: true
  api_key:
    description: Bearer token of the requests (a GPUStack inference API key).
    type: str
  model:
    description: The route name the requests ask for.
    type: str
    required: true
  interval:
    description: Seconds from the start of one request to the start of the next (at least 0.1).
    type: float
    default: 0.5
  request_timeout:
    description: Seconds one request may take before it counts as failed.
    type: float
    default: 10
  max_seconds:
    description: Seconds after which the measurement ends whatever the route does.
    type: int
    default: 900
  settle:
    description:
      - Successful requests in a row after a window that end the measurement.
      - V(0) never ends it on recovery, which makes it a watch that runs until O(stop_file) or O(max_seconds) (the
        maintenance plays watch the route this way while a node is drained, reading O(status_file) between their steps).
    type: int
    default: 3
  status_file:
    description:
      - A path where the figures so far (the RETURN values, an open window counted up to the last request and marked
        C(open), C(ended_by) C(running)) are written after every request, atomically (a new file renamed over the old,
        mode 0600), so that another task can read them while the module runs in the background. Left in place at
        the end with the final figures.
    type: path
  stop_grace:
    description:
      - Seconds a measurement told to stop (O(stop_file)) while the route does not answer keeps going, so that the
        gap is measured to its end (a server that answers its health check may take a moment more for routes).
    type: float
    default: 120
  stop_file:
    description:
      - A path whose appearance ends the measurement (checked after each request); the module removes it. A stale one
        from an earlier, interrupted run is removed when the module starts.
    type: path
  validate_certs:
    description:
      - Verify the server's TLS certificate (HTTPS URLs), against O(ca_path) when it is set, else against the system
        trust store. For a private CA give it in O(ca_path).
      - A certificate that cannot be verified fails the module at once; it is not counted as downtime.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate; the system trust store when not set. Ignored for
        V(http://) URLs and with O(validate_certs=false), but a path given must be a readable PEM file either way.
      - With it only the CAs of that file are trusted, as with O(ansible.builtin.uri#module:ca_path).
    type: path
"""

EXAMPLES = r"""
- name: Measure the route's gap while the server restarts
  pairserve.llm.route_downtime:
    base_url: http://127.0.0.1:30080
    api_key: "{{ pairserve_gpustack_inference_key }}"
    model: qwen
    stop_file: /run/pairserve-route-downtime.stop
  async: 1200
  poll: 0
  register: probe

- name: Restart the server
  ansible.builtin.systemd_service:
    name: gpustack-server
    state: restarted

- name: End the measurement
  ansible.builtin.file:
    path: /run/pairserve-route-downtime.stop
    state: touch
    mode: "0600"

- name: Read it
  ansible.builtin.async_status:
    jid: "{{ probe.ansible_job_id }}"
  register: downtime
  until: downtime.finished
  retries: 30
  delay: 1
"""

RETURN = r"""
unavailable_s:
  description: Seconds in which no request through the route succeeded (the sum of RV(windows)).
  type: float
  returned: always
  sample: 14.2
longest_s:
  description: The longest window, in seconds.
  type: float
  returned: always
  sample: 14.2
windows:
  description: Each window without a successful request.
  type: list
  elements: dict
  returned: always
  contains:
    start:
      description: Epoch seconds at the start of the window's first failed request.
      type: float
    open:
      description: Present (true) on a window still open when the figures were taken.
      type: bool
    end:
      description: Epoch seconds at the end of the request that succeeded again (or at the end of the measurement).
      type: float
    seconds:
      description: Its length.
      type: float
    failed_requests:
      description: Requests that failed in it.
      type: int
    first_error:
      description: What the first of them got (status and message, or the connection error).
      type: str
recovered:
  description: False when the route still did not answer when the measurement ended.
  type: bool
  returned: always
failing_s:
  description: Seconds the open window has lasted (0 when the route answers).
  type: float
  returned: always
details:
  description: The windows (UTC times, failed requests, the first error) and the counts, as the end of a sentence.
  type: str
  returned: always
  sample: " (10:02:11Z-10:02:25Z, 28 failed, first: unreachable: [Errno 111] Connection refused); 28 of 41 requests failed."
ended_by:
  description: C(recovered), C(stopped) (O(stop_file), and the route answered or O(stop_grace) ran out) or C(max_seconds).
  type: str
  returned: always
requests:
  description: Requests sent.
  type: int
  returned: always
failed_requests:
  description: Requests that failed.
  type: int
  returned: always
duration_s:
  description: Seconds the measurement ran.
  type: float
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils import _files, downtime
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import classify
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import CaPathError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str", required=True),
            interval=dict(type="float", default=0.5),
            request_timeout=dict(type="float", default=10.0),
            max_seconds=dict(type="int", default=900),
            settle=dict(type="int", default=3),
            stop_file=dict(type="path"),
            status_file=dict(type="path"),
            stop_grace=dict(type="float", default=120.0),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["interval"] < 0.1 or p["request_timeout"] <= 0 or p["max_seconds"] < 1 or p["settle"] < 0 \
            or p["stop_grace"] < 0:
        module.fail_json(msg="interval must be at least 0.1, request_timeout above 0, max_seconds at least 1, settle "
                             "and stop_grace not negative (got %s, %s, %s, %s, %s)"
                             % (p["interval"], p["request_timeout"], p["max_seconds"], p["settle"], p["stop_grace"]))
    stop_file = p["stop_file"]
    if stop_file and os.path.lexists(stop_file):
        os.unlink(stop_file)  # an earlier run's, never read: it must not end this one
    try:
        client = Client(p["base_url"], p["api_key"], timeout=p["request_timeout"],
                        validate_certs=p["validate_certs"], tokenize_url="", ca_path=p["ca_path"])
    except CaPathError as err:
        module.fail_json(msg=str(err))
    payload = {"model": p["model"], "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 1,
               "temperature": 0}

    def attempt():
        resp = client.chat(payload)
        if resp.ok:
            return None
        if (resp.error or "").startswith("tls:"):
            # Not downtime: the server answers and is not trusted, and waiting will not change that.
            module.fail_json(msg="route_downtime cannot measure %s: %s"
                                 % (p["base_url"], classify(resp)[1]))
        return "HTTP %s: %s" % (resp.status, resp.error_message()[:200]) if resp.status else resp.error

    def stop():
        if stop_file and os.path.lexists(stop_file):
            os.unlink(stop_file)
            return True
        return False

    status_file = p["status_file"]

    def progress(figures):
        # a new file renamed over the old: a reader never sees half of it
        _files.atomic_write(status_file, json.dumps(dict(figures, details=downtime.details(figures))), mode=0o600)

    figures = downtime.measure(attempt, interval=p["interval"], max_seconds=p["max_seconds"], settle=p["settle"],
                               stop=stop, stop_grace=p["stop_grace"], progress=progress if status_file else None)
    if status_file:
        progress(figures)
    module.exit_json(changed=False, details=downtime.details(figures), **figures)


if __name__ == "__main__":
    main()
