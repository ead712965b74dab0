"""The one-line message of a ReleaseError (pipeline/errors.py): what failed, the expected and
actual value where there are two to compare, and what to do; never "expected None" for an
expected value nobody gave."""

from __future__ import annotations

from pipeline.errors import ConfigError, ReleaseError


def test_only_an_actual_value_reads_got_without_expected():
    err = ConfigError("runtime.health_timeout_s must be a positive integer", actual=0, hint="set it above 0")
    assert str(err) == "runtime.health_timeout_s must be a positive integer; got 0; set it above 0"
    assert "expected" not in str(err)


def test_both_values_read_expected_then_got():
    err = ReleaseError("digest", expected="sha256:a", actual="sha256:b", hint="rebuild")
    assert str(err) == "digest; expected sha256:a, got sha256:b; rebuild"


def test_an_expected_value_that_is_none_is_still_stated():
    """Teeth for the first: None given on purpose (an absent file was expected) is a value."""
    assert (
        str(ReleaseError("openenv.yaml", expected=None, actual="sha256:b"))
        == "openenv.yaml; expected None, got sha256:b"
    )


def test_neither_value_is_just_what_and_hint():
    assert str(ReleaseError("registry down", hint="start it")) == "registry down; start it"
    err = ReleaseError("x")
    assert (err.expected, err.actual, err.has_expected, err.has_actual) == (None, None, False, False)
