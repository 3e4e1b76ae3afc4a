# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One ansible ``urls.Request`` per API client, with one TLS context for the client's life.

``open_url`` builds a new TLS context for every request, and loading the system CA store costs ~40 ms of CPU each
time, ``http://`` URLs included: the bench counted it in every TTFT, and every GPUStack call paid it. Callers pass a
fresh ``http.cookiejar.CookieJar()`` to each ``open()``, so no cookie carries over between calls, as with open_url.
"""

from __future__ import annotations

from ansible.module_utils.urls import Request, make_context


def reusable_request(validate_certs=True):
    """A Request whose TLS context is built once, here, and reused by every ``open()``."""
    return Request(validate_certs=validate_certs, context=make_context(validate_certs=validate_certs))
