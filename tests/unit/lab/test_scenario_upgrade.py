"""lab/scenarios/upgrade/steps.py: the files the upgrade scenario writes into the lab's inventory (the lab hub's
commented-JSON file, the upgrade pins with the registry's digest) and how it reads the server's version."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml

from lab import host, pins, services
from lab.scenarios.upgrade import steps

DIGEST = "sha256:" + "0123456789abcdef" * 4
HUB_TEXT = ("# Written by the lab for this lab run (git-ignored, removed by `python -m lab down`):\n"
            "# the lab hub's endpoint and the commit sha it serves the tiny test model at.\n"
            '{\n "pairserve_hf_endpoint": "http://127.0.0.1:38080",\n'
            ' "pairserve_checkpoint_repo": "pairserve/tiny-qwen3",\n'
            ' "pairserve_checkpoint_revision": "1111111111111111111111111111111111111111",\n'
            ' "pairserve_verify_expectations_file": "/repo/.cache/tiny-model/qwen3-tiny/verification.json"\n}\n')


@pytest.fixture(name="hub_vars")
def fixture_hub_vars(tmp_path, monkeypatch):
    path = tmp_path / "group_vars" / "all" / "lab_hub.yml"
    path.parent.mkdir(parents=True)
    path.write_text(HUB_TEXT)
    monkeypatch.setattr(host, "HUB_VARS", path)
    return path


def test_set_pin_changes_one_value_and_keeps_the_comments_and_the_order(hub_vars):
    steps.set_pin("pairserve_checkpoint_revision", "2222222222222222222222222222222222222222")
    assert hub_vars.read_text() == HUB_TEXT.replace("1111111111111111111111111111111111111111",
                                                    "2222222222222222222222222222222222222222")
    assert [p.name for p in hub_vars.parent.iterdir()] == ["lab_hub.yml"], "a temporary file was left behind"


def test_set_pin_adds_a_variable_the_file_lacks_at_the_end(hub_vars):
    steps.set_pin("pairserve_new_pin", "x")
    assert hub_vars.read_text() == HUB_TEXT.replace('verification.json"\n}\n',
                                                    'verification.json",\n "pairserve_new_pin": "x"\n}\n')


def test_set_pin_reads_comments_anywhere_in_the_file(hub_vars):
    # Every '#' line is a comment, wherever it is; the comments come first in the rewritten file.
    hub_vars.write_text('# one\n{"a": "1",\n# two\n "b": "2"}\n')
    steps.set_pin("b", "3")
    assert hub_vars.read_text() == '# one\n# two\n{\n "a": "1",\n "b": "3"\n}\n'


def test_set_pin_refuses_a_body_that_is_not_json(hub_vars):
    hub_vars.write_text("# comment\npairserve_checkpoint_revision: abc\n")
    with pytest.raises(json.JSONDecodeError):
        steps.set_pin("pairserve_checkpoint_revision", "def")
    assert hub_vars.read_text() == "# comment\npairserve_checkpoint_revision: abc\n"


def test_the_upgrade_pins_are_the_steps_pins_without_comments_and_with_the_digest(tmp_path):
    source = tmp_path / "previous.yml"
    source.write_text('---\n# The starting pins.\npairserve_gpustack_version: "2.2.3"\n'
                      '# a comment between pins\npairserve_vllm_version: "0.25.1"')
    digest_file = tmp_path / "runner-0.25.1.digest"
    digest_file.write_text(DIGEST + "\n")
    assert steps.upgrade_pins_text(source, digest_file) == (
        "# Written by `python -m lab scenario upgrade` from %s (git-ignored, removed by\n"
        "# `python -m lab down`); loaded after pins.yml, so these pins are the lab's now.\n"
        "---\n"
        'pairserve_gpustack_version: "2.2.3"\n'
        'pairserve_vllm_version: "0.25.1"\n'
        'pairserve_runner_image_digest: "%s"\n' % (source, DIGEST))


@pytest.mark.parametrize("step", ["previous", "next"])
def test_the_upgrade_pins_of_the_repositorys_files_name_the_repository_path(tmp_path, step):
    digest_file = tmp_path / "runner.digest"
    digest_file.write_text(DIGEST)
    text = steps.upgrade_pins_text(steps.pins_file(step), digest_file)
    assert text.splitlines()[0] == ("# Written by `python -m lab scenario upgrade` from lab/inventory/upgrade/%s.yml "
                                    "(git-ignored, removed by" % step)
    # What the upgrade suite checks in the lab's inventory: the step's pins and the digest, nothing else.
    assert yaml.safe_load(text) == dict(pins.upgrade(step), pairserve_runner_image_digest=DIGEST)


def test_use_pins_pushes_the_steps_image_and_writes_its_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "STATE", tmp_path / "state")
    monkeypatch.setattr(host, "UPGRADE_PINS", tmp_path / "group_vars" / "all" / "upgrade_pins.yml")
    pushed = []

    def push(image, target, digest_file):
        # As `podman push --digestfile` does: the digest, without a newline.
        pushed.append((image, target, digest_file))
        digest_file.parent.mkdir(parents=True, exist_ok=True)
        digest_file.write_text(DIGEST)
        return DIGEST

    monkeypatch.setattr(services, "registry_start", lambda: pushed.append("started"))
    monkeypatch.setattr(services, "registry_push", push)
    steps.use_pins("next")
    vllm = pins.NEXT["pairserve_vllm_version"]
    digest_file = tmp_path / "state" / ("runner-%s.digest" % vllm)
    assert pushed == ["started", ("localhost/pairserve-vllm-cpu:%s" % vllm, "lab/vllm-cpu:%s" % vllm, digest_file)]
    assert host.UPGRADE_PINS.read_text() == steps.upgrade_pins_text(steps.pins_file("next"), digest_file)
    assert yaml.safe_load(host.UPGRADE_PINS.read_text()) == dict(pins.NEXT, pairserve_runner_image_digest=DIGEST)


class _Version(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802 - the handler's name is http.server's
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture(name="server")
def fixture_server(monkeypatch):
    """A /version endpoint on 127.0.0.1 that answers what the test sets; host.SERVER_URL points at it."""
    handler = type("Handler", (_Version,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(host, "SERVER_URL", "http://127.0.0.1:%d" % httpd.server_address[1])
    yield handler
    httpd.shutdown()
    httpd.server_close()


def test_server_version_drops_the_leading_v(server):
    server.body = json.dumps({"version": "v2.2.3", "git_commit": "abc"}).encode()
    assert steps.server_version() == "2.2.3"
    server.body = json.dumps({"version": "2.3.0"}).encode()
    assert steps.server_version() == "2.3.0"


@pytest.mark.parametrize("body", [b"not json", b'{"other": 1}', b'["v2.2.3"]', b'{"version": null}'])
def test_server_version_is_empty_for_an_answer_without_a_version(server, body):
    server.body = body
    assert steps.server_version() == ""


def test_server_version_is_empty_when_nothing_answers(monkeypatch):
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Version) as httpd:
        port = httpd.server_address[1]
    # The port was just released: nothing listens on it.
    monkeypatch.setattr(host, "SERVER_URL", "http://127.0.0.1:%d" % port)
    assert steps.server_version() == ""
