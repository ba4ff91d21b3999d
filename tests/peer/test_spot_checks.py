"""Spot checks: the codec tolerance, the discrepancy measure, and the referee's check of the evidence."""

from __future__ import annotations

import math
import random
import time

import pytest
import torch

from peer.compression import get_codec
from peer.faults import Fault
from peer.frame_auth import AuthError, FrameSigner, SenderVerifier
from peer.frame_headers import ArbitrateCall, ForwardCall, ForwardReply, LossReply
from peer.frames import FrameError, assemble_call, assemble_reply, encode_payload, open_frame
from peer.spot_checks import (
    CODEC_ERROR,
    Evidence,
    Result,
    comparable,
    discrepancy,
    open_evidence,
    result_of,
    through_codec,
    tolerance,
)
from swarmhub.tickets import issue_ticket, run_ticket_key, run_ticket_public_key

torch.set_num_threads(1)

RUN, TRAINER, CHECKED, CHECKER, REFEREE = 3, 9, 4, 5, 6
RUN_SECRET = "the run's data key, known only to the coordinator"
LIMIT = 1 << 20
SCALES = (1e-4, 1.0, 30.0)
SHAPES = ((4, 32, 64), (8, 64, 128), (4, 256, 256))
"""The smallest is a tiny run's activations (one outlier weighs most in few int8 blocks)."""
CASES = [(scale, shape) for scale in SCALES for shape in SHAPES]
OUTLIER = 50.0
"""In standard deviations: transformer activations carry a few values far outside the bulk."""


def activations(shape: tuple[int, ...], scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * scale
    x.view(-1)[x.numel() // 3] = OUTLIER * scale
    return x


def relative_l2(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.double() - y.double()).norm() / x.double().norm())


@pytest.mark.parametrize("codec", ["float16", "int8"])
def test_codec_error_bounds_the_codecs_roundtrip_error(codec: str) -> None:
    c = get_codec(codec)
    errors = {}
    for i, (scale, shape) in enumerate(CASES):
        x = activations(shape, scale, seed=i)
        errors[scale, shape] = relative_l2(x, c.decode(c.encode(x), shape, torch.float32))
    worst = max(errors, key=errors.__getitem__)
    margin = errors[worst] / CODEC_ERROR[codec]
    assert margin <= 1.0, (
        f"{codec}: error {errors[worst]:.3g} at scale/shape {worst} is {margin:.3f}x CODEC_ERROR"
    )


@pytest.mark.parametrize("codec", ["float16", "int8"])
def test_two_honest_results_stay_within_tolerance(codec: str) -> None:
    ratios = []
    for i, (scale, shape) in enumerate(CASES):
        x = activations(shape, scale, seed=i)
        g = torch.Generator().manual_seed(1000 + i)
        # Another device's kernels: the same result up to a tiny relative perturbation.
        other = x + torch.randn(shape, generator=g) * x.std() * 1e-5
        a = Result(tensors=through_codec({"y": x}, codec))
        b = Result(tensors=through_codec({"y": other}, codec))
        ratios.append(discrepancy(a, b) / tolerance(codec))
    assert max(ratios) <= 1.0, f"{codec}: honest discrepancy reaches {max(ratios):.3f}x the tolerance"
    assert max(ratios) < 0.5, f"{codec}: margin {max(ratios):.3f}x the tolerance is thin"


@pytest.mark.parametrize("codec", sorted(CODEC_ERROR))
def test_a_noisy_result_is_far_outside_tolerance(codec: str) -> None:
    torch.manual_seed(0)
    x = activations((4, 32, 64), 1.0, seed=0)
    noisy = Fault(kind="noise", amount=1.0, rng=random.Random(0)).corrupt_outputs({"y": x})
    honest = Result(tensors=through_codec({"y": x}, codec))
    corrupted = Result(tensors=through_codec(noisy, codec))
    assert discrepancy(honest, corrupted) > 10 * tolerance(codec)


def test_discrepancy_of_identical_results_is_zero() -> None:
    x = activations((2, 8, 16), 1.0, seed=1)
    assert discrepancy(Result(tensors={"y": x}, loss=2.5), Result(tensors={"y": x.clone()}, loss=2.5)) == 0.0


def test_discrepancy_of_results_with_other_tensors_is_infinite() -> None:
    x = torch.ones(2, 3)
    assert discrepancy(Result(tensors={"y": x}), Result(tensors={"grad_x": x})) == math.inf
    assert discrepancy(Result(tensors={"y": x}), Result(tensors={"y": torch.ones(3, 2)})) == math.inf
    # A loss on one side only is not the same kind of result either.
    assert discrepancy(Result(tensors={}, loss=1.0), Result(tensors={})) == math.inf


def test_discrepancy_counts_the_loss() -> None:
    x = torch.ones(2, 3)
    assert discrepancy(
        Result(tensors={"y": x}, loss=2.0), Result(tensors={"y": x}, loss=2.2)
    ) == pytest.approx(0.2 / 2.2)
    # The first stage's backward answers nothing: only a loss or tensors make a result comparable.
    assert not comparable(Result(tensors={}))
    assert comparable(Result(tensors={}, loss=1.0))
    assert result_of(LossReply(run_id=RUN, sender=CHECKED, loss=1.5), {}).loss == 1.5


# The evidence: trainer TRAINER called CHECKED (an ordinary call) and CHECKER (a check), both replied;
# REFEREE checks it.


def signer_for(peer_id: int, *, secret: str = RUN_SECRET) -> FrameSigner:
    signer = FrameSigner()
    signer.take(
        issue_ticket(
            run_ticket_key(secret), run_id=RUN, peer_id=peer_id, public_key=signer.public_key, now=time.time()
        )
    )
    return signer


def referee_verifier() -> SenderVerifier:
    v = SenderVerifier(run_id=RUN, peer_id=REFEREE)
    v.trust(run_ticket_public_key(RUN_SECRET))
    v.observe(time.time(), [])
    return v


def stage_call(microbatch_id: str = "m1", *, check: bool = False) -> ForwardCall:
    return ForwardCall(
        run_id=RUN,
        sender=TRAINER,
        stage=1,
        step=5,
        microbatch_id=microbatch_id,
        samples=2,
        timeout_s=30.0,
        check=check,
    )


def arbitration(sender: int = TRAINER, checked: int = CHECKED, checker: int = CHECKER) -> ArbitrateCall:
    return ArbitrateCall(
        run_id=RUN, sender=sender, stage=1, step=5, case_id=11, checked=checked, checker=checker
    )


INPUTS = {"x": torch.arange(12, dtype=torch.float32).reshape(2, 6)}


class Exchange:
    """The trainer's two calls of one spot check and the peers' signed replies."""

    def __init__(self) -> None:
        self.trainer = signer_for(TRAINER)
        self.checked = signer_for(CHECKED)
        self.checker = signer_for(CHECKER)
        payload = encode_payload(INPUTS)
        self.call_checked, _ = assemble_call(stage_call(), payload, self.trainer, CHECKED)
        self.call_checker, _ = assemble_call(stage_call(check=True), payload, self.trainer, CHECKER)
        self.reply_checked = self.reply(self.checked, CHECKED, self.call_checked, 1.0)
        self.reply_checker = self.reply(self.checker, CHECKER, self.call_checker, 2.0)

    @staticmethod
    def reply(signer: FrameSigner, sender: int, call: bytes, value: float) -> bytes:
        opened = open_frame(call, max_bytes=LIMIT)
        header = ForwardReply(run_id=RUN, sender=sender)
        return assemble_reply(header, encode_payload({"y": torch.full((2, 6), value)}), signer, opened)

    def evidence(self, **frames: bytes) -> dict[str, torch.Tensor]:
        fields = {
            "call_checked": self.call_checked,
            "reply_checked": self.reply_checked,
            "call_checker": self.call_checker,
            "reply_checker": self.reply_checker,
        }
        return Evidence(**(fields | frames)).tensors()


def refused(header: ArbitrateCall, tensors: dict[str, torch.Tensor], error: type[Exception]) -> str:
    with pytest.raises(error) as info:
        open_evidence(header, tensors, referee_verifier(), LIMIT)
    return str(info.value)


def test_honest_evidence_is_accepted_with_its_inputs_and_both_results() -> None:
    disputed = open_evidence(arbitration(), Exchange().evidence(), referee_verifier(), LIMIT)
    assert (disputed.call.kind, disputed.call.microbatch_id, disputed.call.check) == ("forward", "m1", False)
    assert torch.equal(disputed.inputs["x"], INPUTS["x"])
    assert torch.equal(disputed.checked.tensors["y"], torch.full((2, 6), 1.0))
    assert torch.equal(disputed.checker.tensors["y"], torch.full((2, 6), 2.0))
    assert disputed.checked.loss is None


def test_evidence_with_a_frame_missing_is_refused() -> None:
    tensors = Exchange().evidence()
    del tensors["reply_checker"]
    assert "lacks ['reply_checker']" in refused(arbitration(), tensors, FrameError)


def test_a_reply_the_peer_did_not_sign_is_refused() -> None:
    ex = Exchange()
    # The trainer signs the checked peer's "reply" itself, under its own ticket...
    own_ticket = Exchange.reply(ex.trainer, CHECKED, ex.call_checked, 1.0)
    assert "carries the ticket of peer 9" in refused(
        arbitration(), ex.evidence(reply_checked=own_ticket), AuthError
    )
    # ...or under a ticket for the checked peer that it made up...
    forged = Exchange.reply(signer_for(CHECKED, secret="made up"), CHECKED, ex.call_checked, 1.0)
    assert "not issued by this run's coordinator" in refused(
        arbitration(), ex.evidence(reply_checked=forged), AuthError
    )
    # ...or edits the activations of the real reply.
    tampered = bytearray(ex.reply_checked)
    tampered[-1] ^= 0x01
    assert "signature does not match peer 4's key" in refused(
        arbitration(), ex.evidence(reply_checked=bytes(tampered)), AuthError
    )


def test_replies_swapped_between_the_peers_are_refused() -> None:
    ex = Exchange()
    swapped = ex.evidence(reply_checked=ex.reply_checker, reply_checker=ex.reply_checked)
    assert "reply_checked does not answer call_checked" in refused(arbitration(), swapped, AuthError)
    # Naming the peers the other way round does not fit the calls either.
    assert "not to peer 5" in refused(arbitration(checked=CHECKER, checker=CHECKED), ex.evidence(), AuthError)


def test_a_reply_to_another_call_is_refused() -> None:
    ex = Exchange()
    later, _ = assemble_call(stage_call(), encode_payload(INPUTS), ex.trainer, CHECKED)
    # The first reply passed off as the answer to the later call (counter 2), its label fixed up.
    relabelled = ex.reply_checked.replace(b'"counter":1', b'"counter":2')
    assert "signature does not match" in refused(
        arbitration(), ex.evidence(call_checked=later, reply_checked=relabelled), AuthError
    )
    assert "does not answer" in refused(arbitration(), ex.evidence(call_checked=later), AuthError)


def test_calls_with_different_inputs_are_refused() -> None:
    ex = Exchange()
    other_inputs = encode_payload({"x": INPUTS["x"] + 1})
    call, _ = assemble_call(stage_call(check=True), other_inputs, ex.trainer, CHECKER)
    reply = Exchange.reply(ex.checker, CHECKER, call, 2.0)
    assert "carried different inputs" in refused(
        arbitration(), ex.evidence(call_checker=call, reply_checker=reply), FrameError
    )


def test_a_check_of_another_microbatch_is_refused() -> None:
    ex = Exchange()
    call, _ = assemble_call(stage_call("m2", check=True), encode_payload(INPUTS), ex.trainer, CHECKER)
    reply = Exchange.reply(ex.checker, CHECKER, call, 2.0)
    assert "not the same call" in refused(
        arbitration(), ex.evidence(call_checker=call, reply_checker=reply), FrameError
    )


def test_evidence_of_calls_another_peer_made_is_refused() -> None:
    # Peer 7 cannot have a referee judge calls that the trainer made.
    assert "went from peer 9" in refused(arbitration(sender=7), Exchange().evidence(), AuthError)


def test_evidence_of_another_step_is_refused() -> None:
    header = arbitration().model_copy(update={"step": 6})
    assert "not the arbitration's" in refused(header, Exchange().evidence(), FrameError)
