"""The GPUStack server's URL (filter pairserve.llm.gpustack_url): HTTPS on the front's port when the server has a
certificate, plain HTTP on GPUStack's port otherwise; IPv6 in brackets; a bad address or port refused by name."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.gpustack_url import gpustack_url


@pytest.mark.parametrize("args,url", [
    (("192.0.2.10", 30080, 30443, False), "http://192.0.2.10:30080"),
    (("192.0.2.10", 30080, 30443, True), "https://192.0.2.10:30443"),
    (("node-a.example", "30080", "8443", True), "https://node-a.example:8443"),
    (("2001:db8::10", 30080, 30443, True), "https://[2001:db8::10]:30443"),
    (("[2001:db8::10]", 30080, 30443, False), "http://[2001:db8::10]:30080"),
])
def test_the_url_follows_the_certificate(args, url):
    assert gpustack_url(*args) == url


@pytest.mark.parametrize("args,words", [
    (("", 30080, 30443, False), "pairserve_gpustack_server_address"),
    (("http://node-a", 30080, 30443, False), "pairserve_gpustack_server_address"),
    (("node-a", 0, 30443, False), "pairserve_gpustack_api_port"),
    (("node-a", 30080, "x", True), "pairserve_gpustack_tls_port"),
    (("node-a", 30080, 70000, True), "pairserve_gpustack_tls_port"),
])
def test_a_bad_address_or_port_is_named(args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        gpustack_url(*args)
