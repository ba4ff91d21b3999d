"""A stage call whose gradients a StageServer does not accumulate must not be answered as served.

The server accumulates a call only if it starts computing within `ACCEPT_FRACTION` of the caller's
timeout (a caller that gave up and retried elsewhere must not be counted twice). A call that waited
in the compute queue past that window but still finished before the caller's timeout was answered
like any other: its trainer reported the microbatch done while no peer of the stage held its
gradient, and the step recorded its samples lost on that stage (issue 13: a peer just moved to the
last stage, listed at a rate it could not serve, queued calls past the window).

A forward is refused once it waited its caller's whole timeout: its caller has given up, and
computing it only held the thread from the calls still waited on (issue 14).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import torch

from peer.activation_store import ActivationStore
from peer.frame_headers import ErrorReply, ForwardCall, StageCall
from peer.frames import assemble_call, encode_payload, open_reply
from peer.stage_server import StageServer
from peer.stage_worker import StageError
from tests.peer.test_stage_server_checks import (
    CHECKER,
    LIMIT,
    TRAINER,
    inputs_for,
    run_spec,
    signer_for,
    stage_call,
    stage_server,
    verifier_of,
)

TIMEOUT_S = 0.2
T = TypeVar("T")


async def held_back(server: StageServer, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """`call`, sent while the compute thread is busy and kept waiting in its queue a whole timeout."""
    running, release = threading.Event(), threading.Event()

    def busy() -> None:
        running.set()
        release.wait()

    blocker = asyncio.ensure_future(server.compute(busy))
    await asyncio.to_thread(running.wait)
    answer = asyncio.ensure_future(call)
    # The call counts as waiting once the server took it in (its accept window started).
    while server.queue_length < 2 and not answer.done():
        await asyncio.sleep(0.01)
    await asyncio.sleep(TIMEOUT_S)
    release.set()
    await blocker
    await asyncio.wait([answer])
    return answer


def late_call(kind: str, stage: int) -> StageCall:
    return stage_call(kind, stage, "m1", check=False).model_copy(update={"timeout_s": TIMEOUT_S})


@pytest.mark.parametrize(("kind", "stage"), [("backward", 0), ("forward_backward", 1)])
def test_a_call_queued_past_its_accept_window_is_refused_not_answered_uncounted(
    kind: str, stage: int
) -> None:
    server = stage_server(CHECKER, stage, run_spec())
    worker = server.worker
    assert worker is not None
    trainer = signer_for(TRAINER)
    header = late_call(kind, stage)
    data, sent = assemble_call(header, encode_payload(inputs_for(stage, kind)), trainer, server.peer_id)

    async def scenario() -> bytes:
        return (await held_back(server, server.handle(data))).result()

    try:
        answer = asyncio.run(scenario())
        reply, _ = open_reply(answer, max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent)
        assert isinstance(reply, ErrorReply)
        assert worker.accumulated == {}
        assert server.samples_done == 0
        assert not worker.flat_gradients().any()
    finally:
        server.close()


def test_a_call_from_its_own_trainer_queued_past_its_window_is_refused_too() -> None:
    kind, stage = "forward_backward", 1
    server = stage_server(CHECKER, stage, run_spec())
    worker = server.worker
    assert worker is not None
    tensors: dict[str, torch.Tensor] = inputs_for(stage, kind)

    async def scenario() -> BaseException | None:
        return (await held_back(server, server.serve_local(late_call(kind, stage), tensors))).exception()

    try:
        refused = asyncio.run(scenario())
        assert isinstance(refused, StageError)
        assert worker.accumulated == {}
    finally:
        server.close()


def test_a_forward_queued_past_its_callers_whole_timeout_is_refused_and_keeps_nothing() -> None:
    stage = 0
    server = stage_server(CHECKER, stage, run_spec())
    worker = server.worker
    assert worker is not None
    worker.kept = ActivationStore(1 << 30)
    header = late_call("forward", stage)
    assert isinstance(header, ForwardCall)
    header = header.model_copy(update={"keep": True})
    data, sent = assemble_call(
        header, encode_payload(inputs_for(stage, "forward")), signer_for(TRAINER), server.peer_id
    )

    async def scenario() -> bytes:
        return (await held_back(server, server.handle(data))).result()

    try:
        answer = asyncio.run(scenario())
        reply, _ = open_reply(answer, max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent)
        assert isinstance(reply, ErrorReply)
        assert "caller gave up" in reply.error
        assert worker.kept.tally().entries == 0
    finally:
        server.close()


def test_a_forward_answered_in_time_is_computed_and_kept() -> None:
    stage = 0
    server = stage_server(CHECKER, stage, run_spec())
    worker = server.worker
    assert worker is not None
    worker.kept = ActivationStore(1 << 30)
    header = stage_call("forward", stage, "m1", check=False).model_copy(
        update={"keep": True, "timeout_s": 60.0}
    )
    data, sent = assemble_call(
        header, encode_payload(inputs_for(stage, "forward")), signer_for(TRAINER), server.peer_id
    )
    try:
        answer = asyncio.run(server.handle(data))
        reply, _ = open_reply(answer, max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent)
        assert not isinstance(reply, ErrorReply), reply.error
        assert worker.kept.tally().entries == 1
    finally:
        server.close()
