"""One stage's parameters, gradient accumulator and optimizer: the compute a stage peer serves.

No networking here. Calls are stateless in the SWARM sense: a backward call can carry the stage's
input again and recompute the forward, so any peer holding the same parameters can serve it. The
peer that served the forward may have kept its graph (`peer/activation_store.py`); then the backward
sent to it needs only the output gradient and skips the recomputation.
Gradients are accumulated into a buffer of their own (not `param.grad`) so a call can be refused
after it was computed: a microbatch already accumulated here is recognized by its id and not
added twice, and a call that finished after its caller gave up on it is not added at all.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from swarmhub.wire import RunSpec

from .activation_store import ActivationStore, KeptForward, counting_saved_bytes
from .model import PipelineStage

ADAM_BETAS = (0.9, 0.95)
SGD_MOMENTUM = 0.9


class StageError(ValueError):
    """A call this stage cannot serve as asked (wrong step, frozen accumulation, bad input)."""


NOT_KEPT = "not kept"
"""How an error reply to a cached backward call starts when the forward is gone: the caller then
sends the full call (any peer may serve it), and nobody is blamed."""


class NotKept(StageError):
    pass


def make_optimizer(run: RunSpec, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if run.optimizer == "adamw":
        return torch.optim.AdamW(
            params, lr=run.learning_rate, betas=ADAM_BETAS, weight_decay=run.weight_decay
        )
    return torch.optim.SGD(params, lr=run.learning_rate, momentum=SGD_MOMENTUM, weight_decay=run.weight_decay)


def apply_gradients(
    module: nn.Module, optimizer: torch.optim.Optimizer, grads: list[Tensor], learning_rate: float
) -> None:
    """One optimizer step with the given gradients (already averaged and clipped), wherever they live.

    Each gradient is copied once, onto its parameter's device and dtype, so `param.grad` never
    aliases the caller's tensor (they may be views of one flat sum). A GPU peer passes CPU slices:
    moving them to the device first and cloning them there kept two device copies of the stage's
    gradients through the optimizer step where one does (measured: bench/gpu_path.py).
    """
    for param, grad in zip(module.parameters(), grads, strict=True):
        param.grad = grad.to(device=param.device, dtype=param.dtype, copy=True)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class StageWorker:
    """A stage's state on one peer. `step` is the global step its parameters are ready for."""

    def __init__(
        self,
        module: PipelineStage,
        run: RunSpec,
        step: int,
        device: torch.device,
        kept: ActivationStore | None = None,
    ) -> None:
        self.module = module.to(device)
        self.kept = kept or ActivationStore(0)
        self.device = device
        self.run = run
        self.step = step
        self.optimizer = make_optimizer(run, list(self.module.parameters()))
        self._params = list(self.module.parameters())
        self._accumulator = [torch.zeros_like(p) for p in self._params]
        self.accumulated: dict[str, int] = {}
        """Microbatch id -> samples whose gradients are in the accumulator this step."""
        self.frozen = False
        """Set at the step barrier: gradients of this step are being averaged; nothing more is added."""

    @property
    def stage(self) -> int:
        return self.module.stage

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self._params)

    def check_step(self, step: int) -> None:
        if step != self.step:
            raise StageError(
                f"stage {self.stage} holds parameters for step {self.step}, call is for step {step}"
            )

    def forward(self, step: int, x: Tensor, keep: str | None = None) -> Tensor:
        """The stage's output on `x`; with `keep` (a microbatch id) its graph is kept for that
        microbatch's backward, if the store has room."""
        self.check_step(step)
        if keep is None or self.kept.limit_bytes <= 0:
            with torch.no_grad():
                return self.module(x.to(self.device)).float().cpu()
        inputs = self._input(x)
        with counting_saved_bytes() as saved:
            out = self.module(inputs)
        self.kept.keep(keep, KeptForward(step=step, inputs=inputs, output=out, nbytes=saved()))
        return out.detach().float().cpu()

    def backward_kept(
        self, step: int, microbatch_id: str, samples: int, grad_output: Tensor, accept: bool = True
    ) -> Tensor | None:
        """Backpropagate `grad_output` through the forward kept for `microbatch_id`; raises NotKept
        if there is none (evicted, never kept, or another step's)."""
        self.check_step(step)
        entry = self.kept.take(microbatch_id, step)
        if entry is None:
            raise NotKept(f"{NOT_KEPT}: stage {self.stage} keeps no forward of microbatch {microbatch_id}")
        out = entry.output
        grads = torch.autograd.grad(
            out, self._grad_targets(entry.inputs), grad_outputs=grad_output.to(self.device, out.dtype)
        )
        return self._accumulate(microbatch_id, samples, entry.inputs, grads, accept)

    def backward(
        self, step: int, microbatch_id: str, samples: int, x: Tensor, grad_output: Tensor, accept: bool = True
    ) -> Tensor | None:
        """Recompute the forward on `x` and backpropagate `grad_output`; returns the input gradient.

        `accept=False` computes without accumulating (the caller's deadline passed meanwhile).
        """
        self.check_step(step)
        inputs = self._input(x)
        out = self.module(inputs)
        grads = torch.autograd.grad(
            out, self._grad_targets(inputs), grad_outputs=grad_output.to(self.device, out.dtype)
        )
        return self._accumulate(microbatch_id, samples, inputs, grads, accept)

    def forward_backward(
        self, step: int, microbatch_id: str, samples: int, x: Tensor, targets: Tensor, accept: bool = True
    ) -> tuple[float, Tensor | None]:
        """Last stage: loss of the microbatch and the gradient of (mean loss x samples) w.r.t. its input.

        Scaling by the sample count makes the accumulated gradient a sum over samples; the step
        divides by the stage's own sample count, so microbatches of any size weigh per sample.
        """
        self.check_step(step)
        if not self.module.is_last:
            raise StageError(f"stage {self.stage} is not the last stage; it has no loss")
        inputs = self._input(x)
        loss = self.module.loss(self.module(inputs), targets.to(self.device))
        grads = torch.autograd.grad(loss * samples, self._grad_targets(inputs))
        return float(loss.detach()), self._accumulate(microbatch_id, samples, inputs, grads, accept)

    def _input(self, x: Tensor) -> Tensor:
        x = x.to(self.device)
        if self.module.is_first:
            return x
        return x.detach().requires_grad_(True)

    def _grad_targets(self, inputs: Tensor) -> list[Tensor]:
        return self._params if self.module.is_first else [inputs, *self._params]

    def _accumulate(
        self, microbatch_id: str, samples: int, inputs: Tensor, grads: tuple[Tensor, ...], accept: bool
    ) -> Tensor | None:
        grad_input = None if self.module.is_first else grads[0].float().cpu()
        param_grads = grads if self.module.is_first else grads[1:]
        if not accept:
            return grad_input
        if self.frozen:
            raise StageError(f"stage {self.stage} is averaging step {self.step}; late call refused")
        if microbatch_id not in self.accumulated:
            for acc, grad in zip(self._accumulator, param_grads, strict=True):
                acc.add_(grad)
            self.accumulated[microbatch_id] = samples
        return grad_input

    def flat_gradients(self) -> Tensor:
        """This peer's accumulated gradient sum, flattened (float32, CPU) for averaging."""
        return torch.cat([a.reshape(-1) for a in self._accumulator]).float().cpu()

    def apply_step(self, summed: Tensor, samples: int, learning_rate: float, grad_scale: float) -> None:
        """Take the optimizer step with the stage's summed gradient over `samples` samples,
        scaled by the clipping factor the coordinator computed from the whole model's norm."""
        if samples > 0:
            averaged = summed * (grad_scale / samples)
            grads, offset = [], 0
            for param in self._params:
                n = param.numel()
                grads.append(averaged[offset : offset + n].view_as(param))
                offset += n
            apply_gradients(self.module, self.optimizer, grads, learning_rate)
        self.step += 1
        self.discard_accumulated()

    def discard_accumulated(self) -> None:
        """Drop this step's gradients: the coordinator that granted them no longer knows them
        (it restarted, or dropped this peer), so they would be counted by nobody."""
        self.frozen = False
        self.kept.clear()
        self.accumulated.clear()
        for acc in self._accumulator:
            acc.zero_()

    def export_state(self) -> dict[str, Tensor]:
        """Parameters and optimizer state as flat named tensors (for a peer joining the stage)."""
        state = {f"model.{k}": v.detach().cpu().contiguous() for k, v in self.module.state_dict().items()}
        for index, param in enumerate(self._params):
            for key, value in self.optimizer.state.get(param, {}).items():
                tensor = value if isinstance(value, Tensor) else torch.tensor(value)
                state[f"optim.{index}.{key}"] = tensor.detach().cpu().contiguous()
        return state

    def import_state(self, state: dict[str, Tensor], step: int) -> None:
        model_state = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
        self.module.load_state_dict(model_state, strict=True)
        optim_state: dict[int, dict[str, Tensor]] = {}
        for key, value in state.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                optim_state.setdefault(int(index), {})[name] = value.to(self.device)
        current = self.optimizer.state_dict()
        current["state"] = optim_state
        self.optimizer.load_state_dict(current)
        self.step = step
        self.discard_accumulated()
