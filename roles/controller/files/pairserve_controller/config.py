# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's configuration: an INI (what the role renders) or a JSON file, read, checked and turned into a
``policy.Policy``. ``check_config`` is what ``--check-config`` runs, the role's ``validate`` step before a new
configuration replaces the old one."""

from __future__ import annotations

import configparser
import json
import re

from pairserve_controller.policy import Policy, Speed

__all__ = ["ConfigError", "read_config", "policy_from_config", "check_config", "describe_policy", "number"]

ConfigError = (ValueError, configparser.Error)


def number(section, key, default, kind=float):
    value = section.get(key, default)
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError("config: %s = %r is not a number" % (key, value)) from None


def _bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("config: %r is not a boolean (true/false)" % value)


def read_config(path):
    """A dict {gpustack, controller, sleep, replicas: {name: {...}}} from an INI or a JSON file.

    INI sections: [gpustack], [controller], [sleep], and one [replica NAME] per route target (NAME is the
    GPUStack model name). JSON: the same keys, with "replicas" an object keyed by model name.
    """
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith(".json") or text.lstrip().startswith("{"):
        data = json.loads(text)
        return {"gpustack": dict(data.get("gpustack", {})), "controller": dict(data.get("controller", {})),
                "sleep": dict(data.get("sleep", {})),
                "replicas": {k: dict(v) for k, v in (data.get("replicas") or {}).items()}}
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    parser.read_string(text, source=path)
    out = {"gpustack": {}, "controller": {}, "sleep": {}, "replicas": {}}
    for section in parser.sections():
        if section.startswith("replica "):
            out["replicas"][section[len("replica "):].strip()] = dict(parser[section])
        elif section in out and section != "replicas":
            out[section] = dict(parser[section])
        else:
            raise ValueError("config %s: unknown section [%s] (use gpustack, controller, sleep, replica NAME)"
                             % (path, section))
    return out


def policy_from_config(cfg):
    ctl, slp, reps = cfg["controller"], cfg["sleep"], cfg["replicas"]
    if not reps:
        raise ValueError("config: no replicas: add one [replica NAME] section per route target")
    names = tuple(reps)
    speeds, static = {}, {}
    for name, rep in reps.items():
        try:
            speeds[name] = Speed(number(rep, "prefill_tps", None), number(rep, "decode_tps", None))
        except (TypeError, ValueError) as err:
            raise ValueError("config: replica %s needs prefill_tps and decode_tps above 0 (from a bench run): %s"
                             % (name, err)) from None
        static[name] = number(rep, "static_weight", 100 // len(reps))
    return Policy(
        names=names, speeds=speeds, static=static,
        mode=ctl.get("mode", "queue_aware"),
        min_weight=number(ctl, "min_weight", 5, int), max_weight=number(ctl, "max_weight", 95, int),
        min_change=number(ctl, "min_change", 5, int), hold_s=number(ctl, "hold", 15),
        horizon_s=number(ctl, "horizon", 30),
        prior_prompt=number(ctl, "prior_prompt_tokens", 2000), prior_generation=number(ctl, "prior_generation_tokens", 300),
        sleep_enabled=_bool(slp.get("enabled", False)), sleeper=slp.get("replica"),
        idle_s=number(slp, "idle_minutes", 30) * 60.0, wake_waiting=number(slp, "wake_waiting", 4),
        wake_prompt_tokens=number(slp, "wake_prompt_tokens", 100000), drain_grace_s=number(slp, "drain_grace", 30),
        wake_timeout_s=number(slp, "wake_timeout", 900),
    )


KNOWN_KEYS = {
    "gpustack": ("url", "api_key", "api_key_file", "ca_path", "route", "timeout", "retries"),
    "controller": ("mode", "interval", "horizon", "min_weight", "max_weight", "min_change", "hold",
                   "prior_prompt_tokens", "prior_generation_tokens", "wake_log", "metrics_address", "metrics_port"),
    "sleep": ("enabled", "replica", "idle_minutes", "wake_waiting", "wake_prompt_tokens", "drain_grace",
              "wake_timeout"),
    "replica": ("prefill_tps", "decode_tps", "static_weight", "metrics_url", "served_model_name"),
}


def check_config(cfg):
    """The Policy of a configuration the service can start with; ValueError naming the first problem.

    Stricter than what ``main`` needs to start: a key no section knows is refused (a misspelt ``idle_minute``
    would otherwise leave the default in force without a word), and so are a missing route, URL or API key,
    bounds that cannot hold and a wake log outside an absolute path. The role runs it as the ``validate``
    step before a new configuration replaces the old one.
    """
    sections = [(name, cfg[name], KNOWN_KEYS[name]) for name in ("gpustack", "controller", "sleep")]
    sections += [("replica %s" % name, rep, KNOWN_KEYS["replica"]) for name, rep in cfg["replicas"].items()]
    for title, section, known in sections:
        unknown = sorted(set(section) - set(known))
        if unknown:
            raise ValueError("config: [%s] has unknown key(s) %s (known: %s)"
                             % (title, ", ".join(unknown), ", ".join(known)))
    policy = policy_from_config(cfg)
    gcfg = cfg["gpustack"]
    if not str(gcfg.get("route") or "").strip():
        raise ValueError("config: [gpustack] route is required (the route name clients call)")
    url = str(gcfg.get("url") or "")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("config: [gpustack] url = %r is not an http(s) URL of the GPUStack server" % url)
    if not (str(gcfg.get("api_key") or "").strip() or gcfg.get("api_key_file")):
        raise ValueError("config: [gpustack] needs api_key or api_key_file (a GPUStack key with the management "
                         "scope: the route and model PUTs need it)")
    if number(gcfg, "timeout", 10) <= 0:
        raise ValueError("config: [gpustack] timeout must be above 0 seconds")
    if not 0 <= number(gcfg, "retries", 3, int) <= 10:
        raise ValueError("config: [gpustack] retries must be between 0 and 10")
    ca_path = gcfg.get("ca_path")
    if ca_path and not str(ca_path).startswith("/"):
        raise ValueError("config: [gpustack] ca_path = %r must be an absolute path" % ca_path)
    ctl = cfg["controller"]
    for key, default in (("interval", 5), ("horizon", 30)):
        if number(ctl, key, default) <= 0:
            raise ValueError("config: [controller] %s must be above 0 seconds" % key)
    for key in ("hold", "prior_prompt_tokens", "prior_generation_tokens"):
        if number(ctl, key, 0) < 0:
            raise ValueError("config: [controller] %s must not be negative" % key)
    if not 0 <= policy.min_weight <= policy.max_weight <= 100:
        raise ValueError("config: [controller] needs 0 <= min_weight (%d) <= max_weight (%d) <= 100"
                         % (policy.min_weight, policy.max_weight))
    if policy.min_change < 1:
        raise ValueError("config: [controller] min_change must be at least 1 weight point")
    port = number(ctl, "metrics_port", 0, int)
    if not 0 <= port <= 65535:
        raise ValueError("config: [controller] metrics_port must be 0 (off) or a TCP port, got %d" % port)
    wake_log = ctl.get("wake_log")
    if wake_log and not wake_log.startswith("/"):
        raise ValueError("config: [controller] wake_log = %r must be an absolute path" % wake_log)
    if any(w < 0 for w in policy.static.values()) or sum(policy.static.values()) <= 0:
        raise ValueError("config: static_weight values must be >= 0 with at least one above 0 (got %s)"
                         % ", ".join("%s=%g" % kv for kv in policy.static.items()))
    if policy.sleep_enabled:
        for key, value in (("idle_minutes", policy.idle_s), ("wake_waiting", policy.wake_waiting),
                           ("wake_prompt_tokens", policy.wake_prompt_tokens), ("wake_timeout", policy.wake_timeout_s)):
            if value <= 0:
                raise ValueError("config: [sleep] %s must be above 0" % key)
        if policy.drain_grace_s < 0:
            raise ValueError("config: [sleep] drain_grace must not be negative")
    return policy


def describe_policy(policy, cfg):
    """One line saying what a checked configuration will do (what ``--check-config`` prints)."""
    reps = ", ".join("%s (static %g)" % (n, policy.static[n]) for n in policy.names)
    sleep = "sleep off"
    if policy.sleep_enabled:
        sleep = "sleep %s after %g min idle" % (policy.sleeper, policy.idle_s / 60.0)
    return "route %s, mode %s, replicas %s, %s" % (cfg["gpustack"].get("route"), policy.mode, reps, sleep)
