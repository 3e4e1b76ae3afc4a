# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options of every pairserve.llm module that talks to the GPUStack REST API."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Options consumed by plugins/module_utils/gpustack.py."""

    DOCUMENTATION = r"""
options:
  api_url:
    description:
      - Base URL of the GPUStack server's API port, for example V(http://node-a:30080).
      - A trailing V(/v2) is accepted and ignored.
      - If not set, the environment variable E(GPUSTACK_API_URL) is used.
      - Every GPUStack module of the collection is in the action group C(pairserve.llm.gpustack), so a play can set
        this and the other connection options once, with C(module_defaults) for C(group/pairserve.llm.gpustack).
    type: str
    required: true
  api_key:
    description:
      - GPUStack API key, sent as a bearer token in the C(Authorization) header.
      - Either O(api_key) or O(password) is required. An API key with scope V(inference) only cannot manage resources.
      - If not set, the environment variable E(GPUSTACK_API_KEY) is used.
    type: str
  username:
    description:
      - User for HTTP Basic authentication, used with O(password) when O(api_key) is not set.
    type: str
    default: admin
  password:
    description:
      - Password for HTTP Basic authentication (the admin bootstrap password).
      - If not set, the environment variable E(GPUSTACK_PASSWORD) is used.
    type: str
  timeout:
    description:
      - Seconds to wait for each HTTP request.
    type: int
    default: 30
  retries:
    description:
      - How many times a request is retried, with exponential backoff (1 s, 2 s, 4 s, ...), on connection
        errors and HTTP 5xx answers.
      - GET, PUT and DELETE are retried on both; a POST only when the connection was refused, so a create is never sent twice.
    type: int
    default: 3
  validate_certs:
    description:
      - Verify the server's TLS certificate, against O(ca_path) when it is set, else against the system trust store.
      - For a server whose certificate a private CA signed, give that CA in O(ca_path) and keep this V(true).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate; the system trust store when not set. Ignored for
        V(http://) URLs and with O(validate_certs=false), but a path given must be a readable PEM file either way.
      - With it only the CAs of that file are trusted, as with O(ansible.builtin.uri#module:ca_path).
    type: path
notes:
  - Errors quote GPUStack's own message and return its HTTP status as RV(ignore:status) and the message as RV(ignore:server_message).
  - Written against GPUStack 2.2.3; see C(docs/gpustack-api.md) in the collection for the quirks the modules encode.
"""
