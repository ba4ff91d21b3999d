"""The pure parts of webhooks: which events a webhook wants, the retry schedule, the signature."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest

from server.webhooks.policy import WEBHOOK_KINDS, after_attempt, backoff_s, succeeded, wants
from swarmhub.webhook_signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature, signed_headers, verify

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_a_webhook_wants_only_the_kinds_it_asked_for_and_only_alert_kinds():
    assert wants(["run_finished"], "run_finished")
    assert not wants(["run_finished"], "checkpoint")
    assert all(wants(WEBHOOK_KINDS, kind) for kind in WEBHOOK_KINDS)
    # Bookkeeping events never leave, even if a row somehow listed them.
    assert not wants([*WEBHOOK_KINDS, "peer_joined"], "peer_joined")
    assert not wants([], "run_stalled")


def test_backoff_doubles_from_the_base_up_to_the_cap():
    schedule = [backoff_s(n, base_s=10, cap_s=300) for n in range(1, 8)]
    assert schedule == [10, 20, 40, 80, 160, 300, 300]
    assert backoff_s(10_000, base_s=10, cap_s=300) == 300  # no float overflow on a long-failing hook
    with pytest.raises(ValueError):
        backoff_s(0, base_s=10, cap_s=300)


def test_only_2xx_delivers():
    assert [succeeded(code) for code in (200, 204, 299)] == [True] * 3
    assert [succeeded(code) for code in (None, 199, 301, 404, 500)] == [False] * 5


def test_after_an_attempt_a_delivery_is_done_retried_later_or_given_up():
    common = {"now": NOW, "max_attempts": 3, "base_s": 5.0, "cap_s": 60.0}
    assert after_attempt(2, delivered=True, **common).state == "delivered"
    assert after_attempt(2, delivered=True, **common).next_attempt_at is None
    first = after_attempt(1, delivered=False, **common)
    assert (first.state, first.next_attempt_at) == ("pending", NOW + timedelta(seconds=5))
    second = after_attempt(2, delivered=False, **common)
    assert (second.state, second.next_attempt_at) == ("pending", NOW + timedelta(seconds=10))
    last = after_attempt(3, delivered=False, **common)
    assert (last.state, last.next_attempt_at) == ("failed", None)


def test_a_signature_checks_out_only_for_the_same_secret_body_and_timestamp():
    body = b'{"kind":"run_finished","run_id":1}'
    headers = signed_headers("s3cret", 1_700_000_000, body)
    timestamp, sig = headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
    assert timestamp == "1700000000" and sig.startswith("v1=") and len(sig) == 3 + 64
    assert verify("s3cret", body, timestamp, sig, now=1_700_000_010)
    assert not verify("other", body, timestamp, sig, now=1_700_000_010)
    assert not verify("s3cret", body + b" ", timestamp, sig, now=1_700_000_010)
    # The timestamp is signed: moving it to look fresh breaks the signature.
    assert not verify("s3cret", body, "1700000005", sig, now=1_700_000_010)
    assert not verify("s3cret", body, None, sig, now=1_700_000_010)
    assert not verify("s3cret", body, "soon", sig, now=1_700_000_010)


def test_an_old_signature_is_refused_as_a_replay():
    body = b"{}"
    sig = signature("s3cret", 1_700_000_000, body)
    assert verify("s3cret", body, "1700000000", sig, now=1_700_000_000 + 299)
    assert not verify("s3cret", body, "1700000000", sig, now=1_700_000_000 + 301)
    assert not verify("s3cret", body, "1700000000", sig, now=1_700_000_000 - 301)
    assert verify("s3cret", body, "1700000000", sig, now=1_700_000_000 + 3000, tolerance_s=3600)


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    # What docs/operations.md tells a receiver to compute, written out independently.
    expected = hmac.new(b"key", b"1700000000.hello", hashlib.sha256).hexdigest()
    assert signature("key", 1_700_000_000, b"hello") == f"v1={expected}"
