# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command line: ``pairserve-controller --config FILE [--once] [--dry-run]`` and ``--check-config FILE``.

Exit codes: 0 done (or a usable configuration), 1 a ``--once`` tick failed, 2 an unusable configuration or a
controller that cannot start (the systemd unit does not restart on 2: a restart would not fix it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

from pairserve_controller.config import ConfigError, check_config, describe_policy, number, read_config
from pairserve_controller.exposition import serve_metrics
from pairserve_controller.gpustack_access import GpuStackError
from pairserve_controller.service import LOG, Controller

DESCRIPTION = "pairserve controller: route weights from queued work, and sleep/wake of one replica."


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pairserve-controller", description=DESCRIPTION)
    parser.add_argument("--config", default="/etc/pairserve/controller.ini",
                        help="INI or JSON configuration (default: %(default)s)")
    parser.add_argument("--once", action="store_true", help="run one tick and exit")
    parser.add_argument("--dry-run", action="store_true", help="observe and decide, change nothing")
    parser.add_argument("--interval", type=float, help="seconds between ticks (default: [controller] interval or 5)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--api-key-file", metavar="PATH",
                        help="read the GPUStack API key from PATH instead of the configuration's api_key / "
                             "api_key_file (the systemd unit passes the key file here)")
    parser.add_argument("--check-config", metavar="PATH",
                        help="check the configuration PATH (unknown keys, bounds, route, URL, key), print what it "
                             "would do and exit: 0 usable, 2 not")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(message)s")
    if args.check_config:
        try:
            cfg = read_config(args.check_config)
            policy = check_config(cfg)
        except (OSError,) + ConfigError as err:
            print("%s: %s" % (args.check_config, err), file=sys.stderr)
            return 2
        print("%s: ok: %s" % (args.check_config, describe_policy(policy, cfg)))
        return 0
    try:
        cfg = read_config(args.config)
        if args.api_key_file:
            cfg["gpustack"].pop("api_key", None)
            cfg["gpustack"]["api_key_file"] = args.api_key_file
        ctl = Controller(cfg, dry_run=args.dry_run)
    except (OSError, GpuStackError) + ConfigError as err:
        LOG.error("cannot start: %s", err)
        return 2
    interval = args.interval or number(cfg["controller"], "interval", 5)
    port = 0 if args.once else number(cfg["controller"], "metrics_port", 0, int)
    server = None
    if port:
        address = cfg["controller"].get("metrics_address") or "127.0.0.1"
        try:
            server = serve_metrics(ctl.metrics, address, port)
        except OSError as err:
            LOG.error("cannot serve /metrics on %s:%s: %s", address, port, err)
            return 2
        LOG.info("serving /metrics on %s:%s", address, port)
    try:
        return _loop(ctl, args.once, interval)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _loop(ctl, once, interval):
    stop = []
    signal.signal(signal.SIGTERM, lambda _sig, _frm: stop.append(True))
    while True:
        try:
            ctl.tick()
        except (GpuStackError, ValueError) as err:
            LOG.error("tick failed: %s", err)
            ctl.metrics.inc("pairserve_controller_tick_errors_total")
            if once:
                return 1
        if once or stop:
            return 0
        deadline = time.monotonic() + interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        if stop:
            return 0
