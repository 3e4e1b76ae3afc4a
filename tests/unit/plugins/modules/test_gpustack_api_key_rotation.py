"""gpustack_api_key_rotation's rules on their own: when a rotation is due (pairserve_rotate_before against GPUStack's
created_at), which name a new key takes, how ISO 8601 times are read. The steps against a real GPUStack are
tests/integration/gpustack/test_rotation.py's."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.pairserve.llm.plugins.modules import gpustack_api_key_rotation as rot

UTC = datetime.timezone.utc


@pytest.mark.parametrize("text, expected", [
    ("2026-12-06T15:00:00Z", datetime.datetime(2026, 12, 6, 15, 0, tzinfo=UTC)),
    ("2026-12-06T16:00:00+01:00", datetime.datetime(2026, 12, 6, 15, 0, tzinfo=UTC)),
    ("2026-12-06 15:00:00", datetime.datetime(2026, 12, 6, 15, 0, tzinfo=UTC)),  # no offset: UTC
    ("2026-12-06T15:00:00.123456", datetime.datetime(2026, 12, 6, 15, 0, 0, 123456, tzinfo=UTC)),
    ("2026-12-06", datetime.datetime(2026, 12, 6, 0, 0, tzinfo=UTC)),
])
def test_times_are_read_as_utc_unless_an_offset_says_otherwise(text, expected):
    assert rot.parse_time(text) == expected


@pytest.mark.parametrize("text", ["now", "", "06/12/2026", "2026-13-01"])
def test_what_is_not_an_iso_time_is_none(text):
    assert rot.parse_time(text) is None


def test_a_key_created_before_the_time_is_due_and_one_created_after_is_not():
    before = datetime.datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
    old = {"name": "k", "created_at": "2026-12-01T10:00:00Z"}
    new = {"name": "k-alt", "created_at": "2026-12-06T15:00:01Z"}
    assert rot.rotation_due([old], before)
    assert not rot.rotation_due([new], before)
    # Mid-rotation both exist: the newest counts, so a rerun after the stage step does not stage again.
    assert not rot.rotation_due([old, new], before)
    # A created_at without an offset is read as UTC (GPUStack stores UTC).
    assert rot.rotation_due([{"name": "k", "created_at": "2026-12-06T14:59:59"}], before)


def test_no_key_or_an_unreadable_date_is_due():
    before = datetime.datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
    assert rot.rotation_due([], before)
    assert rot.rotation_due([{"name": "k", "created_at": None}], before)


def test_the_new_key_takes_the_name_that_is_free():
    names = ("pairserve-inference", "pairserve-inference-alt")
    assert rot.free_name(names, []) == "pairserve-inference"
    assert rot.free_name(names, [{"name": "pairserve-inference"}]) == "pairserve-inference-alt"
    assert rot.free_name(names, [{"name": "pairserve-inference-alt"}]) == "pairserve-inference"
    assert rot.free_name(names, [{"name": n} for n in names]) is None


def test_public_view_never_carries_a_secret():
    key = {"id": 3, "name": "k", "scope": ["inference"], "created_at": "x", "value": "sk-secret", "custom": "sk-secret",
           "hashed_secret_key": "h", "access_key": "a"}
    assert "sk-secret" not in repr(rot.public(key))
    assert rot.public(key)["created_at"] == "x"
