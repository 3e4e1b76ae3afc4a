"""plugins/plugin_utils/constraints.py and lookup gpustack_constraints: the releases with holds and their Pythons."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.plugin_utils import constraints
from support.ansible_runner import run_local_play


def test_releases_with_holds_and_the_pythons_that_have_their_pins(tmp_path):
    for name in ("gpustack-2.2.3.constraints.txt", "gpustack-2.3.0.constraints.txt", "README.md",
                 "gpustack-2.4.constraints.txt"):  # not an exact release: ignored
        (tmp_path / name).write_text("x\n")
    for minor, releases in (("3.12", ["2.2.3"]), ("3.9", ["2.2.3", "2.3.0"]), ("3.10", ["2.3.0", "9.9.9"])):
        (tmp_path / ("py" + minor)).mkdir()
        for release in releases:
            (tmp_path / ("py" + minor) / ("gpustack-%s.constraints.txt" % release)).write_text("x\n")
    (tmp_path / "pyx.y").mkdir()
    assert constraints.releases(tmp_path) == {"2.2.3": ["3.9", "3.12"], "2.3.0": ["3.9", "3.10"]}
    assert constraints.releases(tmp_path / "missing") == {}


def test_the_lookup_reads_the_collections_own_files(tmp_path):
    res = run_local_play(tmp_path, "constraints", [
        {"name": "Read", "ansible.builtin.debug": {"msg": "{{ lookup('pairserve.llm.gpustack_constraints') }}"}}])
    assert res.rc == 0, res.stdout[-3000:]
    found = res.by_task["Read"]["msg"]
    assert found == constraints.releases()
    # every release the collection pins has its pins for the three node Pythons of the support matrix
    assert found and all(minors == ["3.10", "3.11", "3.12"] for minors in found.values()), found
