"""Data-plane sender authentication: tickets and frame signatures, without processes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
import torch

from peer.averaging import GradientInbox
from peer.frame_auth import (
    REPLAY_WINDOW,
    SLOW_SENDER_BYTES_PER_S,
    AuthError,
    FrameSigner,
    SenderVerifier,
    SentCall,
)
from peer.frame_headers import ErrorReply, ForwardCall, ForwardReply, Reply
from peer.frames import (
    OpenedFrame,
    assemble,
    assemble_call,
    assemble_reply,
    encode_frame,
    encode_payload,
    open_frame,
    open_reply,
)
from peer.stage_server import StageServer
from swarmhub.tickets import (
    MAX_TRANSFER_GRACE_S,
    TICKET_LIFETIME_S,
    issue_ticket,
    run_ticket_key,
    run_ticket_public_key,
)
from tests.run_specs import run_spec

torch.set_num_threads(1)

RUN, RECEIVER, SENDER = 3, 4, 9
RUN_SECRET = "the run's data key, known only to the coordinator"
LIMIT = 1 << 20


def signer_for(
    peer_id: int = SENDER, *, run_id: int = RUN, secret: str = RUN_SECRET, now: float | None = None
):
    signer = FrameSigner()
    signer.take(
        issue_ticket(
            run_ticket_key(secret),
            run_id=run_id,
            peer_id=peer_id,
            public_key=signer.public_key,
            now=time.time() if now is None else now,
        )
    )
    return signer


def verifier() -> SenderVerifier:
    v = SenderVerifier(run_id=RUN, peer_id=RECEIVER)
    v.trust(run_ticket_public_key(RUN_SECRET))
    v.observe(time.time(), [])
    return v


def call(sender: int = SENDER, step: int = 5) -> ForwardCall:
    return ForwardCall(
        run_id=RUN, sender=sender, stage=1, step=step, microbatch_id="m1", samples=2, timeout_s=30.0
    )


def frame(signer: FrameSigner, *, sender: int = SENDER, receiver: int = RECEIVER) -> bytes:
    return encode_frame(call(sender), {"x": torch.ones(2, 3)}, signer=signer, receiver=receiver)


def check(v: SenderVerifier, data: bytes) -> OpenedFrame:
    opened = open_frame(data, max_bytes=LIMIT)
    v.check(opened.header, opened.signature, opened.header_bytes, opened.payload)
    return opened


def refused(v: SenderVerifier, data: bytes) -> str:
    with pytest.raises(AuthError) as info:
        check(v, data)
    return str(info.value)


def test_a_frame_from_its_ticketed_sender_is_accepted() -> None:
    opened = check(verifier(), frame(signer_for()))
    assert (opened.header.sender, opened.header.receiver, opened.header.counter) == (SENDER, RECEIVER, 1)


def test_a_peer_cannot_speak_as_another() -> None:
    # Its own valid ticket, another peer's id in the header.
    assert "ticket is for peer 9, but the frame says it is from 7" in refused(
        verifier(), frame(signer_for(), sender=7)
    )


def test_a_ticket_the_coordinator_did_not_sign_is_refused() -> None:
    forged = signer_for(7, secret="a key the attacker made up")
    assert "was not issued by this run's coordinator" in refused(verifier(), frame(forged, sender=7))


def test_a_tampered_payload_or_header_is_refused() -> None:
    data = bytearray(frame(signer_for()))
    data[-1] ^= 0x01
    assert "frame signature does not match peer 9's key" in refused(verifier(), bytes(data))
    header_tampered = frame(signer_for()).replace(b'"step":5', b'"step":6')
    assert "frame signature does not match" in refused(verifier(), header_tampered)


def test_a_replayed_frame_is_refused() -> None:
    v = verifier()
    data = frame(signer_for())
    check(v, data)
    assert "was already received (a replay)" in refused(v, data)


def test_counters_may_arrive_out_of_order_within_the_window_only() -> None:
    v = verifier()
    signer = signer_for()
    frames = [frame(signer) for _ in range(REPLAY_WINDOW + 3)]
    check(v, frames[1])
    check(v, frames[0])
    check(v, frames[-1])
    # Counter 2 is now older than the window behind the newest: refused, memory stays bounded.
    assert "a replay" in refused(v, frames[2])


def test_a_frame_addressed_to_another_peer_is_refused() -> None:
    assert "addressed to peer 5, this is peer 4" in refused(verifier(), frame(signer_for(), receiver=5))


def test_an_expired_ticket_is_refused() -> None:
    stale = signer_for(now=time.time() - TICKET_LIFETIME_S - 10)
    assert "ticket of peer 9 has expired" in refused(verifier(), frame(stale))


def test_a_large_call_may_arrive_its_transfer_time_after_its_ticket_expired() -> None:
    """A frame's ticket was current when it left; a large one on a slow link arrives later: up to its
    bytes at SLOW_SENDER_BYTES_PER_S, at most MAX_TRANSFER_GRACE_S."""
    v = verifier()
    expired_5s_ago = signer_for(now=time.time() - TICKET_LIFETIME_S - 5)
    small = encode_frame(call(), {"x": torch.ones(2, 3)}, signer=expired_5s_ago, receiver=RECEIVER)
    assert "has expired" in refused(v, small)
    elements = int(10 * SLOW_SENDER_BYTES_PER_S / 4)  # float32: ten seconds of a slow link
    large = encode_frame(call(), {"x": torch.ones(elements)}, signer=expired_5s_ago, receiver=RECEIVER)
    opened = open_frame(large, max_bytes=1 << 26)
    v.check(opened.header, opened.signature, opened.header_bytes, opened.payload)
    # However large, never more than the cap past expiry.
    expired_long_ago = signer_for(now=time.time() - TICKET_LIFETIME_S - MAX_TRANSFER_GRACE_S - 5)
    elements = int(2 * MAX_TRANSFER_GRACE_S * SLOW_SENDER_BYTES_PER_S / 4)
    huge = encode_frame(call(), {"x": torch.ones(elements)}, signer=expired_long_ago, receiver=RECEIVER)
    opened = open_frame(huge, max_bytes=1 << 28)
    with pytest.raises(AuthError, match="has expired"):
        v.check(opened.header, opened.signature, opened.header_bytes, opened.payload)


def test_expiry_is_judged_on_the_coordinators_clock() -> None:
    v = verifier()
    ahead = time.time() + 3600
    v.observe(ahead, [])
    assert "has expired" in refused(v, frame(signer_for()))
    check(v, frame(signer_for(now=ahead)))


def test_a_ticket_of_another_run_is_refused() -> None:
    other_run = signer_for(run_id=RUN + 1, secret="another run's key")
    assert "ticket is for run 4, this peer serves run 3" in refused(verifier(), frame(other_run))
    # Claiming this run with a ticket signed by another run's key does not help either.
    relabelled = signer_for(secret="another run's key")
    assert "was not issued by this run's coordinator" in refused(verifier(), frame(relabelled))


def test_a_revoked_peer_is_refused_at_once() -> None:
    v = verifier()
    signer = signer_for()
    check(v, frame(signer))
    v.observe(time.time(), [SENDER])
    assert "peer 9 was removed from the run" in refused(v, frame(signer))


def test_nothing_is_accepted_before_the_run_key_is_known() -> None:
    v = SenderVerifier(run_id=RUN, peer_id=RECEIVER)
    assert "not been admitted to the run yet" in refused(v, frame(signer_for()))


def test_unsigned_frames_are_refused() -> None:
    data = encode_frame(call(), {"x": torch.ones(2, 3)})
    assert "carries no ticket" in refused(verifier(), data)


def test_the_inbox_holds_one_sum_per_sender_per_step() -> None:
    async def scenario() -> GradientInbox:
        inbox = GradientInbox()
        for attempt in range(50):
            await inbox.put(7, attempt, SENDER, torch.full((3,), float(attempt)), [f"m{attempt}"])
        await inbox.put(7, 3, SENDER, torch.zeros(3), ["late"])  # an older attempt never displaces a newer
        return inbox

    inbox = asyncio.run(scenario())
    assert inbox.senders(7) == {SENDER}
    got = asyncio.run(asyncio.wait_for(inbox.wait_for(7, {SENDER}), 1))
    assert got[SENDER].counted == ["m49"]


def test_a_member_alone_in_its_group_waits_for_nobody() -> None:
    assert asyncio.run(asyncio.wait_for(GradientInbox().wait_for(3, set()), 1)) == {}


# Replies: the caller is SENDER (9), the peer it dials is RECEIVER (4).


def caller_verifier() -> SenderVerifier:
    v = SenderVerifier(run_id=RUN, peer_id=SENDER)
    v.trust(run_ticket_public_key(RUN_SECRET))
    v.observe(time.time(), [])
    return v


def sent_call(caller: FrameSigner, caller_id: int = SENDER) -> tuple[OpenedFrame, SentCall]:
    """A call to RECEIVER, as the dialled peer opens it, and what the caller remembers."""
    data, sent = assemble_call(call(caller_id), encode_payload({"x": torch.ones(2, 3)}), caller, RECEIVER)
    return open_frame(data, max_bytes=LIMIT), sent


def answer(responder: FrameSigner, to: OpenedFrame, sender: int = RECEIVER, value: float = 1.0) -> bytes:
    header = ForwardReply(run_id=RUN, sender=sender)
    return assemble_reply(header, encode_payload({"y": torch.full((2, 3), value)}), responder, to)


def reply_refused(v: SenderVerifier, data: bytes, sent: SentCall) -> str:
    with pytest.raises(AuthError) as info:
        open_reply(data, max_bytes=LIMIT, verifier=v, call=sent)
    return str(info.value)


def test_the_dialled_peers_signed_answer_to_the_call_is_accepted() -> None:
    opened, sent = sent_call(signer_for())
    header, tensors = open_reply(
        answer(signer_for(RECEIVER), opened), max_bytes=LIMIT, verifier=caller_verifier(), call=sent
    )
    assert isinstance(header, ForwardReply)
    assert (header.sender, header.receiver, header.counter) == (RECEIVER, SENDER, sent.counter)
    assert torch.equal(tensors["y"], torch.ones(2, 3))


def test_a_forged_reply_is_refused() -> None:
    opened, sent = sent_call(signer_for())
    # Someone on the path: a key of its own under a ticket it made up for the dialled peer.
    forged = answer(signer_for(RECEIVER, secret="a key the attacker made up"), opened)
    assert "was not issued by this run's coordinator" in reply_refused(caller_verifier(), forged, sent)
    # Or the honest reply with other activations in it.
    tampered = bytearray(answer(signer_for(RECEIVER), opened))
    tampered[-1] ^= 0x01
    assert "reply signature does not match peer 4's key" in reply_refused(
        caller_verifier(), bytes(tampered), sent
    )


def test_a_reply_signed_by_another_peer_is_refused() -> None:
    opened, sent = sent_call(signer_for())
    # Another admitted peer of the run answers in its own name...
    as_itself = answer(signer_for(5), opened, sender=5)
    assert "reply says it is from peer 5, but the call went to peer 4" in reply_refused(
        caller_verifier(), as_itself, sent
    )
    # ...or claims to be the dialled peer under its own ticket.
    posing = answer(signer_for(5), opened)
    assert "ticket is for peer 5, but the frame says it is from 4" in reply_refused(
        caller_verifier(), posing, sent
    )


def test_a_reply_replayed_for_another_call_is_refused() -> None:
    caller, responder = signer_for(), signer_for(RECEIVER)
    first, _ = sent_call(caller)
    old_reply = answer(responder, first, value=7.0)
    _, second = sent_call(caller)
    assert "answers call 1 of peer 9, not call 2 of peer 9" in reply_refused(
        caller_verifier(), old_reply, second
    )
    # Relabelled with the new call's counter, its signature still answers the first call only.
    relabelled = old_reply.replace(b'"counter":1', b'"counter":2')
    assert "does not match peer 4's key and the call it answers" in reply_refused(
        caller_verifier(), relabelled, second
    )


def test_a_reply_to_another_callers_call_is_refused() -> None:
    other_caller = signer_for(6)
    opened, _ = sent_call(other_caller, 6)
    their_reply = answer(signer_for(RECEIVER), opened)
    _, mine = sent_call(signer_for())
    assert "answers call 1 of peer 6, not call 1 of peer 9" in reply_refused(
        caller_verifier(), their_reply, mine
    )


def test_an_unsigned_reply_is_refused() -> None:
    _, sent = sent_call(signer_for())
    unsigned = assemble(ForwardReply(run_id=RUN, sender=RECEIVER), encode_payload({"y": torch.ones(2, 3)}))
    assert "reply of peer 4 is not signed" in reply_refused(caller_verifier(), unsigned, sent)
    # An unsigned refusal is still refused, its claim passed on only as unverified.
    error = assemble(ErrorReply(run_id=RUN, sender=RECEIVER, error="busy"), encode_payload(None))
    assert "not signed (it claims, unverified: 'busy')" in reply_refused(caller_verifier(), error, sent)


def test_a_reply_from_an_expired_or_revoked_responder_is_refused() -> None:
    opened, sent = sent_call(signer_for())
    stale = answer(signer_for(RECEIVER, now=time.time() - TICKET_LIFETIME_S - 10), opened)
    assert "ticket of peer 4 has expired" in reply_refused(caller_verifier(), stale, sent)
    v = caller_verifier()
    v.observe(time.time(), [RECEIVER])
    assert "peer 4 was removed from the run" in reply_refused(v, answer(signer_for(RECEIVER), opened), sent)


def test_a_reply_counts_if_the_responders_ticket_was_current_when_the_call_was_made() -> None:
    # Its reply queued behind the responder's other uploads for longer than a ticket lives.
    opened, sent = sent_call(signer_for())
    sent = replace(sent, made_at=time.time() - 30)
    current_then = signer_for(RECEIVER, now=time.time() - TICKET_LIFETIME_S - 20)  # current 30 s ago
    header, _ = open_reply(
        answer(current_then, opened), max_bytes=LIMIT, verifier=caller_verifier(), call=sent
    )
    assert header.sender == RECEIVER
    expired_before = signer_for(RECEIVER, now=time.time() - TICKET_LIFETIME_S - 40)
    assert "has expired" in reply_refused(caller_verifier(), answer(expired_before, opened), sent)


def test_a_call_signature_never_passes_for_a_reply() -> None:
    # The dialled peer's signed call to us is no answer to our call, whatever its counter.
    _, sent = sent_call(signer_for())
    their_call = encode_frame(
        call(RECEIVER), {"x": torch.ones(2, 3)}, signer=signer_for(RECEIVER), receiver=SENDER
    )
    assert "does not match peer 4's key and the call it answers" in reply_refused(
        caller_verifier(), their_call, sent
    )


def responder_server(signer: FrameSigner) -> StageServer:
    run = run_spec(run_id=RUN, seq_len=32)
    server = StageServer(peer_id=RECEIVER, run=run, signer=signer, d_model=8, slowdown=1.0, max_bytes=LIMIT)
    server.verifier.trust(run_ticket_public_key(RUN_SECRET))
    server.verifier.observe(time.time(), [])
    return server


def test_a_peer_signs_its_answer_to_an_authenticated_call_only() -> None:
    server = responder_server(signer_for(RECEIVER))
    try:
        data, sent = assemble_call(call(), encode_payload({"x": torch.ones(2, 3)}), signer_for(), RECEIVER)
        header, _ = open_reply(
            asyncio.run(server.handle(data)), max_bytes=LIMIT, verifier=caller_verifier(), call=sent
        )
        # The peer has no stage yet: a refusal, but verifiably this peer's, for this call.
        assert isinstance(header, ErrorReply) and "no stage loaded yet" in header.error
        # A call that does not authenticate gets no signature to reuse, only an unsigned refusal.
        forged, forged_sent = assemble_call(
            call(), encode_payload({"x": torch.ones(2, 3)}), signer_for(secret="made up"), RECEIVER
        )
        reply = asyncio.run(server.handle(forged))
        unsigned = open_frame(reply, max_bytes=LIMIT).header
        assert isinstance(unsigned, Reply) and unsigned.ticket is None
        assert 'not signed (it claims, unverified: "ticket of peer 9 was not issued' in reply_refused(
            caller_verifier(), reply, forged_sent
        )
    finally:
        server.close()
