# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Everything that can be checked from the inventory alone, before any host is touched.

The validation play (playbooks/validate.yml) gives `problems()` one view per host: the variables below as the
host sees them (secrets reduced to "present or not"). It returns every problem at once, each naming the host and
the variable, so a user fixes the whole inventory in one pass instead of meeting the mistakes one by one after
GPUStack is already installed. The rules that also live elsewhere are imported from their one owner (vLLM
profiles: vllm_args; the seed's replica environment: gpustack).
"""

from __future__ import annotations

import re

from ansible_collections.pairserve.llm.plugins.module_utils import (
    bench_weights,
    container_runtime,
    cuda,
    firewall,
    gpustack_vocabulary,
    host_identity,
    hub,
    routes,
    worker_tools,
)
from ansible_collections.pairserve.llm.plugins.module_utils import replica_names as naming
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import seed_env_conflicts
from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import (
    ANY_CHECKPOINT,
    BUILTIN_PROFILES,
    DEFAULT_VERSION,
    SUPPORTED_VERSIONS,
    VllmArgsError,
    profile_names,
    render,
)

# The verify role's timings (verify runs last, from the server host: a bad value would fail only after everything
# is installed; playbooks/validate.yml reads the verify role's defaults for them, its preflight checks them again).
VERIFY_TIMINGS = ("pairserve_verify_wait_timeout", "pairserve_verify_poll_interval", "pairserve_verify_reach_grace",
                  "pairserve_verify_request_timeout")
# The variables a view carries (playbooks/validate.yml builds it from this list).
VIEW_VARS = host_identity.VARIABLES + (
    "pairserve_lab_mode", "pairserve_gpustack_version", "pairserve_vllm_version", "pairserve_runner_image",
    "pairserve_runner_image_digest", "pairserve_checkpoint_repo", "pairserve_checkpoint_revision",
    "pairserve_serving_mode", "pairserve_route_name", "pairserve_route_weights", "pairserve_model_name",
    "pairserve_replica_profile", "pairserve_profiles", "pairserve_replica_env", "pairserve_gpustack_api_port",
    "pairserve_gpustack_worker_port", "pairserve_gpustack_worker_metrics_port", "pairserve_gpustack_worker_name",
    "pairserve_gpustack_worker_service_port_range", "pairserve_gpustack_worker_ray_port_range",
    "pairserve_firewall_table", "pairserve_firewall_allowed_sources", "pairserve_firewall_scrape_sources",
    "pairserve_firewall_ssh_sources", "pairserve_firewall_ssh_ports", "pairserve_firewall_interfaces",
    "pairserve_preflight_driver_min_for_runner",
    "pairserve_replica_restart", "pairserve_bench_weights_file", "inventory_dir",
    "pairserve_runtime_pause_image", "pairserve_runtime_pause_image_digest", "pairserve_runtime_health_image",
    "pairserve_runtime_health_image_digest", "pairserve_runner_runtime", "pairserve_runner_runtime_host",
    "pairserve_runner_check_runtime_host", "pairserve_gpustack_worker_env", "pairserve_verify_routes", "pairserve_split_routes",
    "pairserve_gpustack_tools_archive", "pairserve_expected_pairs",
) + (
    # the controller's (checked on the server host when it is enabled; playbooks/validate.yml reads the literal
    # defaults of roles/controller, the role's preflight checks the same rule: controller_problems)
    "pairserve_controller_enabled", "pairserve_controller_mode", "pairserve_controller_replicas",
    "pairserve_controller_sleep_replica", "pairserve_controller_min_weight", "pairserve_controller_max_weight",
    "pairserve_controller_min_change", "pairserve_controller_interval", "pairserve_controller_hold",
    "pairserve_controller_horizon", "pairserve_controller_model_name",
) + VERIFY_TIMINGS
# Secrets: the view says only whether each is set (never its value), and the vault variable the example inventory
# reads it from (docs/first-install.md, step 3 creates them).
SECRET_VARS = ("pairserve_gpustack_admin_password", "pairserve_gpustack_db_password")
VAULT_VARS = dict((name, "vault_" + name) for name in SECRET_VARS)
# Variables that may come from the vault: the view says whether each is vaulted and this run cannot decrypt it
# (no --ask-vault-pass), so validation lists that among the other problems instead of stopping at the first use.
VAULTED_VARS = SECRET_VARS + ("pairserve_gpustack_tls_key", "pairserve_hf_token")
# Of those, the ones only the GPUStack server uses: read on the server's hosts alone, so that a value only the server
# can resolve (a key file next to its inventory) never fails the view of another host.
SERVER_VAULTED_VARS = SECRET_VARS + ("pairserve_gpustack_tls_key",)
SECRETS_STEP = "docs/first-install.md, step 3"
SERVING_MODES = ("pooled", "split")
EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+\Z")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
# GPUStack names: letters, digits and dashes (its model and worker names end up in URLs and container names).
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


# Where a copy of inventory/example sets each variable (tests/unit/docs keeps this table true to the example's files).
# A variable not listed here goes to group_vars/all/ (every host) or host_vars/<host>.yml (one host).
FIX_IN = dict(
    [(v, "group_vars/all/pins.yml") for v in (
        "pairserve_gpustack_version", "pairserve_vllm_version", "pairserve_runner_image",
        "pairserve_runner_image_digest", "pairserve_checkpoint_repo", "pairserve_checkpoint_revision",
        "pairserve_runtime_pause_image", "pairserve_runtime_pause_image_digest", "pairserve_runtime_health_image",
        "pairserve_runtime_health_image_digest")]
    + [(v, "group_vars/all/serving.yml") for v in (
        "pairserve_serving_mode", "pairserve_route_name", "pairserve_route_weights", "pairserve_replica_profile",
        "pairserve_profiles", "pairserve_verify_routes", "pairserve_split_routes")]
    + [(v, "group_vars/all/control_plane.yml") for v in (
        "pairserve_gpustack_api_port", "pairserve_gpustack_tools_archive", "pairserve_gpustack_tls_cert",
        "pairserve_gpustack_tls_key", "pairserve_gpustack_tls_ca_file", "pairserve_firewall_allowed_sources",
        "pairserve_lab_mode")]
    + [(v, "group_vars/all/controller.yml") for v in (
        "pairserve_controller_enabled", "pairserve_controller_mode", "pairserve_controller_replicas",
        "pairserve_controller_sleep_replica")]
    + [(v, "group_vars/all/vault.yml (%s)" % SECRETS_STEP) for v in SECRET_VARS]
    + [("groups.gpustack_server", "hosts.yml"), ("groups.gpu_nodes", "hosts.yml")])


def fix_in(variable):
    """Where to fix ``variable`` in a copy of the example inventory."""
    return FIX_IN.get(variable, "group_vars/all/ or host_vars/<host>.yml")


class Problems(list):
    """The list of problems, each {"host", "variable", "problem", "fix", "text"}."""

    def add(self, host, variable, problem):
        self.append({"host": host, "variable": variable, "problem": problem, "fix": fix_in(variable),
                     "text": "%s: %s: %s" % (host, variable, problem)})


def report(found):
    """The validation play's lines: one per problem, ``<hosts>: <variable>: <rule> [fix in: <file>]``.

    The same problem of the same variable on several hosts (a group-wide pin, a placeholder) is one line naming
    every host, in the order the problems came. ``found``: problems as ``problems()`` (or the TLS check) returns
    them; a problem without ``fix`` gets the table's."""
    merged, order = {}, []
    for problem in found:
        key = (problem["variable"], problem["problem"])
        if key not in merged:
            merged[key] = []
            order.append(key)
        if problem["host"] not in merged[key]:
            merged[key].append(problem["host"])
    lines = []
    for variable, problem in order:
        lines.append("%s: %s: %s [fix in: %s]" % (", ".join(merged[(variable, problem)]), variable,
                                                  problem.rstrip(), fix_in(variable)))
    return lines


def _true(value):
    """A boolean as Ansible reads one (`-e pairserve_lab_mode=false` arrives as the string 'false')."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_pins(out, host, view, constraints_versions):
    gs, vllm = view.get("pairserve_gpustack_version"), view.get("pairserve_vllm_version")
    if not isinstance(gs, str) or not EXACT_VERSION.match(gs):
        out.add(host, "pairserve_gpustack_version", "%r is not an exact version such as 2.2.3" % (gs,))
    elif constraints_versions is not None and gs not in constraints_versions:
        out.add(host, "pairserve_gpustack_version", "%s has no constraints file in the collection (it has: %s)"
                % (gs, ", ".join(sorted(constraints_versions)) or "none"))
    if not isinstance(vllm, str) or not EXACT_VERSION.match(vllm):
        out.add(host, "pairserve_vllm_version", "%r is not an exact version such as 0.25.1" % (vllm,))
    elif vllm not in SUPPORTED_VERSIONS:
        out.add(host, "pairserve_vllm_version", "%s: the collection renders vLLM arguments for %s only"
                % (vllm, ", ".join(SUPPORTED_VERSIONS)))
    revision = view.get("pairserve_checkpoint_revision")
    if not isinstance(revision, str) or not hub.COMMIT_RE.match(revision):
        out.add(host, "pairserve_checkpoint_revision", "%r is not a 40-hex commit sha (GPUStack has no revision "
                "field: a branch name would drift)" % (revision,))
    repo = view.get("pairserve_checkpoint_repo")
    if not isinstance(repo, str) or not hub.REPO_ID_RE.match(repo):
        out.add(host, "pairserve_checkpoint_repo", "%r is not a Hugging Face repository id (org/name)" % (repo,))
    image, digest = view.get("pairserve_runner_image"), view.get("pairserve_runner_image_digest")
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        out.add(host, "pairserve_runner_image", "%r is not an image reference" % (image,))
    elif "@" in image:
        out.add(host, "pairserve_runner_image", "%s carries a digest: put it in pairserve_runner_image_digest" % image)
    elif isinstance(vllm, str) and vllm and not image.startswith("localhost/") and vllm not in image:
        # gpustack/runner tags name the vLLM they carry (cuda12.9-vllm0.25.1); a mirror keeps the tag.
        out.add(host, "pairserve_runner_image", "%s does not name the pinned vLLM %s: its replicas would run "
                "another vLLM than the arguments are rendered for" % (image, vllm))
    if isinstance(image, str) and image and "@" not in image:
        # the driver the image needs must be known before anything changes (preflight compares it on the node)
        try:
            cuda.driver_floor(image, view.get("pairserve_preflight_driver_min_for_runner") or "")
        except cuda.CudaError as err:
            out.add(host, err.variable, err.problem)
    if not (isinstance(digest, str) and DIGEST.match(digest)):
        lab_local = _true(view.get("pairserve_lab_mode")) and isinstance(image, str) and image.startswith("localhost/")
        if not lab_local:
            out.add(host, "pairserve_runner_image_digest", "%r is not sha256:<64 hex>: a tag can be re-pushed"
                    % (digest,))


def _check_runtime(out, host, view):
    """gpustack-runtime's pause and health images pinned by digest; the runtime and its endpoint; no runtime setting
    of the collection's in the worker's environment (container_runtime owns their names)."""
    for role in ("pause", "health"):
        var = "pairserve_runtime_%s_image" % role
        image, digest = view.get(var), view.get(var + "_digest")
        if not isinstance(image, str) or not image or any(c.isspace() for c in image):
            out.add(host, var, "%r is not an image reference: pin gpustack-runtime's %s image (e.g. "
                    "docker.io/gpustack/runtime:%s) in group_vars/all/pins.yml; every replica starts a container "
                    "from it" % (image, role, role))
        elif "@" in image:
            out.add(host, var, "%s carries a digest: put it in %s_digest" % (image, var))
        if not (isinstance(digest, str) and DIGEST.match(digest)):
            out.add(host, var + "_digest", "%r is not sha256:<64 hex>: the runtime pulls %s by its floating tag "
                    "otherwise (docs/first-install.md, step 2, finds the digest with docker pull and docker image "
                    "inspect)" % (digest, image if isinstance(image, str) and image else "the image"))
    runtime = view.get("pairserve_runner_runtime") or "docker"
    try:
        container_runtime.endpoint(runtime, view.get("pairserve_runner_runtime_host") or "")
    except container_runtime.ContainerRuntimeError as err:
        variable = "pairserve_runner_runtime" if runtime not in container_runtime.RUNTIMES else "pairserve_runner_runtime_host"
        out.add(host, variable, str(err).split(": ", 1)[-1])
    check_endpoint = view.get("pairserve_runner_check_runtime_host") or ""
    if check_endpoint and runtime in container_runtime.RUNTIMES:
        try:
            container_runtime.endpoint(runtime, check_endpoint)
        except container_runtime.ContainerRuntimeError as err:
            out.add(host, "pairserve_runner_check_runtime_host", str(err).split(": ", 1)[-1])
    env = view.get("pairserve_gpustack_worker_env")
    if env is not None and not isinstance(env, dict):
        out.add(host, "pairserve_gpustack_worker_env", "expected a dict of variable -> value, got %s"
                % type(env).__name__)
    else:
        for problem in container_runtime.owned_env_problems(env):
            out.add(host, "pairserve_gpustack_worker_env", problem)
        for problem in gpustack_vocabulary.worker_env_problems(view.get("pairserve_gpustack_version"), env):
            out.add(host, "pairserve_gpustack_worker_env", problem)


def _check_ports(out, host, view):
    seen = {}
    for var in ("pairserve_gpustack_api_port", "pairserve_gpustack_worker_port",
                "pairserve_gpustack_worker_metrics_port"):
        port = view.get(var)
        if port is None:
            continue
        if not _is_int(port) or not 1 <= port <= 65535:
            out.add(host, var, "%r is not a TCP port (1-65535)" % (port,))
        elif port in seen:
            out.add(host, var, "%d is also %s on this host" % (port, seen[port]))
        else:
            seen[port] = var


def _check_profile(out, host, view, name):
    user_profiles = view.get("pairserve_profiles") or {}
    if not isinstance(user_profiles, dict):
        out.add(host, "pairserve_profiles", "expected a dict of profile name -> settings, got %s"
                % type(user_profiles).__name__)
        user_profiles = {}
    if not isinstance(name, str) or not name:
        out.add(host, "pairserve_replica_profile", "%r is not a profile name" % (name,))
        return
    if name not in profile_names(user_profiles):
        out.add(host, "pairserve_replica_profile", "%r is neither a built-in profile (%s) nor defined in "
                "pairserve_profiles; it would have been rendered as another profile"
                % (name, ", ".join(BUILTIN_PROFILES)))
        return
    profile = dict(user_profiles.get(name) or {}, name=name)
    try:
        # The checkpoint is not downloaded yet (vllm_args.ANY_CHECKPOINT), nor are the cards known.
        render(profile, view.get("pairserve_vllm_version") or DEFAULT_VERSION, checkpoint=ANY_CHECKPOINT)
    except VllmArgsError as exc:
        out.add(host, "pairserve_profiles" if name in user_profiles else "pairserve_replica_profile", str(exc))


def _check_env(out, host, view):
    env = view.get("pairserve_replica_env") or {}
    if not isinstance(env, dict):
        out.add(host, "pairserve_replica_env", "expected a dict of environment variables, got %s"
                % type(env).__name__)
        return
    for conflict in seed_env_conflicts(env):
        out.add(host, "pairserve_replica_env", conflict)


def problems(views, groups, constraints_versions=None):
    """Every problem of the inventory: views {host: {var: value}}, groups {name: [hosts]}."""
    out = Problems()
    servers = list(groups.get("gpustack_server") or [])
    nodes = list(groups.get("gpu_nodes") or [])
    if len(servers) != 1:
        out.add("all", "groups.gpustack_server", "needs exactly one host (has %d: %s)"
                % (len(servers), ", ".join(servers) or "none"))
    if not nodes:
        out.add("all", "groups.gpu_nodes", "needs at least one GPU node")
    for host in sorted(set(servers) | set(nodes)):
        view = views.get(host) or {}
        _check_pins(out, host, view, constraints_versions)
        _check_ports(out, host, view)
        for var in VAULTED_VARS:
            if view.get(var + "_locked"):
                out.add(host, var, "is vaulted, and this run has no vault password to read it: run again with "
                        "--ask-vault-pass (or --vault-password-file FILE)")
    for host in servers:
        view = views.get(host) or {}
        for var in SECRET_VARS:
            if not view.get(var + "_set") and not view.get(var + "_locked"):
                out.add(host, var, "is not set: vault it as %s (ansible-vault encrypt_string --name %s ...)"
                        % (VAULT_VARS[var], VAULT_VARS[var]))
        mode = view.get("pairserve_serving_mode")
        if mode not in SERVING_MODES:
            out.add(host, "pairserve_serving_mode", "%r is not one of %s" % (mode, ", ".join(SERVING_MODES)))
        # The bench (run on this host) writes its measured weights there: the same rule as its own preflight.
        path, problem = bench_weights.weights_file(view.get("pairserve_bench_weights_file"), view.get("inventory_dir"))
        if problem:
            out.add(host, "pairserve_bench_weights_file", problem)
        elif path and mode == "split":
            out.add(host, "pairserve_bench_weights_file", "split mode gives every replica weight 100 and ignores "
                    "pairserve_route_weights: leave it empty")
    # The pins must be the same on every node: one service, one GPUStack, one vLLM.
    for var in ("pairserve_gpustack_version", "pairserve_vllm_version", "pairserve_checkpoint_revision"):
        values = dict((h, (views.get(h) or {}).get(var)) for h in sorted(set(servers) | set(nodes)))
        if len(set(map(str, values.values()))) > 1:
            out.add("all", var, "differs between hosts (%s); pins live in group_vars/all"
                    % ", ".join("%s: %s" % item for item in values.items()))
    replica_names, worker_names, profiles = {}, {}, {}
    for host in nodes:
        view = views.get(host) or {}
        name = view.get("pairserve_replica_profile")
        _check_profile(out, host, view, name)
        _check_env(out, host, view)
        _check_runtime(out, host, view)
        # The worker role stages the tools from it on this node: checked here, before GPUStack is installed.
        archive = view.get(worker_tools.VARIABLE)
        if archive is None:
            archive = worker_tools.default_path(view.get("pairserve_gpustack_version"))
        for problem in worker_tools.problems(archive, view.get("inventory_dir")):
            out.add(host, worker_tools.VARIABLE, problem)
        if view.get("pairserve_replica_restart") not in (None, False):
            # The drained restart's own switch (role maintenance, entry point restart): set for a whole run, every
            # registration would delete the node's running instances without draining them first.
            out.add(host, "pairserve_replica_restart", "is set to %r in the inventory: it is the drained restart's "
                    "own switch, which serve.yml sets after draining the node. Remove it; a checkpoint whose files "
                    "changed restarts its replicas by itself, drained" % (view.get("pairserve_replica_restart"),))
        for variable, problem in firewall.problems(view):
            out.add(host, variable, problem)
        profiles[host] = name
        base = naming.replica_name(view.get("pairserve_model_name"), host)
        if not NAME.match(base):
            out.add(host, "pairserve_model_name", "replica name %r: use lower-case letters, digits and dashes"
                    % base)
        # A host's replicas are <base> and <base>-p<N> (one per pair): two hosts whose names can meet (node-b and
        # node-b-p1 under one model name) would take each other's replicas, route targets and maintenance.
        for other, other_view in replica_names.items():
            if base == naming.replica_name(other_view.get("pairserve_model_name"), other):
                out.add(host, "pairserve_model_name", "replica name %s is also %s's" % (base, other))
            elif naming.conflicts(view.get("pairserve_model_name"), host, other_view.get("pairserve_model_name"), other):
                out.add(host, "pairserve_model_name", "replica names %s and %s-p<N> (one per pair) can also be %s's "
                        "(%s): rename one host or give it another pairserve_model_name"
                        % (base, base, other, naming.replica_name(other_view.get("pairserve_model_name"), other)))
        replica_names[host] = view
        worker = view.get("pairserve_gpustack_worker_name") or host
        if worker in worker_names:
            out.add(host, "pairserve_gpustack_worker_name", "worker name %s is also %s's" % (worker, worker_names[worker]))
        worker_names[worker] = host
    for host, variable, problem in host_identity.same_machine_problems(views, set(servers) | set(nodes)):
        out.add(host, variable, problem)
    if servers:
        expected_pairs = dict((h, (views.get(h) or {}).get("pairserve_expected_pairs")) for h in nodes)
        _check_routes(out, servers[0], views.get(servers[0]) or {}, nodes, profiles, expected_pairs)
        _check_verify_routes(out, servers[0], views.get(servers[0]) or {}, nodes, profiles, expected_pairs)
        out.extend(controller_problems(servers[0], views.get(servers[0]) or {}, nodes))
        out.extend(verify_problems(servers[0], views.get(servers[0]) or {}))
    return sorted(out, key=lambda p: (p["host"] != "all", p["host"], p["variable"]))


CONTROLLER_MODES = ("weights", "sleep", "both")
# settings that must be a number above 0 (seconds), or 0 and above (weight points)
CONTROLLER_POSITIVE = ("pairserve_controller_interval", "pairserve_controller_hold", "pairserve_controller_horizon")
CONTROLLER_SPEEDS = ("prefill_tps", "decode_tps")


def _whole(value):
    """``value`` as an int when it is a whole number (or its string, as -e gives), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.match(r"^\s*-?\d+\s*\Z", value):
        return int(value)
    return value if isinstance(value, int) else None


def verify_problems(host, view):
    """The problems of the verify role's timings on ``host`` (the GPUStack server, where verify runs).

    The wait for instances polls every pairserve_verify_poll_interval seconds (1 or more) for at most
    pairserve_verify_wait_timeout (at least one poll); each replica is asked for pairserve_verify_reach_grace seconds
    (0: once); one request waits at most pairserve_verify_request_timeout. The validation play checks them with the
    rest of the inventory; the verify role's preflight checks the values it resolved (verify.yml alone)."""
    out = Problems()
    got = dict((var, _whole(view.get(var))) for var in VERIFY_TIMINGS)
    poll, wait = got["pairserve_verify_poll_interval"], got["pairserve_verify_wait_timeout"]
    if poll is None or poll < 1:
        out.add(host, "pairserve_verify_poll_interval", "%r is not a whole number of seconds, 1 or more"
                % (view.get("pairserve_verify_poll_interval"),))
    if wait is None or (poll is not None and poll >= 1 and wait < poll):
        out.add(host, "pairserve_verify_wait_timeout", "%r is not a whole number of seconds at least "
                "pairserve_verify_poll_interval (%r): the wait for instances polls at least once"
                % (view.get("pairserve_verify_wait_timeout"), view.get("pairserve_verify_poll_interval")))
    grace = got["pairserve_verify_reach_grace"]
    if grace is None or grace < 0:
        out.add(host, "pairserve_verify_reach_grace", "%r is not a whole number of seconds, 0 or more (0 asks each "
                "replica once)" % (view.get("pairserve_verify_reach_grace"),))
    request = got["pairserve_verify_request_timeout"]
    if request is None or request < 1:
        out.add(host, "pairserve_verify_request_timeout", "%r is not a whole number of seconds, 1 or more"
                % (view.get("pairserve_verify_request_timeout"),))
    return out


def _number(value):
    """``value`` as a float when it is a number (or a numeric string, as -e gives), else None."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def controller_problems(host, view, nodes):
    """The problems of the controller's variables on ``host`` (the GPUStack server), none when it is not enabled.

    The validation play checks them with the rest of the inventory; the controller role's preflight checks the
    same rule with the values it resolved (a controller run without site.yml). ``nodes``: the gpu_nodes hosts."""
    out = Problems()
    if not _true(view.get("pairserve_controller_enabled")):
        return out
    mode = view.get("pairserve_controller_mode")
    if mode not in CONTROLLER_MODES:
        out.add(host, "pairserve_controller_mode", "%r is not one of %s" % (mode, ", ".join(CONTROLLER_MODES)))
    if view.get("pairserve_serving_mode") == "split":
        out.add(host, "pairserve_controller_enabled", "split mode gives each profile its own route of one replica: "
                "there is nothing to weigh or to sleep. Use pairserve_serving_mode: pooled, or turn it off")
    for var in CONTROLLER_POSITIVE:
        value = _number(view.get(var))
        if value is None or value <= 0:
            out.add(host, var, "%r is not a number of seconds above 0" % (view.get(var),))
    low, high = view.get("pairserve_controller_min_weight"), view.get("pairserve_controller_max_weight")
    if not (_is_int(low) and _is_int(high) and 0 <= low <= high <= 100):
        out.add(host, "pairserve_controller_min_weight", "needs whole numbers 0 <= pairserve_controller_min_weight "
                "(%r) <= pairserve_controller_max_weight (%r) <= 100" % (low, high))
    change = view.get("pairserve_controller_min_change")
    if not _is_int(change) or not 0 <= change <= 100:
        out.add(host, "pairserve_controller_min_change", "%r is not a whole number of weight points 0-100"
                % (change,))
    var = "pairserve_controller_replicas"
    replicas = view.get(var)
    if not isinstance(replicas, list) or not replicas or not all(isinstance(r, dict) for r in replicas):
        out.add(host, var, "expected a list of {name, prefill_tps, decode_tps} (one per target of the route), got %r"
                % (replicas,))
        return out
    names, seen = [r.get("name") for r in replicas], set()
    for replica in replicas:
        name = replica.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            out.add(host, var, "replica name %r: a GPUStack model name (lower-case letters, digits and dashes)"
                    % (name,))
            continue
        if name in seen:
            out.add(host, var, "%s is listed twice" % name)
        seen.add(name)
        for speed in CONTROLLER_SPEEDS:
            value = _number(replica.get(speed))
            if value is None or value <= 0:
                out.add(host, var, "%s: %s %r is not a speed above 0 (tok/s from playbooks/bench.yml)"
                        % (name, speed, replica.get(speed)))
        if "static_weight" in replica:
            out.add(host, var, "%s: static_weight is not read any more: the controller's static weights are the "
                    "route's, from pairserve_route_weights. Remove it (and set the host's weight there)" % name)
        if replica.get("host") is not None and replica.get("host") not in nodes:
            out.add(host, var, "%s: host %r is not a host of gpu_nodes (%s)" % (name, replica.get("host"),
                                                                                ", ".join(nodes)))
    if mode in ("sleep", "both"):
        sleeper = view.get("pairserve_controller_sleep_replica")
        if len(replicas) < 2:
            out.add(host, var, "mode %s needs at least two replicas, so one serves while the other sleeps" % mode)
        if sleeper not in names:
            out.add(host, "pairserve_controller_sleep_replica", "%r is not one of pairserve_controller_replicas (%s)"
                    % (sleeper, ", ".join(map(str, names))))
    if [p for p in out if p["variable"] == var]:
        return out  # the split below needs sound replicas
    model_name = view.get("pairserve_controller_model_name") or view.get("pairserve_model_name")
    try:
        routes.static_weights_by_replica(replicas, view.get("pairserve_route_weights") or {}, model_name, list(nodes))
    except (KeyError, TypeError, ValueError) as err:
        out.add(host, var, str(err))
    return out


def _check_routes(out, server, view, nodes, profiles, expected_pairs=None):
    mode = view.get("pairserve_serving_mode")
    expected_pairs = expected_pairs or {}
    route = view.get("pairserve_route_name")
    if not isinstance(route, str) or not NAME.match(route):
        out.add(server, "pairserve_route_name", "%r: use lower-case letters, digits and dashes" % (route,))
    else:
        _check_route_names(out, server, view, nodes, profiles)
    if mode == "pooled":
        if len(set(map(str, profiles.values()))) > 1:
            out.add(server, "pairserve_serving_mode", "pooled puts every replica behind one route, but the nodes "
                    "run different profiles (%s): use split, or one profile"
                    % ", ".join("%s: %s" % item for item in sorted(profiles.items())))
        # routes.weight_problems is the route role's rule too: a host left out gets routes.DEFAULT_HOST_WEIGHT.
        weights = view.get("pairserve_route_weights")
        for problem in routes.weight_problems(weights, list(nodes)):
            out.add(server, "pairserve_route_weights", problem)
        # A list gives one weight per pair: the route role refuses one of another length once the pairs are found;
        # a host whose pair count the inventory states (the hardware-swap guard) is checked now.
        for host in nodes:
            value, pairs = (weights or {}).get(host) if isinstance(weights, dict) else None, expected_pairs.get(host)
            if isinstance(value, (list, tuple)) and value and _is_int(pairs) and len(value) != pairs:
                out.add(server, "pairserve_route_weights", "%s: %r gives %d pair weight(s), but its "
                        "pairserve_expected_pairs is %d: one weight per pair, pair 0 first"
                        % (host, list(value), len(value), pairs))
    elif mode == "split" and len(set(map(str, profiles.values()))) < 2 and len(nodes) > 1:
        out.add(server, "pairserve_serving_mode", "split gives each profile its own route, but every node runs "
                "%s: give the nodes different profiles, or use pooled" % next(iter(profiles.values())))


def ready_worker_gpus(gpustack, exclude=""):
    """{GPUStack worker name: [GPU uuid, ...]} of the ready workers but ``exclude``, from a gpustack_info result with
    workers and gpus: gpu_conflicts' ``others`` on a day-2 run that detects one node. A worker that is not ready
    keeps its last report, which may name a card since moved to the node being detected: left out. GPUs without a
    uuid (declared by hand) are left out."""
    ready = set(w.get("name") for w in (gpustack or {}).get("workers") or [] if w.get("state") == "ready")
    out = {}
    for gpu in (gpustack or {}).get("gpus") or []:
        worker = gpu.get("worker_name")
        if worker in ready and worker != exclude and gpu.get("uuid"):
            out.setdefault(worker, []).append(gpu["uuid"])
    return out


def gpu_conflicts(pairs_by_host, others=None):
    """Every GPU that two replicas would share, once the nodes' pairs are known.

    pairs_by_host: {host: its pairs as gpu_pairs reports them (index, uuids)}; a host whose pairs are not known
    (None) is left out. others: {GPUStack worker name: [GPU uuid, ...]} for workers whose pairs were not detected
    in this run (a rebuild of one node compares it with the GPUs GPUStack shows for the others). One problem per
    two holders that share GPUs, on the first host (by name) that holds them; empty when every GPU has one holder.
    """
    holders = {}  # uuid -> [(owner, where, is a GPUStack worker)]
    for host in sorted(pairs_by_host or {}):
        for pair in pairs_by_host[host] or []:
            for uuid in pair.get("uuids") or []:
                holders.setdefault(uuid, []).append((host, "pair %s" % pair.get("index"), False))
    for worker in sorted(others or {}):
        for uuid in others[worker] or []:
            if uuid:  # GPUStack leaves uuid empty for GPUs declared by hand
                holders.setdefault(uuid, []).append((worker, "GPUStack worker %s" % worker, True))
    shared = {}  # (first holder, second holder) -> ["uuid (where, where)", ...]
    for uuid in sorted(holders):
        entries = holders[uuid]
        for i, first in enumerate(entries):
            for second in entries[i + 1:]:
                if first[2] and second[2]:
                    continue  # two other workers: GPUStack's own state, no host of this run holds the GPU
                key = (first, second) if first[2] <= second[2] else (second, first)
                shared.setdefault(key, []).append(uuid)
    out = Problems()
    for (first, second), uuids in sorted(shared.items()):
        if first[0] == second[0] and not second[2]:
            where = "both %s and %s of this host" % (first[1], second[1])
        elif second[2]:
            where = "its %s and a GPU of %s" % (first[1], second[1])
        else:
            where = "its %s and %s's %s" % (first[1], second[0], second[1])
        if second[2]:
            cause = ("GPUStack sees the same card on that worker: the two names reach one machine, or GPUStack "
                     "still holds a worker record of this machine under another name (delete it in GPUStack)")
        else:
            cause = ("two inventory hosts reach the same machine (check their ansible_host) or replay the same "
                     "recording (pairserve_nvml_replay); if they really are two machines, leave the GPU out on one "
                     "of them with pairserve_gpu_exclude")
        out.add(first[0], "pairserve_gpu", "%s %s in %s: a GPU serves one replica only; %s"
                % (", ".join(uuids), "is" if len(uuids) == 1 else "are", where, cause))
    return sorted(out, key=lambda p: (p["host"], p["problem"]))


def _check_route_names(out, server, view, nodes, profiles):
    """Every route the serving mode makes against GPUStack's own route name pattern (gpustack_vocabulary)."""
    split = view.get("pairserve_split_routes") if isinstance(view.get("pairserve_split_routes"), dict) else {}
    for name in _verify_targets(view, nodes, profiles):
        variable = "pairserve_split_routes" if name in split.values() else "pairserve_route_name"
        for problem in gpustack_vocabulary.route_name_problems(view.get("pairserve_gpustack_version"), name):
            out.add(server, variable, problem)


def _verify_targets(view, nodes, profiles):
    """{route name: [replica names]} the serving mode makes, as the replica and route roles name them."""
    model = view.get("pairserve_model_name")
    if view.get("pairserve_serving_mode") == "split":
        split = view.get("pairserve_split_routes") or {}
        out = {}
        for host in nodes:
            profile = profiles.get(host)
            name = (split.get(profile) if isinstance(split, dict) else None) or "%s-%s" % (
                view.get("pairserve_route_name"), profile)
            out.setdefault(name, []).append(naming.replica_name(model, host))
        return out
    return {view.get("pairserve_route_name"): [naming.replica_name(model, host) for host in nodes]}


def _check_verify_routes(out, server, view, nodes, profiles, expected_pairs=None):
    """pairserve_verify_routes against the GPU nodes: verify runs last, so a renamed host or a route that does not
    exist would otherwise fail only after everything is installed. A host's further pairs are ``-p<N>``; a host
    whose pair count the inventory states (pairserve_expected_pairs) must have each of its pairs' replicas listed."""
    var = "pairserve_verify_routes"
    wanted = view.get(var)
    if view.get("pairserve_serving_mode") not in SERVING_MODES or wanted is None:
        return
    if not isinstance(wanted, list) or not all(isinstance(r, dict) for r in wanted):
        out.add(server, var, "expected a list of {name, models, max_model_len, multimodal}, got %r" % (wanted,))
        return
    targets = _verify_targets(view, nodes, profiles)
    made = set(name for names in targets.values() for name in names)
    covered, listed = set(), set()
    for route in wanted:
        name = route.get("name")
        if name not in targets:
            out.add(server, var, "route %r is not a route this inventory makes (%s): verify would fail after "
                    "everything is installed" % (name, ", ".join(map(str, targets))))
        models = route.get("models") or []
        if not isinstance(models, list):
            out.add(server, var, "route %s: models %r is not a list of replica names" % (name, models))
            continue
        for model in models:
            base = naming.base_name(model)
            if base not in made:
                out.add(server, var, "route %s: %s is not a replica of a GPU node (the replicas are %s): after a "
                        "host is renamed, name its replica here too" % (name, model, ", ".join(sorted(made))))
            else:
                covered.add(base)
                listed.add(model)
    for host in nodes:
        replica = naming.replica_name(view.get("pairserve_model_name"), host)
        pairs = (expected_pairs or {}).get(host)
        for pair in range(1, pairs if _is_int(pairs) else 0):
            further = naming.replica_name(view.get("pairserve_model_name"), host, pair)
            if replica in covered and further not in listed:
                out.add(server, var, "%s (the replica of %s's pair %d; its pairserve_expected_pairs is %d) is in no "
                        "route verify checks: add it to the models of %s" % (
                            further, host, pair, pairs,
                            next((r["name"] for r in wanted if replica in (r.get("models") or [])), "its route")))
        if replica not in covered:
            out.add(server, var, "%s (the replica of %s) is in no route verify checks: add it to the models of %s"
                    % (replica, host, next((r for r, names in targets.items() if replica in names), "its route")))
