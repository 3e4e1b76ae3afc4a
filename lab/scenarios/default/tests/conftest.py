"""The default suite's fixtures: the outsider (a host outside the site, for the firewall's tests). The import path is
lab/scenarios/conftest.py's."""

from support.lab_outsider import outsider  # noqa: F401  pylint: disable=unused-import
