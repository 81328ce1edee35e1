"""``opforge_torch.patch(model)``: a transformers LLaMA, Mistral, Qwen2, Qwen3, Gemma, Gemma2 or
Gemma3 text model computed with the opforge ops, in place, for that model instance only.

- every RMSNorm of the family -> opforge RMSNorm (:class:`RMSNorm`, holding HF's own ``weight``
  Parameter; Gemma's ``x * (1 + w)`` with ``W = 1 + w`` computed in float32 at each call and kept
  in float32 beside a bfloat16/float16 X, as Gemma computes);
- the gated MLP -> one GEMM into ``[gate | up]`` and opforge SwiGLU (``silu``) or GeGLU
  (``gelu_pytorch_tanh``) (:class:`GatedMLP`);
- the residual add and the RMSNorm after it -> opforge AddRMSNorm, in each decoder layer: LLaMA,
  Mistral, Qwen2, Qwen3, Gemma ``h = x + attn(...); y = post_attention_layernorm(h)``; Gemma2 and
  Gemma3 ``h = x + post_attention_layernorm(attn(...)); y = pre_feedforward_layernorm(h)`` (their
  post-attention norm is applied before the add, so it is the pre-feedforward norm that follows it).

State-dict keys stay Hugging Face's (``load_state_dict`` of an HF checkpoint, ``save_pretrained``
and HF's ``from_pretrained`` of what it saved work unchanged). transformers is never imported here:
classes are recognized by their module and name, exactly (a subclass is refused).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections import Counter
from typing import Any

import torch
from torch import nn

import opforge_spec

from ._ops_generated import add_rms_norm as _add_rms_norm
from ._ops_generated import geglu as _geglu
from ._ops_generated import rms_norm as _rms_norm
from ._ops_generated import swiglu as _swiglu

__all__ = ["FAMILIES", "GatedMLP", "RMSNorm", "patch"]

_HEADS = ("ForCausalLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")


@dataclasses.dataclass(frozen=True)
class Family:
    """One transformers model family: where its classes live and how its decoder layer is built."""

    name: str
    module: str  # transformers.models.<x>.modeling_<x>
    prefix: str  # the class names' prefix (Llama, Gemma3, ...)
    models: tuple[str, ...]  # the model classes patch() accepts (suffixes after the prefix)
    plus_one: bool  # Gemma's RMSNorm scales by 1 + w
    normed_attention: bool  # Gemma2/3: the attention output is normalized before the residual add

    def class_name(self, suffix: str) -> str:
        return self.prefix + suffix

    def knows(self, module: nn.Module, suffix: str) -> bool:
        cls = type(module)
        return cls.__module__ == self.module and cls.__name__ == self.class_name(suffix)

    def accepts(self, module: nn.Module) -> bool:
        return any(self.knows(module, suffix) for suffix in (*self.models, "DecoderLayer"))


def _family(name: str, package: str, prefix: str, *, models=("Model", *_HEADS), plus_one=False,
            normed_attention=False) -> Family:
    return Family(name, f"transformers.models.{package}.modeling_{package}", prefix, models,
                  plus_one, normed_attention)


FAMILIES = (
    _family("LLaMA", "llama", "Llama"),
    _family("Mistral", "mistral", "Mistral"),
    _family("Qwen2", "qwen2", "Qwen2"),
    _family("Qwen3", "qwen3", "Qwen3"),
    _family("Gemma", "gemma", "Gemma", plus_one=True),
    _family("Gemma2", "gemma2", "Gemma2", plus_one=True, normed_attention=True),
    _family("Gemma3", "gemma3", "Gemma3", models=("TextModel", "ForCausalLM", "TextForSequenceClassification"),
            plus_one=True, normed_attention=True),
)


def _qualified(module: nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def _takes_float32_weight(dtype: torch.dtype) -> bool:
    return "float32" in opforge_spec.weight_dtypes(str(dtype).removeprefix("torch."))


# ---- RMSNorm ---------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """An HF RMSNorm computed by opforge RMSNorm. It holds the HF module's own ``weight`` Parameter
    (same key, same tensor); with ``plus_one`` (Gemma) the op's W is ``1 + weight``, computed in
    float32 at each call, as Gemma computes it."""

    def __init__(self, weight: nn.Parameter, eps: float, plus_one: bool, replaces: str):
        super().__init__()
        self.weight = weight
        self.eps = float(eps)
        self.plus_one = plus_one
        self.replaces = replaces

    @classmethod
    def from_hf(cls, norm: Any, family: Family) -> RMSNorm:
        eps = norm.eps if family.plus_one else norm.variance_epsilon
        return cls(norm.weight, eps, family.plus_one, type(norm).__name__)

    def scale(self, dtype: torch.dtype) -> torch.Tensor:
        """The op's W for an X of `dtype`: Gemma's 1 + w stays float32 where the op takes a float32 W
        (a 16-bit X: a mixed-dtype call, opforge_spec.weight_dtypes), as Gemma computes it;
        rounded to bfloat16, it moved about a quarter of the norm's outputs."""
        weight = 1.0 + self.weight.float() if self.plus_one else self.weight
        if weight.dtype == dtype or (self.plus_one and _takes_float32_weight(dtype)):
            return weight
        return weight.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, self.scale(x.dtype), self.eps)

    def extra_repr(self) -> str:
        scale = "1 + weight" if self.plus_one else "weight"
        return f"{tuple(self.weight.shape)}, eps={self.eps}, W={scale}, replaces {self.replaces}"


# ---- the gated MLP ---------------------------------------------------------------------------
_GLU_OPS = {"SwiGLU": _swiglu, "GeGLU": _geglu}


def _glu_op_name(mlp: Any, where: str) -> str:
    """SwiGLU or GeGLU for the MLP's activation module; any other is refused, naming it."""
    act = mlp.act_fn
    kind = type(act).__name__
    if isinstance(act, nn.SiLU) or kind == "SiLUActivation":
        return "SwiGLU"
    if kind == "GELUTanh" or (isinstance(act, nn.GELU) and act.approximate == "tanh"):
        return "GeGLU"
    config = getattr(mlp, "config", None)
    name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    raise ValueError(f"opforge_torch.patch: {type(mlp).__name__} ({where}): activation {name!r} "
                     f"({kind}) has no opforge op (silu -> SwiGLU, gelu_pytorch_tanh -> GeGLU); "
                     "pass swiglu=False, geglu=False to leave the MLPs as they are")


def _stacked_linear(gate: nn.Linear, up: nn.Linear) -> nn.Linear:
    """One Linear computing [gate(x) | up(x)]: a single [2I, H] weight, filled once."""
    weight = gate.weight
    stacked = nn.utils.skip_init(nn.Linear, gate.in_features, gate.out_features + up.out_features,
                                 bias=gate.bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        torch.cat([gate.weight, up.weight], out=stacked.weight)
        if gate.bias is not None:
            torch.cat([gate.bias, up.bias], out=stacked.bias)
    stacked.requires_grad_(weight.requires_grad)
    return stacked


class GatedMLP(nn.Module):
    """``down_proj(GLU(gate_up_proj(x)))``: HF's gate and up projections as one Linear whose
    ``[..., 2I]`` output (gate half first) feeds opforge SwiGLU or GeGLU directly; ``down_proj`` is
    HF's module. The state dict shows HF's ``gate_proj.*`` and ``up_proj.*`` (views of the one
    weight, nothing copied), and loading takes them (concatenated into it)."""

    def __init__(self, mlp: Any, op: str):
        super().__init__()
        self.gate_up_proj = _stacked_linear(mlp.gate_proj, mlp.up_proj)
        self.down_proj = mlp.down_proj
        self.intermediate_size = mlp.gate_proj.out_features
        self.op = op
        self.replaces = type(mlp).__name__
        self.register_state_dict_post_hook(GatedMLP._hf_keys)
        self.register_load_state_dict_pre_hook(GatedMLP._stacked_keys)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(_GLU_OPS[self.op](self.gate_up_proj(x)))

    def extra_repr(self) -> str:
        return f"op={self.op}, replaces {self.replaces}"

    @staticmethod
    def _hf_keys(module: GatedMLP, state_dict, prefix: str, local_metadata) -> None:
        """gate_up_proj.<p> -> gate_proj.<p>, up_proj.<p> (views), in HF's key order. Not for
        state_dict(keep_vars=True), which asks for the Parameters themselves (the TorchScript
        tracer reads the model's variables so)."""
        if isinstance(state_dict.get(f"{prefix}gate_up_proj.weight"), nn.Parameter):
            return
        stacked = {p: state_dict.pop(f"{prefix}gate_up_proj.{p}", None) for p in ("weight", "bias")}
        for index, name in enumerate(("gate_proj", "up_proj")):
            for param, value in stacked.items():
                if value is not None:
                    state_dict[f"{prefix}{name}.{param}"] = value.split(module.intermediate_size)[index]
        for key in [k for k in state_dict if k.startswith(f"{prefix}down_proj.")]:
            state_dict.move_to_end(key)

    @staticmethod
    def _stacked_keys(module: GatedMLP, state_dict, prefix: str, *_) -> None:
        """HF's gate_proj.<p>, up_proj.<p> -> gate_up_proj.<p> (load_state_dict, assign=True too)."""
        for param in ("weight", "bias"):
            gate, up = f"{prefix}gate_proj.{param}", f"{prefix}up_proj.{param}"
            if gate in state_dict and up in state_dict and state_dict[gate].shape == state_dict[up].shape:
                state_dict[f"{prefix}gate_up_proj.{param}"] = torch.cat([state_dict.pop(gate), state_dict.pop(up)])


# ---- the residual add + RMSNorm of a decoder layer --------------------------------------------
def _add_norm(norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(residual + x), residual + x) in one opforge AddRMSNorm."""
    return _add_rms_norm(x, residual, norm.scale(x.dtype), norm.eps)


def _keywords(layer: Any, args: tuple, kwargs: dict) -> dict:
    """The layer's arguments after hidden_states, all by keyword (HF passes them on to self_attn)."""
    return {**dict(zip(layer._opforge_arguments, args)), **kwargs}


def _fused_after_attention(self, hidden_states, *args, **kwargs):
    """LLaMA's layer: h = x + attn(norm(x)); y = post_attention_layernorm(h) is one AddRMSNorm."""
    attended, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                 **_keywords(self, args, kwargs))
    normed, hidden_states = _add_norm(self.post_attention_layernorm, attended, hidden_states)
    return hidden_states + self.mlp(normed)


def _fused_before_feedforward(self, hidden_states, *args, **kwargs):
    """Gemma2/3's layer: h = x + post_attention_layernorm(attn(norm(x))); y =
    pre_feedforward_layernorm(h) is one AddRMSNorm."""
    attended, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                 **_keywords(self, args, kwargs))
    normed, hidden_states = _add_norm(self.pre_feedforward_layernorm,
                                      self.post_attention_layernorm(attended), hidden_states)
    return hidden_states + self.post_feedforward_layernorm(self.mlp(normed))


def _positional_names(layer: nn.Module) -> tuple[str, ...]:
    """The names of the original forward's parameters after hidden_states (positional calls)."""
    params = inspect.signature(type(layer).forward).parameters.values()
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(named[2:])  # self, hidden_states


def _require_transformers_5(layer: nn.Module) -> None:
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        raise ValueError(f"opforge_torch.patch: {type(layer).__name__}: the AddRMSNorm fusion follows "
                         f"transformers >= 5 decoder layers, not {transformers.__version__}; "
                         "pass add_rms_norm=False")


def _fuse_layer(layer: Any, family: Family) -> None:
    """Rebinds this layer's forward (this instance only); the norm AddRMSNorm computes becomes an
    opforge RMSNorm module (holding HF's weight), which the layer reads W and epsilon from."""
    _require_transformers_5(layer)
    consumed = "pre_feedforward_layernorm" if family.normed_attention else "post_attention_layernorm"
    norm = getattr(layer, consumed)
    if not isinstance(norm, RMSNorm):
        setattr(layer, consumed, RMSNorm.from_hf(norm, family))
    layer._opforge_arguments = _positional_names(layer)
    fused = _fused_before_feedforward if family.normed_attention else _fused_after_attention
    layer.forward = types.MethodType(fused, layer)


# ---- patch() ---------------------------------------------------------------------------------
def _family_of(model: nn.Module) -> Family:
    for family in FAMILIES:
        if family.accepts(model):
            return family
    known = ", ".join(f.name for f in FAMILIES)
    raise TypeError(f"opforge_torch.patch: refusing {type(model).__name__} ({_qualified(model)}): "
                    f"not a model opforge knows (the text models of {known}, or their decoder layers)")


def _patch_layers(model: nn.Module, family: Family, counts: Counter) -> None:
    for layer in list(model.modules()):
        if family.knows(layer, "DecoderLayer") and "forward" not in vars(layer):
            _fuse_layer(layer, family)
            counts[f"{type(layer).__name__} -> AddRMSNorm"] += 1


def _glu_ops(model: nn.Module, family: Family) -> dict[int, str]:
    """{id(mlp): SwiGLU or GeGLU} for every MLP of the family (checked before anything changes)."""
    return {id(m): _glu_op_name(m, name) for name, m in model.named_modules() if family.knows(m, "MLP")}


def _replacement(child: nn.Module, family: Family, ops: dict[str, bool], glu: dict[int, str]):
    if ops["RMSNorm"] and family.knows(child, "RMSNorm"):
        return RMSNorm.from_hf(child, family)
    if id(child) in glu and ops[glu[id(child)]]:
        return GatedMLP(child, glu[id(child)])
    return None


def _patch_children(model: nn.Module, family: Family, ops: dict[str, bool], counts: Counter) -> None:
    glu = _glu_ops(model, family) if ops["SwiGLU"] or ops["GeGLU"] else {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = _replacement(child, family, ops, glu)
            if new is not None:
                setattr(parent, name, new)
                counts[f"{type(child).__name__} -> {getattr(new, 'op', 'RMSNorm')}"] += 1


def patch(model: nn.Module, *, rms_norm: bool = True, swiglu: bool = True, geglu: bool = True,
          add_rms_norm: bool = True) -> dict[str, int]:
    """Computes `model` (a LLaMA, Mistral, Qwen2, Qwen3, Gemma, Gemma2 or Gemma3 text model of
    transformers, or one of their decoder layers) with the opforge ops, in place; only this
    instance changes. Each keyword turns one op off. Returns what was replaced, per HF class:
    ``{"LlamaRMSNorm -> RMSNorm": 3, "LlamaMLP -> SwiGLU": 2, "LlamaDecoderLayer -> AddRMSNorm": 2}``
    (a norm computed by AddRMSNorm is counted there, not under RMSNorm). A model already patched
    gives ``{}``. Patch before making an optimizer: the MLPs get new (stacked) parameters.

    Raises TypeError for a model of another class (subclasses too), ValueError for an MLP whose
    activation opforge has no op for, each naming it."""
    family = _family_of(model)
    ops = {"RMSNorm": rms_norm, "SwiGLU": swiglu, "GeGLU": geglu}
    if swiglu or geglu:
        _glu_ops(model, family)  # refuses an activation before anything changes
    counts: Counter = Counter()
    if add_rms_norm:
        _patch_layers(model, family, counts)
    _patch_children(model, family, ops, counts)
    return dict(counts)
