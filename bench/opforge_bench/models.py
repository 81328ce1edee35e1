"""Real model code with opforge ops swapped in: transformers' LLaMA MLP and decoder layer,
torchvision's EfficientNet-B0 (random weights, nothing downloaded).

The swaps are the README's recommended way: the MLP's gate and up projections as one Linear whose
[..., 2*d] output feeds opforge SwiGLU directly (serving engines' form; a cat of the two Linears is
the form a user writes first, kept for comparison), LlamaRMSNorm as opforge RMSNorm, SiLU as
opforge Swish.
"""
from __future__ import annotations

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach the hub

import torch
from torch import nn

import opforge_torch  # noqa: F401  (registers torch.ops.opforge)

LLAMA_SHAPE = {"hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8}


def llama_config(**overrides):
    from transformers import LlamaConfig

    values = {**LLAMA_SHAPE, "num_key_value_heads": LLAMA_SHAPE["num_attention_heads"],
              "num_hidden_layers": 1, "vocab_size": 256, "attn_implementation": "sdpa", **overrides}
    return LlamaConfig(**values)


class GateUpSwiGLUMLP(nn.Module):
    """down(SwiGLU(gate_up(x))): one GEMM writes [gate | up], one kernel gates it."""

    def __init__(self, gate_up: nn.Linear, down: nn.Linear):
        super().__init__()
        self.gate_up_proj, self.down_proj = gate_up, down

    @classmethod
    def from_llama(cls, mlp) -> GateUpSwiGLUMLP:
        gate, up = mlp.gate_proj, mlp.up_proj
        gate_up = torch.nn.utils.skip_init(  # no initial draw: the weights are copied next
            nn.Linear, gate.in_features, 2 * gate.out_features, bias=gate.bias is not None,
            dtype=gate.weight.dtype)
        with torch.no_grad():
            gate_up.weight.copy_(torch.cat([gate.weight, up.weight]))
            if gate.bias is not None:
                gate_up.bias.copy_(torch.cat([gate.bias, up.bias]))
        return cls(gate_up, mlp.down_proj)

    def forward(self, x):
        return self.down_proj(torch.ops.opforge.swiglu(self.gate_up_proj(x)))


class CatSwiGLUMLP(nn.Module):
    """down(SwiGLU(cat(gate(x), up(x)))): HF's two Linears, then the fused gate (one copy more)."""

    def __init__(self, mlp):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x):
        return self.down_proj(torch.ops.opforge.swiglu(
            torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)))


class GemmsAlone(nn.Module):
    """LlamaMLP's three GEMMs and nothing else (down takes the gate's output): the time no fused
    activation can go below, so HF's time over it is what any activation fusion can gain at most."""

    def __init__(self, mlp):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x):
        return self.down_proj(self.gate_proj(x)), self.up_proj(x)


class OpforgeRMSNorm(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.weight, self.epsilon = norm.weight, float(norm.variance_epsilon)

    def forward(self, x):
        return torch.ops.opforge.rms_norm(x, self.weight, self.epsilon)


class OpforgeSwish(nn.Module):
    def forward(self, x):
        return torch.ops.opforge.swish(x)


def llama_mlps(config=None) -> dict:
    """HF's LlamaMLP and the same weights in the two opforge forms."""
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(0)
    hf = LlamaMLP(config or llama_config()).eval()
    return {"HF LlamaMLP": hf, "gate_up Linear + opforge SwiGLU": GateUpSwiGLUMLP.from_llama(hf),
            "cat of two Linears + opforge SwiGLU": CatSwiGLUMLP(hf)}


class DecoderLayerCall(nn.Module):
    """A decoder layer as a function of (hidden states, cos, sin): what both exporters can trace."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden, cos, sin):
        return self.layer(hidden, position_embeddings=(cos, sin))


def with_opforge(layer):
    """A copy of a LlamaDecoderLayer with the MLP as GateUpSwiGLUMLP and opforge RMSNorms."""
    layer = copy.deepcopy(layer)
    layer.mlp = GateUpSwiGLUMLP.from_llama(layer.mlp)
    layer.input_layernorm = OpforgeRMSNorm(layer.input_layernorm)
    layer.post_attention_layernorm = OpforgeRMSNorm(layer.post_attention_layernorm)
    return layer


def llama_layers(config=None) -> dict:
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(0)
    hf = LlamaDecoderLayer(config or llama_config(), layer_idx=0).eval()
    return {"HF LlamaDecoderLayer": DecoderLayerCall(hf), "opforge": DecoderLayerCall(with_opforge(hf))}


def rotary(config, tokens: int, batch: int = 1):
    """(cos, sin) of LlamaRotaryEmbedding for positions 0..tokens-1."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope = LlamaRotaryEmbedding(config)
    probe = torch.zeros(batch, tokens, config.hidden_size)
    positions = torch.arange(tokens).unsqueeze(0).expand(batch, -1)
    return rope(probe, positions)


def with_opforge_swish(model: nn.Module) -> nn.Module:
    """A copy of the model with every nn.SiLU replaced by opforge Swish."""
    model = copy.deepcopy(model)
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.SiLU):
                setattr(parent, name, OpforgeSwish())
    return model


def efficientnets() -> dict:
    from torchvision.models import efficientnet_b0

    torch.manual_seed(0)
    tv = efficientnet_b0(weights=None).eval()
    return {"torchvision EfficientNet-B0": tv, "opforge Swish": with_opforge_swish(tv)}
