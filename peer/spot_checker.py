"""The trainer's side of spot checks: send a share of its stage calls to a second peer, compare, and
carry a mismatch's evidence to the referee the coordinator names (`peer/spot_checks.py` explains the
scheme). Checks run beside the pipeline: the microbatch goes on with the first peer's result."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from torch import Tensor

from swarmhub.wire import Arbitrate, CheckTally, RunSpec, SpotCheckMismatch

from .frame_auth import AuthError, FrameSigner, SenderVerifier, payload_digest
from .frame_headers import ArbitrateCall, ArbitrateReply, ErrorReply, Reply, StageCall
from .frames import FrameError, FrameLimit, Payload, assemble_call, encode_payload, open_frame, open_reply
from .routing import StageRouter
from .spot_checks import Evidence, Result, comparable, discrepancy, result_of, tolerance
from .transport import FramePool, TransportError

log = logging.getLogger(__name__)

MAX_EVIDENCE = 16
"""Mismatches whose frames are kept until their arbitration; older ones are dropped first."""


@dataclass(frozen=True, kw_only=True)
class WholeCall:
    """What a check of a cached backward needs besides the call itself: the full call (input and
    gradient) for the checking peer, and the signed forward call that carried the input."""

    header: StageCall
    payload: Payload
    forward_frame: bytes


class SpotChecker:
    def __init__(
        self,
        *,
        run: RunSpec,
        peer_id: int,
        signer: FrameSigner,
        verifier: SenderVerifier,
        pool: FramePool,
        routers: list[StageRouter],
        addresses: Callable[[], dict[int, str]],
        report: Callable[[SpotCheckMismatch], Awaitable[object]],
        call_timeout_s: float,
        max_frame_bytes: FrameLimit,
        rng: random.Random | None = None,
    ) -> None:
        self.run = run
        self.peer_id = peer_id
        self.signer = signer
        self.verifier = verifier
        self.pool = pool
        self.routers = routers
        self.addresses = addresses
        self.report = report
        self.call_timeout_s = call_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.rng = rng or random.Random()
        self.tally = CheckTally()
        self._evidence: OrderedDict[int, tuple[SpotCheckMismatch, Evidence]] = OrderedDict()
        self._cases = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def draw(self) -> bool:
        """Whether the next stage call is to be checked (drawn before it is sent: a cached backward
        that will be checked must keep its forward's frame as evidence)."""
        return self.run.spot_check_fraction > 0 and self.rng.random() < self.run.spot_check_fraction

    def start(
        self,
        header: StageCall,
        payload: Payload,
        checked: int,
        frame: bytes,
        reply: bytes,
        answer: Reply,
        outputs: dict[str, Tensor],
        whole: WholeCall | None = None,
    ) -> None:
        """Check this call (answered by `checked`) on a second peer of its stage. For a cached backward,
        `whole` is the full call the checker gets and the forward frame that kept the input."""
        result = result_of(answer, outputs)
        if not comparable(result):
            return
        router = self.routers[header.stage]
        checker = router.choose(header.samples, time.monotonic(), frozenset({checked}))
        address = self.addresses().get(checker) if checker is not None else None
        if checker is None or checker == checked or address is None:
            return
        task = asyncio.ensure_future(
            self._check(header, payload, checked, frame, reply, result, checker, address, whole)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(
        self,
        header: StageCall,
        payload: Payload,
        checked: int,
        frame: bytes,
        reply: bytes,
        result: Result,
        checker: int,
        address: str,
        whole: WholeCall | None,
    ) -> None:
        check_header = header if whole is None else whole.header
        check_frame, sent = assemble_call(
            check_header.model_copy(update={"check": True}),
            payload if whole is None else whole.payload,
            self.signer,
            receiver=checker,
        )
        started = time.monotonic()
        check_reply = b""
        try:
            check_reply = await self.pool.request(address, check_frame, self.call_timeout_s, peer_id=checker)
            answer, outputs = open_reply(
                check_reply, max_bytes=self.max_frame_bytes, verifier=self.verifier, call=sent
            )
        except (TransportError, FrameError, AuthError) as exc:
            log.info("spot check of peer %d by peer %d did not complete: %s", checked, checker, exc)
            return
        finally:
            self.tally = self.tally.model_copy(
                update={
                    "calls": self.tally.calls + 1,
                    "bytes": self.tally.bytes + len(check_frame) + len(check_reply),
                    "seconds": self.tally.seconds + (time.monotonic() - started),
                }
            )
        if isinstance(answer, ErrorReply):
            # Refused (it moved to the next step, or to another stage): no second opinion this time.
            log.info("spot check by peer %d refused: %s", checker, answer.error)
            return
        off = discrepancy(result, result_of(answer, outputs))
        limit = tolerance(self.run.compression)
        if off <= limit:
            if off > self.tally.largest_agreeing:
                self.tally = self.tally.model_copy(update={"largest_agreeing": off})
            return
        self._cases += 1
        mismatch = SpotCheckMismatch(
            case=self._cases,
            step=header.step,
            stage=header.stage,
            microbatch_id=header.microbatch_id,
            kind=header.kind,
            checked=checked,
            checker=checker,
            checked_digest=_payload_hex(reply, self.max_frame_bytes),
            checker_digest=_payload_hex(check_reply, self.max_frame_bytes),
            discrepancy=min(off, 1e30),
            tolerance=limit,
        )
        self._evidence[mismatch.case] = (
            mismatch,
            Evidence(
                call_checked=frame,
                reply_checked=reply,
                call_checker=check_frame,
                reply_checker=check_reply,
                forward_checked=b"" if whole is None else whole.forward_frame,
            ),
        )
        while len(self._evidence) > MAX_EVIDENCE:
            self._evidence.popitem(last=False)
        log.warning(
            "spot check: peer %d and peer %d disagree on stage %d %s of %s"
            " (discrepancy %.3g, tolerance %.3g)",
            checked,
            checker,
            header.stage,
            header.kind,
            header.microbatch_id,
            off,
            limit,
        )
        await self.report(mismatch)

    async def arbitrate(self, message: Arbitrate) -> None:
        """Send the evidence of `message.case` to the referee the coordinator chose."""
        held = self._evidence.pop(message.case, None)
        if held is None:
            log.warning("arbitration of mismatch %d asked, but its evidence is gone", message.case)
            return
        mismatch, evidence = held
        referee = message.referee
        header = ArbitrateCall(
            run_id=self.run.run_id,
            sender=self.peer_id,
            stage=mismatch.stage,
            step=mismatch.step,
            case_id=message.case_id,
            checked=mismatch.checked,
            checker=mismatch.checker,
        )
        frame, sent = assemble_call(
            header, encode_payload(evidence.tensors(), "none"), self.signer, receiver=referee.peer_id
        )
        try:
            reply = await self.pool.request(
                referee.address, frame, self.call_timeout_s, peer_id=referee.peer_id
            )
            answer, _ = open_reply(reply, max_bytes=self.max_frame_bytes, verifier=self.verifier, call=sent)
        except (TransportError, FrameError, AuthError) as exc:
            log.warning(
                "arbitration %d by peer %d did not complete: %s", message.case_id, referee.peer_id, exc
            )
            return
        if isinstance(answer, ArbitrateReply):
            log.info(
                "arbitration %d by peer %d: agrees with peer %d: %s, with peer %d: %s",
                message.case_id,
                referee.peer_id,
                mismatch.checked,
                answer.agrees_with_checked,
                mismatch.checker,
                answer.agrees_with_checker,
            )
        elif isinstance(answer, ErrorReply):
            log.warning(
                "arbitration %d refused by peer %d: %s", message.case_id, referee.peer_id, answer.error
            )


def _payload_hex(frame: bytes, max_bytes: FrameLimit) -> str:
    return payload_digest(open_frame(frame, max_bytes=max_bytes).payload).hex()
