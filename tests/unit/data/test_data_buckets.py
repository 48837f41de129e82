"""make_buckets / nearest_bucket properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorastudio.data import make_buckets, nearest_bucket
from lorastudio.errors import ConfigError

CASES = [(1024, 64, 4.0), (1024, 16, 4.0), (512, 8, 2.0), (768, 32, 3.0), (64, 16, 4.0), (1328, 16, 4.0)]


@pytest.mark.parametrize(("resolution", "multiple", "max_ratio"), CASES)
def test_buckets_are_multiples_bounded_symmetric_with_square(resolution, multiple, max_ratio):
    buckets = make_buckets(resolution, multiple, max_ratio)
    area = resolution * resolution
    assert (resolution, resolution) in buckets
    assert len(set(buckets)) == len(buckets)
    for w, h in buckets:
        assert w % multiple == 0 and h % multiple == 0
        assert w * h <= area
        # the widest side costs at most one `multiple` strip of the target area
        assert w * h >= area - max(w, h) * multiple
        assert max(w / h, h / w) <= max_ratio
        assert (h, w) in buckets
    ratios = [w / h for w, h in buckets]
    assert ratios == sorted(ratios)
    assert min(ratios) < 1 < max(ratios)


def test_more_ratio_more_buckets():
    assert set(make_buckets(1024, 64, 2.0)) < set(make_buckets(1024, 64, 4.0))


@pytest.mark.parametrize(("resolution", "multiple"), [(100, 16), (16, 16), (0, 8)])
def test_bad_resolution_refused(resolution, multiple):
    with pytest.raises(ConfigError, match="resolution"):
        make_buckets(resolution, multiple)


def test_bad_ratio_refused():
    with pytest.raises(ConfigError, match="max_ratio"):
        make_buckets(512, 16, 0.5)


def test_nearest_bucket_examples():
    buckets = make_buckets(1024, 64)
    assert nearest_bucket(500, 500, buckets) == (1024, 1024)
    assert nearest_bucket(4000, 2000, buckets) == (1472, 704)  # 2.09 beats 1344x768 (1.75)
    assert nearest_bucket(2000, 4000, buckets) == (704, 1472)
    assert nearest_bucket(10_000, 100, buckets) == (2048, 512)  # beyond 4:1 clamps to the widest
    assert nearest_bucket(100, 10_000, buckets) == (512, 2048)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_nearest_bucket_minimises_log_aspect_distance(width, height):
    buckets = make_buckets(512, 32)
    chosen = nearest_bucket(width, height, buckets)
    target = math.log(width / height)
    best = min(abs(math.log(w / h) - target) for w, h in buckets)
    assert abs(math.log(chosen[0] / chosen[1]) - target) == best


def test_nearest_bucket_refuses_empty():
    with pytest.raises(ConfigError):
        nearest_bucket(10, 10, [])
