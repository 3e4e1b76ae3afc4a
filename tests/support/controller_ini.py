"""The controller configuration's replica sections as the tests write them: the lab's two replicas with their
measured prefill and decode rates and the static weights 58/42 (tests/unit/roles/test_controller.py and
test_controller_role.py build their INI files on it)."""

REPLICA_SECTIONS = """[replica qwen-node-a]
prefill_tps = 2767
decode_tps = 275
static_weight = 58

[replica qwen-node-b]
prefill_tps = 1823
decode_tps = 220
static_weight = 42
"""
