"""The lab's command line (the README's first command is `make lab`, which runs `python -m lab up`):

    python -m lab up                 build what is missing, start the lab, converge site.yml (which ends by verifying
                                     through the route), print the figures and the endpoint
    python -m lab start              only what comes before the first converge (molecule default's create step)
    python -m lab down [--images]    remove every container, process and file the lab created (cached images stay
                                     unless --images), then check that nothing is left
    python -m lab test               check mode on fresh nodes, up, the idempotence proof, the default suite, the
                                     day-2 scenarios PAIRSERVE_LAB_SCENARIOS names (patch_restart by default) with
                                     their suites, the uninstall proof, down, nothing left (what `make test` runs)
    python -m lab scenario NAME      one day-2 scenario's steps on the converged lab (lab/scenarios/NAME; molecule's
                                     side effect runs this; its tests are lab/scenarios/NAME/tests)
    python -m lab uninstall          uninstall.yml on the converged lab, held to the fresh nodes' snapshots
    python -m lab reinstall          the same, then site.yml builds the service again on what was kept
    python -m lab images node | replica VERSION | stand-ins      build one of the lab's images (scripts/build_caches.sh)
    python -m lab podman-conf        write podman's settings for this kind of host and print their path

Exit status: 0, 1 when a step failed (its message says what and where to look), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys

from lab import host, images, scenarios, stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.split("\n\n", maxsplit=1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="scenarios: " + " ".join(scenarios.names()))
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "start", "test", "uninstall", "reinstall", "podman-conf"):
        sub.add_parser(name)
    down = sub.add_parser("down")
    down.add_argument("--images", action="store_true", help="remove the lab's images and registry storage too")
    scenario = sub.add_parser("scenario")
    scenario.add_argument("name", choices=scenarios.names())
    scenario.add_argument("--steps", choices=("all", "core"), default="all",
                          help="core leaves out the longest steps (what `python -m lab test` runs)")
    image = sub.add_parser("images")
    image.add_argument("what", nargs="+")
    args = parser.parse_args(argv)
    lab = stack.Lab()
    try:
        if args.command == "up":
            lab.up()
        elif args.command == "start":
            lab.start()
        elif args.command == "down":
            stack.down(remove_images=args.images)
            if stack.leftovers():
                return 1
        elif args.command == "test":
            lab.test()
        elif args.command == "uninstall":
            lab.uninstall_proof()
        elif args.command == "reinstall":
            lab.reinstall()
        elif args.command == "scenario":
            scenarios.run(args.name, args.steps)
        elif args.command == "images":
            return images.main(args.what)
        elif args.command == "podman-conf":
            print(host.podman_conf())
    except (host.LabError, OSError) as err:
        print("lab: %s" % err, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
