"""Filter pairserve.llm.role_defaults through real Ansible: what the validation play, the held-ports preflight, the
backup role and the firewall read another role's defaults by; a bad role is an Ansible error naming it. And the
firewall reads the ports it opens from the roles that own them: the worker's metrics port as the inventory sets it,
else the worker role's default."""

from __future__ import annotations

from support.ansible_runner import run_local_play


def test_the_filter_gives_a_roles_defaults_and_names_a_bad_role(tmp_path):
    res = run_local_play(tmp_path, "defaults", [
        {"name": "Read", "ansible.builtin.set_fact": {
            "port": "{{ ('gpustack_worker' | pairserve.llm.role_defaults).pairserve_gpustack_worker_metrics_port }}",
            "some": "{{ 'pairserve.llm.gpustack_server' | pairserve.llm.role_defaults(['pairserve_gpustack_tls_cert']) }}"}},
        {"name": "Bad", "ansible.builtin.debug": {"msg": "{{ 'nope' | pairserve.llm.role_defaults }}"}}])
    assert res.by_task["Read"]["ansible_facts"] == {"port": 10151, "some": {"pairserve_gpustack_tls_cert": ""}}
    assert res.rc != 0
    assert "pairserve.llm.role_defaults: role 'nope' has no defaults file" in res.by_task["Bad"]["msg"]
