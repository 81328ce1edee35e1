"""opforge_torch.patch over transformers' own model classes (tiny configs, seeded random weights,
nothing downloaded): logits and gradients as HF's, HF's state-dict keys, the documented counts,
torch.compile(fullgraph=True), ONNX export run in ONNX Runtime, refusals in one line."""

import copy
import os

import numpy as np
import pytest
import torch

import opforge_torch
import opforge_torch.onnx as opforge_onnx

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach the hub


def _transformers():
    """transformers, or a skip naming why; a failure where the caller says it must be there
    (OPFORGE_REQUIRE_TRANSFORMERS=1: the test suite's torch stage installs it)."""
    try:
        import transformers
    except ImportError as err:
        if os.environ.get("OPFORGE_REQUIRE_TRANSFORMERS") == "1":
            pytest.fail(f"OPFORGE_REQUIRE_TRANSFORMERS=1 but transformers does not import: {err}",
                        pytrace=False)
        pytest.skip("transformers is not installed (pip install transformers)", allow_module_level=True)
    return transformers


tf = _transformers()

LAYERS = 2
SHAPE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": LAYERS,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 64}
# family: (config class, model class, config overrides, RMSNorms per layer besides the one AddRMSNorm computes)
FAMILIES = {
    "LLaMA": ("LlamaConfig", "LlamaForCausalLM", {}, 1),  # input_layernorm
    "Mistral": ("MistralConfig", "MistralForCausalLM", {}, 1),
    "Qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}, 1),
    "Qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}, 3),  # + q_norm, k_norm
    "Gemma": ("GemmaConfig", "GemmaForCausalLM", {"hidden_act": "gelu_pytorch_tanh"}, 1),
    "Gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {}, 3),  # input, post-attention, post-feedforward
    "Gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {}, 5),  # + q_norm, k_norm
}


def _prefix(model) -> str:
    return type(model).__name__.removesuffix("ForCausalLM")


def expected_counts(family: str, model) -> dict:
    """The documented counts (packages/torch_ext/README.md): per layer one MLP, one AddRMSNorm and
    the family's other RMSNorms, plus the final norm."""
    prefix, glu = _prefix(model), ("GeGLU" if family.startswith("Gemma") else "SwiGLU")
    return {f"{prefix}RMSNorm -> RMSNorm": FAMILIES[family][3] * LAYERS + 1,
            f"{prefix}MLP -> {glu}": LAYERS, f"{prefix}DecoderLayer -> AddRMSNorm": LAYERS}


def hf_model(family: str, seed: int = 0, **overrides):
    """A tiny HF model with random weights, its norm weights drawn too (so W and Gemma's 1 + w count)."""
    config_class, model_class, extra, _ = FAMILIES[family]
    config = getattr(tf, config_class)(**SHAPE, **extra, **overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(tf, model_class)(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.2).add_(0.0 if family.startswith("Gemma") else 1.0)
    return model


def patched(family: str, **ops):
    hf = hf_model(family)
    ours = copy.deepcopy(hf)
    return hf, ours, opforge_torch.patch(ours, **ops)


def tokens(batch: int = 2, seq: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, SHAPE["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def hf_named_grads(model) -> dict:
    """Gradients by HF's parameter names (a stacked gate_up_proj split back into gate and up)."""
    grads = {}
    for name, param in model.named_parameters():
        if ".gate_up_proj." in name:
            gate, up = param.grad.chunk(2)
            grads[name.replace("gate_up_proj", "gate_proj")] = gate
            grads[name.replace("gate_up_proj", "up_proj")] = up
        else:
            grads[name] = param.grad
    return grads


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over max |want|: a difference relative to the tensor's scale."""
    return ((got - want).abs().max() / want.abs().max()).item()


def _loss(model, ids):
    out = model(input_ids=ids, labels=ids)
    return out.logits, out.loss


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_gradients_match_hf(family):
    hf, ours, counts = patched(family)
    assert counts == expected_counts(family, hf)
    ids = tokens()
    (want, hf_loss), (got, loss) = _loss(hf, ids), _loss(ours, ids)
    hf_loss.backward()
    loss.backward()
    logits_diff = relative(got, want)
    want_grads, got_grads = hf_named_grads(hf), hf_named_grads(ours)
    assert set(got_grads) == set(want_grads)
    grads_diff = max(relative(got_grads[n], g) for n, g in want_grads.items())
    print(f"{family}: {counts}; logits {logits_diff:.2e}, gradients {grads_diff:.2e}")
    assert logits_diff <= 1e-5
    assert grads_diff <= 1e-3


# bfloat16: "no farther from float32 than HF's own bfloat16". Two equally exact bfloat16 computations
# of one model land within about +-2% of each other's distance, so the bar is the mean ratio over
# three seeded models: opforge's distance / HF's <= BF16_BAR. Gemma's norm weights are as drawn: its
# W = 1 + w is a float32 W beside the bfloat16 X (a mixed-dtype call, issue 31, Build 2), as Gemma
# computes it. Measured: LLaMA, Mistral, Qwen2, Qwen3 0.90-0.99 (opforge rounds once where HF's norms
# and MLP round twice); Gemma, Gemma2, Gemma3: see the README.
BF16_SEEDS = (0, 1, 2)
BF16_BAR = 1.03
GEMMAS = [f for f in FAMILIES if f.startswith("Gemma")]


def rms_relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """RMS of the difference over the RMS of `want` (steadier than the maximum for bfloat16)."""
    return ((got.float() - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()).item()


def bf16_distances(hf, ids) -> tuple:
    """(HF's bfloat16 logits, opforge's) distances from HF's float32 logits."""
    with torch.no_grad():
        want = hf(ids).logits
        hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16)
        ours = copy.deepcopy(hf_bf16)
        opforge_torch.patch(ours)
        return rms_relative(hf_bf16(ids).logits, want), rms_relative(ours(ids).logits, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_is_no_farther_from_fp32_than_hf_bf16(family):
    ratios = []
    for seed in BF16_SEEDS:
        hf, ids = hf_model(family, seed=seed), tokens(4, 32, seed + 1)
        theirs, ours = bf16_distances(hf, ids)
        ratios.append(ours / theirs)
        print(f"{family} seed {seed}: bf16 logits from fp32 (RMS, relative): HF {theirs:.2e}, "
              f"opforge {ours:.2e}, ratio {ours / theirs:.2f}")
    mean = sum(ratios) / len(ratios)
    print(f"{family}: opforge / HF bf16 distance, mean over seeds {mean:.3f}")
    assert mean <= BF16_BAR, f"{family}: opforge's bf16 logits {mean:.3f}x HF's distance from fp32"


@pytest.mark.parametrize("family", GEMMAS)
def test_gemma_bf16_norm_is_hf_s(family):
    """A bfloat16 Gemma norm computes x * (1 + w) in float32, 1 + w kept in float32 (the op's W
    beside the bfloat16 X): its outputs are HF's but where the two float32 computations round to
    neighbouring bfloat16 values. With W = 1 + w rounded to bfloat16 (before Build 2) 27% of them
    differed."""
    norm = hf_model(family).model.norm.to(torch.bfloat16)
    ours = opforge_torch.hf.RMSNorm.from_hf(norm, next(f for f in opforge_torch.hf.FAMILIES if f.name == family))
    assert ours.scale(torch.bfloat16).dtype == torch.float32
    x = torch.randn(64, SHAPE["hidden_size"], generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    with torch.no_grad():
        got, want = ours(x), norm(x)
    ulps = (got.float() - want.float()).abs() / torch.finfo(torch.bfloat16).eps / want.float().abs().clamp_min(1e-30)
    print(f"{family}: bf16 norm outputs unlike HF's {(got != want).float().mean().item():.2%}")
    assert got.dtype == torch.bfloat16
    assert (got != want).float().mean() <= 0.01 and ulps.max() <= 1


def test_bf16_gemma_loads_an_hf_checkpoint_after_patching():
    """The norms keep HF's (bfloat16) weight Parameters, W = 1 + w made in float32 from it at each call:
    load_state_dict of an HF checkpoint after patching gives what patching that checkpoint gives."""
    ours = hf_model("Gemma2", seed=0).to(torch.bfloat16)
    opforge_torch.patch(ours)
    other = hf_model("Gemma2", seed=7).to(torch.bfloat16)
    ours.load_state_dict(other.state_dict())
    opforge_torch.patch(other)
    ids = tokens()
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, other(ids).logits)
    assert ours.model.norm.weight.dtype == torch.bfloat16


def test_each_op_can_be_left_out():
    hf, ours, counts = patched("LLaMA", add_rms_norm=False, swiglu=False)
    assert counts == {"LlamaRMSNorm -> RMSNorm": 2 * LAYERS + 1}
    assert type(ours.model.layers[0].mlp).__name__ == "LlamaMLP"
    assert "forward" not in vars(ours.model.layers[0])
    ids = tokens()
    assert relative(ours(ids).logits, hf(ids).logits) <= 1e-5
    assert opforge_torch.patch(ours, rms_norm=False) == {"LlamaMLP -> SwiGLU": LAYERS,
                                                         "LlamaDecoderLayer -> AddRMSNorm": LAYERS}
    assert opforge_torch.patch(ours) == {}  # everything is patched already
    assert relative(ours(ids).logits, hf(ids).logits) <= 1e-5


def test_patches_a_decoder_layer_alone():
    """A decoder layer is accepted on its own; its rebound forward takes HF's arguments by keyword
    or by position."""
    hf = hf_model("LLaMA").model
    layer = copy.deepcopy(hf.layers[0])
    assert opforge_torch.patch(layer) == {"LlamaDecoderLayer -> AddRMSNorm": 1,
                                          "LlamaRMSNorm -> RMSNorm": 1, "LlamaMLP -> SwiGLU": 1}
    hidden = torch.randn(2, 5, SHAPE["hidden_size"], generator=torch.Generator().manual_seed(3))
    rope = hf.rotary_emb(hidden, torch.arange(5).unsqueeze(0))
    want = hf.layers[0](hidden, position_embeddings=rope)
    assert relative(layer(hidden, position_embeddings=rope), want) <= 1e-5
    assert relative(layer(hidden, None, None, None, False, rope), want) <= 1e-5


def test_loading_keeps_hf_keys(tmp_path):
    """state_dict() has HF's keys (in HF's order); load_state_dict takes an HF checkpoint; HF's
    from_pretrained loads what a patched model saved."""
    hf, ours, _ = patched("LLaMA")
    assert list(ours.state_dict()) == list(hf.state_dict())
    other = hf_model("LLaMA", seed=7)
    ours.load_state_dict(other.state_dict())
    ids = tokens()
    assert relative(ours(ids).logits, other(ids).logits) <= 1e-5
    ours.save_pretrained(tmp_path)
    reloaded = tf.LlamaForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert relative(reloaded(ids).logits, other(ids).logits) == 0.0


def test_stacked_mlp_keeps_biases_and_one_copy():
    hf = hf_model("LLaMA", mlp_bias=True)
    ours = copy.deepcopy(hf)
    opforge_torch.patch(ours)
    mlp = ours.model.layers[0].mlp
    assert [n for n, _ in mlp.named_parameters()] == ["gate_up_proj.weight", "gate_up_proj.bias",
                                                      "down_proj.weight", "down_proj.bias"]
    state = ours.state_dict()
    assert list(state) == list(hf.state_dict())
    gate = state["model.layers.0.mlp.gate_proj.weight"]
    assert gate.data_ptr() == mlp.gate_up_proj.weight.data_ptr()  # a view: nothing copied
    ids = tokens()
    assert relative(ours(ids).logits, hf(ids).logits) <= 1e-5


def test_refuses_what_it_does_not_know():
    with pytest.raises(TypeError) as linear:
        opforge_torch.patch(torch.nn.utils.skip_init(torch.nn.Linear, 2, 2))
    assert str(linear.value).startswith("opforge_torch.patch: refusing Linear (torch.nn.modules.linear.Linear)")

    class MyLlama(tf.LlamaForCausalLM):
        pass

    with pytest.raises(TypeError, match="refusing MyLlama"):
        opforge_torch.patch(MyLlama(hf_model("LLaMA").config))
    relu = hf_model("LLaMA", hidden_act="relu")
    with pytest.raises(ValueError, match=r"LlamaMLP \(model.layers.0.mlp\): activation 'relu'") as act:
        opforge_torch.patch(relu)
    assert "\n" not in str(linear.value) + str(act.value)
    assert not any(type(m).__module__.startswith("opforge_torch") for m in relu.modules())  # untouched
    assert opforge_torch.patch(relu, swiglu=False, geglu=False)["LlamaDecoderLayer -> AddRMSNorm"] == LAYERS


def test_refuses_a_transformers_model_of_another_family():
    """Phi-3: RMSNorm and a gated MLP too, but its own classes (a stacked gate_up_proj already):
    refused in one line naming it, nothing changed."""
    config = tf.Phi3Config(**SHAPE, pad_token_id=0)
    torch.manual_seed(0)
    phi3 = tf.Phi3ForCausalLM(config)
    with pytest.raises(TypeError) as refused:
        opforge_torch.patch(phi3)
    assert str(refused.value).startswith(
        "opforge_torch.patch: refusing Phi3ForCausalLM "
        "(transformers.models.phi3.modeling_phi3.Phi3ForCausalLM): not a model opforge knows")
    assert "\n" not in str(refused.value)
    assert not any(type(m).__module__.startswith("opforge_torch") for m in phi3.modules())


# ---- torch.compile, ONNX export and ONNX Runtime -------------------------------------------------
# Every family through torch.compile and both exporters (the acceptance of issue 31 names each):
# measured on the shared 2-core machine, loaded, about 5-8 s a compile, 6-20 s a dynamo export (the
# process's first of each the slowest), 1 s a TorchScript export.
EXPORTS = [(family, dynamo) for family in FAMILIES for dynamo in (False, True)]
opforge_onnx.reuse_torchlib_registry()  # torchlib's op list built once, not at each dynamo export


class OpforgeNodes:
    """A torch.compile backend counting the opforge ops in the graph it is given, then aot_eager
    (fake kernels, functionalized autograd)."""

    def __init__(self):
        self.ops: dict = {}
        self.backend = torch._dynamo.lookup_backend("aot_eager")

    def __call__(self, graph, example_inputs):
        for node in graph.graph.nodes:
            name = str(getattr(node.target, "__name__", node.target))
            if node.op == "call_function" and "opforge" in str(node.target):
                self.ops[name] = self.ops.get(name, 0) + 1
        return self.backend(graph, example_inputs)


@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_fullgraph_and_trains(family):
    torch._dynamo.reset()  # each family from a fresh state: no family's guards count toward another's recompile limit
    _, ours, counts = patched(family)
    eager = copy.deepcopy(ours)
    backend = OpforgeNodes()
    compiled = torch.compile(ours, fullgraph=True, backend=backend)
    ids = tokens()
    (want, want_loss), (got, loss) = _loss(eager, ids), _loss(compiled, ids)
    want_loss.backward()
    loss.backward()
    assert relative(got, want) <= 1e-6
    grads, want_grads = dict(ours.named_parameters()), dict(eager.named_parameters())
    assert max(relative(grads[n].grad, p.grad) for n, p in want_grads.items()) <= 1e-5
    print(f"{family}: opforge ops in the compiled graph {backend.ops}")
    assert sum(backend.ops.values()) == sum(counts.values())


def _ort_session(path):
    ort = pytest.importorskip("onnxruntime")
    opforge_ort = pytest.importorskip("opforge_ort", reason="opforge_ort (the ORT plugin) is not installed")
    options = ort.SessionOptions()
    options.register_custom_ops_library(opforge_ort.library_path())
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class Logits(torch.nn.Module):
    """(input_ids, attention_mask) -> logits: what the exporters trace (with a mask given, HF does
    not look for packed sequences, whose torch.diff the TorchScript exporter has no symbolic for)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _inputs(batch: int, seq: int, seed: int) -> tuple:
    ids = tokens(batch, seq, seed)
    return ids, torch.ones_like(ids)


def _dynamic_batch_and_length(dynamo: bool) -> dict:
    if dynamo:  # torch.export's form (dynamic_axes works there too, with a warning)
        axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
        return {"dynamic_shapes": {"input_ids": axes, "attention_mask": axes}}
    axes = {0: "batch", 1: "seq"}
    return {"dynamic_axes": {"input_ids": axes, "attention_mask": axes, "logits": axes}}


@pytest.mark.parametrize("family,dynamo", EXPORTS,
                         ids=[f"{f}-{'dynamo' if d else 'torchscript'}" for f, d in EXPORTS])
def test_exports_and_runs_in_ort(tmp_path, family, dynamo):
    onnx = pytest.importorskip("onnx")
    _, ours, counts = patched(family)
    model, path = Logits(ours), str(tmp_path / "model.onnx")
    opforge_onnx.export(model, _inputs(2, 7, 1), path, dynamo=dynamo, opset_version=18,
                        input_names=["input_ids", "attention_mask"], output_names=["logits"],
                        **_dynamic_batch_and_length(dynamo))
    nodes = [n.op_type for n in onnx.load(path).graph.node if n.domain == "opforge"]
    assert sorted(set(nodes)) == sorted({key.split(" -> ")[1] for key in counts})
    assert len(nodes) == sum(counts.values())
    session = _ort_session(path)
    for ids, mask in (_inputs(2, 7, 1), _inputs(3, 11, 2)):  # another batch and length than traced
        (got,) = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            want = model(ids, mask)
        assert np.isfinite(got).all()
        assert relative(torch.from_numpy(got), want) <= 1e-5
