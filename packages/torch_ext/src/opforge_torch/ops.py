"""Fake (meta) kernels and autograd for the opforge ops; Python entry points."""

import torch

_ops = torch.ops.opforge


def swish(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Y = X * sigmoid(beta * X)."""
    return _ops.swish(x, beta)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    """Y = X / sqrt(mean(X^2, last axis) + epsilon) * weight."""
    return _ops.rms_norm(x, weight, epsilon)


# Fake kernels: shapes/dtypes only. The real kernels return contiguous outputs, so do these
# (opcheck compares strides).
@torch.library.register_fake("opforge::swish")
def _swish_fake(x, beta=1.0):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("opforge::swish_backward")
def _swish_backward_fake(grad, x, beta):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("opforge::rms_norm")
def _rms_norm_fake(x, weight, epsilon=1e-6):
    # Same checks as the C++ kernels, so tracing (torch.compile/export) fails as eager does.
    torch._check(x.dim() >= 1, lambda: "opforge.RMSNorm: X: expected a tensor of rank >= 1, got rank 0")
    torch._check(
        weight.dim() == 1 and weight.shape[0] == x.shape[-1],
        lambda: f"opforge.RMSNorm: W: expected 1-D tensor of length {x.shape[-1]} (last dim of X), "
        f"got shape {list(weight.shape)}")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("opforge::rms_norm_backward")
def _rms_norm_backward_fake(grad, x, weight, epsilon):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    return dx, torch.empty_like(weight, memory_format=torch.contiguous_format)


def _swish_setup(ctx, inputs, output):
    x, beta = inputs
    ctx.save_for_backward(x)
    ctx.beta = beta


def _swish_grad(ctx, grad):
    (x,) = ctx.saved_tensors
    return _ops.swish_backward(grad, x, ctx.beta), None


def _rms_norm_setup(ctx, inputs, output):
    x, weight, epsilon = inputs
    ctx.save_for_backward(x, weight)
    ctx.epsilon = epsilon


def _rms_norm_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dweight = _ops.rms_norm_backward(grad, x, weight, ctx.epsilon)
    return dx, dweight, None


torch.library.register_autograd("opforge::swish", _swish_grad, setup_context=_swish_setup)
torch.library.register_autograd("opforge::rms_norm", _rms_norm_grad, setup_context=_rms_norm_setup)
