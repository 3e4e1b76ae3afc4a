"""The maintenance role's plan step as the unit tests feed it (tests/unit/roles/test_maintenance_*.py): node-a
(the host of the play, "localhost") drained from route qwen, node-b's worker and replica at local ports that stand
in for them."""

from __future__ import annotations

PLAN_TASK = {"name": "Plan the drain", "ansible.builtin.include_role": {
    "name": "pairserve.llm.maintenance", "tasks_from": "plan"}}


def plan_vars(worker_port: int, replica_port: int, node_a_state: str = "running", **extra) -> dict:
    """The play's variables: GPUStack's view of node-a (pairserve_maintenance_view), the server's records
    (_pairserve_maintenance_info) with node-b at the given ports, and the plan's other inputs; `extra` on top."""
    view = {"models": [{"name": "qwen-node-a"}],
            "routes": [{"name": "qwen", "id": 1, "targets": [
                {"id": 11, "model": "qwen-node-a", "weight": 58, "fallback_status_codes": None},
                {"id": 12, "model": "qwen-node-b", "weight": 42, "fallback_status_codes": None}]}]}
    info = {"workers": [{"id": 1, "name": "node-a", "ip": "127.0.0.1", "port": 1},
                        {"id": 2, "name": "node-b", "ip": "127.0.0.1", "port": worker_port}],
            "model_instances": [
                {"name": "qwen-node-a-x", "model_name": "qwen-node-a", "state": node_a_state, "worker_id": 1,
                 "worker_name": "node-a", "worker_ip": "127.0.0.1", "port": 2},
                {"name": "qwen-node-b-y", "model_name": "qwen-node-b", "state": "running", "worker_id": 2,
                 "worker_name": "node-b", "worker_ip": "127.0.0.1", "port": replica_port}]}
    return {"pairserve_maintenance_view": view, "_pairserve_maintenance_info": info,
            "pairserve_maintenance_new_names": ["qwen-node-a"], "pairserve_maintenance_server": "localhost",
            "pairserve_route_weights": {"localhost": 58}, **extra}
