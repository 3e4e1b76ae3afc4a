# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python -m pairserve_controller``: the command line of ``cli``."""

import sys

from pairserve_controller.cli import main

sys.exit(main())
