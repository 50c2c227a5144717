"""Whole models: what convert accepts and refuses, the model.mlir it writes
for each architecture, and the model digest."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from cq4p.cli import convert as cv
from cq4p.cli import main as cli
from cq4p.cli import upgrade as up
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import safetensors as st
from cq4p.model import architecture as arch
from cq4p.model import ir
from cq4p.model import reference as rf
from cq4p.model import synthetic


def run(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def variant(tmp_path, source, config_changes=None, drop=(), add=None, config=None):
    """A copy of the checkpoint `source` with config fields changed (None
    removes a field), tensors dropped or added (one extra shard)."""
    model = tmp_path / "variant"
    model.mkdir()
    for path in source.glob("*.safetensors"):
        entries = st.read_header(path)
        keep = {e.name: st.load(e) for e in entries if e.name not in drop}
        st.write(model / path.name, keep, "F32")
    if add:
        st.write(model / "extra.safetensors", add, "F32")
    content = config or json.loads((source / "config.json").read_text())
    for key, value in (config_changes or {}).items():
        if value is None:
            content.pop(key, None)
        else:
            content[key] = value
    (model / "config.json").write_text(json.dumps(content))
    return model


def random_checkpoint(directory, config, seed=0):
    """Random weights of the shapes `config` asks for."""
    rng = np.random.default_rng(seed)
    shapes = arch.model_spec(config).expected_shapes()
    tensors = {name: rng.standard_normal(shape) * 0.05 for name, shape in shapes.items()}
    return synthetic.write_checkpoint(str(directory), tensors, config, shards=1, dtype="F32")


def graph_of(bundle):
    return (bundle / "model.mlir").read_text()


# --- refusals ----------------------------------------------------------------

@pytest.mark.parametrize("model, changes, message", [
    ("llama", {"model_type": "phi3"},
     "model_type 'phi3' is not supported (supported: gemma3, gemma3_text, gemma4, gemma4_text, "
     "lfm2, llama, mistral, qwen2, qwen3)"),
    ("llama", {"architectures": ["LlamaForSequenceClassification"]},
     "architecture 'LlamaForSequenceClassification' is not supported for model_type 'llama'"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     "rope_scaling type 'yarn' is not supported (supported: linear, llama3)"),
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
     "rope_scaling low_freq_factor is missing"),
    ("llama", {"attention_bias": True}, "attention_bias true is not supported"),
    ("llama", {"mlp_bias": True}, "mlp_bias true is not supported"),
    ("llama", {"hidden_act": "gelu"},
     "hidden_act 'gelu' is not supported (supported: silu, gelu_pytorch_tanh)"),
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5 is not supported"),
    ("llama", {"num_key_value_heads": 3},
     "num_attention_heads (4) is not a multiple of num_key_value_heads (3)"),
    ("llama", {"hidden_size": None}, "config field 'hidden_size' is missing"),
    ("qwen3", {"use_sliding_window": True}, "use_sliding_window true is not supported"),
    ("gemma3", {"final_logit_softcapping": 30.0},
     "final_logit_softcapping 30.0 is not supported (only null)"),
    ("gemma3", {"attn_logit_softcapping": 50.0},
     "attn_logit_softcapping 50.0 is not supported (only null)"),
    ("gemma3", {"hidden_activation": "relu"},
     "hidden_activation 'relu' is not supported (supported: silu, gelu_pytorch_tanh)"),
    ("gemma3", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     "layer_types[1] 'chunked_attention' is not supported"),
    ("gemma3", {"layer_types": ["full_attention"]},
     "config field 'layer_types' lists 1 layers, expected 3 (num_hidden_layers)"),
    ("gemma3", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
     "rope_scaling type 'dynamic' is not supported (supported: linear, llama3)"),
])
def test_convert_refuses_configs_by_name(synthetic_model, tmp_path, capsys, model, changes,
                                         message):
    checkpoint, _, _ = synthetic_model(model)
    source = variant(tmp_path, checkpoint, changes)
    status, _, err = run(capsys, "convert", "--model", source, "--out", tmp_path / "bundle")
    assert status == 2
    assert err.count("\n") == 1 and message in err, err
    assert str(source / "config.json") in err
    assert not (tmp_path / "bundle").exists()


def test_a_multimodal_gemma3_converts_its_text_part(synthetic_model, tmp_path):
    checkpoint, _, config = synthetic_model("gemma3")
    wrapped = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
               "text_config": config, "vision_config": {"model_type": "siglip_vision_model"}}
    tower = {"vision_tower.vision_model.embeddings.patch_embedding.weight": np.zeros((8, 3)),
             "multi_modal_projector.mm_soft_emb_norm.weight": np.zeros(8)}
    source = variant(tmp_path, checkpoint, config=wrapped, add=tower)
    cv.convert(str(source), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    names = {entry["name"] for entry in bd.read_manifest(tmp_path / "bundle")["tensors"]}
    assert "model.embed_tokens.weight" in names and not names & set(tower)


def test_convert_refuses_missing_misshapen_and_unexpected_tensors(synthetic_model, tmp_path,
                                                                  capsys):
    checkpoint, _, _ = synthetic_model("llama")
    cases = [
        (dict(drop=("model.layers.1.mlp.up_proj.weight", "model.norm.weight")),
         "missing tensors: model.layers.1.mlp.up_proj.weight, model.norm.weight"),
        (dict(drop=("lm_head.weight",)), "missing tensors: lm_head.weight"),
        (dict(add={"model.layers.0.self_attn.q_proj.bias": np.zeros(256)}),
         "unexpected tensors for a llama model: model.layers.0.self_attn.q_proj.bias"),
    ]
    for number, (change, message) in enumerate(cases):
        work = tmp_path / str(number)
        work.mkdir()
        source = variant(work, checkpoint, **change)
        status, _, err = run(capsys, "convert", "--model", source, "--out", work / "bundle")
        assert status == 2 and message in err, err
        assert str(source) in err

    work = tmp_path / "shape"
    work.mkdir()
    source = variant(work, checkpoint, {"intermediate_size": 384})
    status, _, err = run(capsys, "convert", "--model", source, "--out", work / "bundle")
    assert status == 2
    assert ("tensor model.layers.0.mlp.gate_proj.weight has shape [512, 256], expected "
            "[384, 256] from config.json") in err


def test_convert_pads_a_k_that_is_not_a_multiple_of_128(tmp_path):
    config = synthetic.model_config("llama", synthetic.Shape())
    config["intermediate_size"] = 320
    random_checkpoint(tmp_path / "model", config)
    cv.convert(str(tmp_path / "model"), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    entries = {e["name"]: e for e in bd.read_manifest(tmp_path / "bundle")["tensors"]}
    down = entries["model.layers.0.mlp.down_proj.weight"]
    assert (down["shape"], down["original_shape"]) == ([256, 384], [256, 320])


# --- accepted variants -------------------------------------------------------

def test_model_spec_defaults_and_variants():
    llama = synthetic.model_config("llama", synthetic.Shape())
    spec = arch.model_spec(llama)
    assert (spec.architecture, spec.num_heads, spec.num_kv_heads, spec.head_dim) == \
        ("llama", 4, 2, 64)
    assert spec.attention_scale == 0.125 and spec.embedding_scale is None
    assert [layer.window for layer in spec.layers] == [0, 0]

    # Mistral: the window applies to every layer; HF's default is 4096.
    mistral = dict(llama, model_type="mistral", architectures=["MistralForCausalLM"])
    assert [layer.window for layer in arch.model_spec(mistral).layers] == [4096, 4096]
    mistral["sliding_window"] = None
    assert [layer.window for layer in arch.model_spec(mistral).layers] == [0, 0]

    linear = dict(llama, rope_scaling={"type": "linear", "factor": 4.0})
    assert {layer.scaling for layer in arch.model_spec(linear).layers} == {4.0}

    gemma = synthetic.model_config("gemma3", synthetic.default_shape("gemma3", layers=6))
    spec = arch.model_spec(gemma)
    assert [layer.window for layer in spec.layers] == [8, 8, 0, 8, 8, 0]
    assert [(layer.theta, layer.scaling) for layer in spec.layers[1:3]] == \
        [(10000.0, 1.0), (1000000.0, 8.0)]
    # The older form: sliding_window_pattern N, layer i global iff (i + 1) % N == 0.
    older = {k: v for k, v in gemma.items() if k != "layer_types"}
    older["sliding_window_pattern"] = 6
    assert [layer.window for layer in arch.model_spec(older).layers] == [8] * 5 + [0]
    assert spec.embedding_scale == 16.0 and spec.unit_offset and spec.sandwich_norms
    assert spec.attention_scale == 48 ** -0.5
    # sqrt(640) = 25.298 rounds to bf16 25.25, as Gemma's embedding scale does.
    assert arch.model_spec(dict(gemma, hidden_size=640)).embedding_scale == 25.25

    # Newer configs keep the rotary settings in rope_parameters.
    newer = dict(llama, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    assert {(layer.theta, layer.scaling) for layer in arch.model_spec(newer).layers} == \
        {(500000.0, 1.0)}
    assert rf.Config(newer).ropes == [(500000.0, 1.0)] * 2
    per_type = dict(gemma, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    expected = [(1e4, 1.0), (1e4, 1.0), (1e6, 4.0)] * 2
    assert [(layer.theta, layer.scaling) for layer in arch.model_spec(per_type).layers] == \
        expected
    assert rf.Config(per_type).ropes == expected


def test_a_text_only_gemma3_wrapper_converts_with_its_tensor_names(synthetic_model, tmp_path):
    checkpoint, bundle, config = synthetic_model("gemma3")
    wrapped = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
               "text_config": config}
    model = tmp_path / "model"
    model.mkdir()
    for path in checkpoint.glob("*.safetensors"):
        tensors = {"language_model." + e.name: st.load(e) for e in st.read_header(path)}
        st.write(model / path.name, tensors, "BF16")
    (model / "config.json").write_text(json.dumps(wrapped))
    cv.convert(str(model), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    graph = graph_of(tmp_path / "bundle")
    assert '{cq4p.tensor = "language_model.model.embed_tokens.weight"}' in graph
    body = lambda text: text[text.index(") -> tensor<"):]  # noqa: E731
    assert body(graph).split("\n", 1)[1] == body(graph_of(bundle)).split("\n", 1)[1]
    ids = synthetic.prompt(config, 12, seed=0)
    np.testing.assert_array_equal(rf.Reference.from_bundle(str(tmp_path / "bundle")).forward(ids),
                                  rf.Reference.from_bundle(str(bundle)).forward(ids))


def test_mistral_window_reaches_every_attention(synthetic_model, tmp_path):
    checkpoint, _, _ = synthetic_model("llama")
    source = variant(tmp_path, checkpoint, {"model_type": "mistral", "sliding_window": 8,
                                            "architectures": ["MistralForCausalLM"]})
    cv.convert(str(source), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    windows = re.findall(r"window = (\d+) : i64", graph_of(tmp_path / "bundle"))
    assert windows == ["8", "8"]
    assert 'architecture = "llama"' in graph_of(tmp_path / "bundle")


# --- the graph ---------------------------------------------------------------

def ops(graph, name):
    return re.findall(rf"= {re.escape(name)} ", graph)


@pytest.mark.parametrize("model", synthetic.ARCHITECTURES)
def test_graph_binds_every_tensor_once_and_carries_the_digest(synthetic_model, model):
    _, bundle, config = synthetic_model(model)
    manifest = bd.read_manifest(str(bundle))
    graph = graph_of(bundle)
    digest = manifest["model_digest"]
    assert digest == bd.model_digest(manifest["config"], manifest["tensors"])
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    spec = arch.model_spec(config)
    assert graph.startswith(
        f'module attributes {{cq4p.model = {{architecture = "{spec.architecture}", '
        f'digest = "{digest}", vocab = 512 : i64, hidden = 256 : i64, '
        f'layers = {spec.num_layers} : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64}}}} {{\n'
        f"  func.func @forward(%ids: tensor<?xi64>, %pos: index,\n")
    bound = re.findall(r'cq4p\.tensor = "([^"]+)"', graph)
    assert sorted(bound) == sorted(entry["name"] for entry in manifest["tensors"])
    assert len(bound) == len(set(bound))
    for entry in manifest["tensors"]:
        path = bd.resolve(str(bundle), entry["file"])
        assert bd.file_sha256(path) == entry["sha256"]
        if entry.get("rotation") == "hadamard":
            with rd.read_tensor(path) as tensor:
                assert (f'{{cq4p.tensor = "{entry["name"]}", cq4p.transform = '
                        f'"{tensor.transform_digest()}"}}') in graph
    assert len(ops(graph, "cq4p.cached_attention")) == spec.num_layers
    assert len(ops(graph, "cq4p.linear")) == 7 * spec.num_layers + 1
    assert len(ops(graph, "cq4p.glu")) == spec.num_layers
    assert len(ops(graph, "cq4p.rope")) == 2 * spec.num_layers
    assert len(ops(graph, "cq4p.embedding")) == 1
    norms_per_layer = 2 + 2 * spec.qk_norm + 2 * spec.sandwich_norms
    assert len(ops(graph, "cq4p.rms_norm")) == norms_per_layer * spec.num_layers + 1
    assert len(ops(graph, "arith.addf")) == 2 * spec.num_layers
    assert graph.rstrip().endswith("return %logits : tensor<1x512xf32>\n  }\n}")


def test_llama_graph(synthetic_model):
    graph = graph_of(synthetic_model("llama")[1])
    assert "unit_offset" not in graph and "q_norm" not in graph
    assert ("%h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<512x256, gs = 128, "
            "orthogonal, panels> -> tensor<?x256xf32>") in graph
    assert ("%l0_x = cq4p.rms_norm %h0, %l0_input_layernorm {epsilon = 1.000000e-05 : f32} : "
            "tensor<?x256xf32>, tensor<256xf16> -> tensor<?x256xf32>") in graph
    assert ("%l1_qr = cq4p.rope %l1_q, %pos {head_dim = 64 : i64, scaling = 1.000000e+00 : f32, "
            "theta = 1.000000e+04 : f32} : tensor<?x256xf32>, index -> tensor<?x256xf32>") in graph
    assert ("%l0_a = cq4p.cached_attention %l0_qr, %l0_kr, %l0_v, %pos {head_dim = 64 : i64, "
            "layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, "
            "scale = 1.250000e-01 : f32, window = 0 : i64} : tensor<?x256xf32>, "
            "tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x256xf32>") in graph
    assert ("%l0_m = cq4p.glu <silu> %l0_g, %l0_u : tensor<?x512xf32>, "
            "tensor<?x512xf32> -> tensor<?x512xf32>") in graph
    # The MLP's norm is post_attention_layernorm, on the residual after attention.
    assert "%l0_h = arith.addf %h0, %l0_o : tensor<?x256xf32>" in graph
    assert "%l0_y = cq4p.rms_norm %l0_h, %l0_post_attention_layernorm" in graph
    assert "%h1 = arith.addf %l0_h, %l0_d : tensor<?x256xf32>" in graph
    assert ("%t = tensor.extract_slice %h2[%last, 0] [1, 256] [1, 1] : tensor<?x256xf32> to "
            "tensor<1x256xf32>") in graph
    assert ("%logits = cq4p.linear %f, %lm_head : tensor<1x256xf32>, !cq4p.weight<512x256, "
            "gs = 128, orthogonal, panels> -> tensor<1x512xf32>") in graph
    assert '%lm_head: !cq4p.weight<512x256, gs = 128, orthogonal, panels> {cq4p.tensor = ' \
        '"lm_head.weight"}' in graph


def test_qwen3_graph(synthetic_model):
    graph = graph_of(synthetic_model("qwen3")[1])
    assert "unit_offset" not in graph and "lm_head" not in graph
    assert ("%l0_qn = cq4p.rms_norm %l0_q, %l0_q_norm {epsilon = 1.000000e-06 : f32} : "
            "tensor<?x256xf32>, tensor<64xf16> -> tensor<?x256xf32>") in graph
    assert ("%l0_kn = cq4p.rms_norm %l0_k, %l0_k_norm {epsilon = 1.000000e-06 : f32} : "
            "tensor<?x128xf32>, tensor<64xf16> -> tensor<?x128xf32>") in graph
    assert "%l0_qr = cq4p.rope %l0_qn, %pos {head_dim = 64 : i64, scaling = 1.000000e+00 : " \
        "f32, theta = 1.000000e+06 : f32}" in graph
    assert "%l0_kr = cq4p.rope %l0_kn, %pos" in graph
    # Tied: the embedding's weight is the lm_head's.
    assert ("%logits = cq4p.linear %f, %embed : tensor<1x256xf32>, !cq4p.weight<512x256, "
            "gs = 128, orthogonal, panels> -> tensor<1x512xf32>") in graph


def test_gemma3_graph(synthetic_model):
    graph = graph_of(synthetic_model("gemma3")[1])
    norms = re.findall(r"= cq4p\.rms_norm [^\n]*", graph)
    assert norms and all("unit_offset}" in line for line in norms)
    assert "%h0 = cq4p.embedding %ids, %embed {scale = 1.600000e+01 : f32} :" in graph
    windows = re.findall(r"scale = 1\.44337565e-01 : f32, window = (\d+) : i64", graph)
    assert windows == ["8", "8", "0"]
    ropes = re.findall(r"%l(\d)_qr = cq4p.rope [^{]*\{head_dim = 64 : i64, scaling = ([^ ]+) : "
                       r"f32, theta = ([^ ]+) : f32\}", graph)
    assert ropes == [("0", "1.000000e+00", "1.000000e+04"), ("1", "1.000000e+00", "1.000000e+04"),
                     ("2", "8.000000e+00", "1.000000e+06")]
    assert 'cq4p.glu <gelu_tanh>' in graph
    # Sandwich norms: on the attention and MLP outputs before their adds.
    assert ("%l0_on = cq4p.rms_norm %l0_o, %l0_post_attention_layernorm {epsilon = "
            "1.000000e-06 : f32, unit_offset}") in graph
    assert "%l0_h = arith.addf %h0, %l0_on : tensor<?x256xf32>" in graph
    assert "%l0_y = cq4p.rms_norm %l0_h, %l0_pre_feedforward_layernorm" in graph
    assert "%l0_dn = cq4p.rms_norm %l0_d, %l0_post_feedforward_layernorm" in graph
    assert "%h1 = arith.addf %l0_h, %l0_dn : tensor<?x256xf32>" in graph
    assert "%logits = cq4p.linear %f, %embed :" in graph


def test_f32_literals_round_trip():
    for value in (1e-6, 1e-5, 0.125, 48 ** -0.5, 16.0, 1e6, 10000.0, 8.0, 1 / 3, 25.25):
        text = ir.f32(value)
        assert text.endswith(" : f32")
        assert np.float32(float(text[:-6])) == np.float32(value)
    assert ir.f32(1e-6) == "1.000000e-06 : f32" and ir.f32(1 / 3) == "3.33333343e-01 : f32"


# --- digests, tokenizer files, legacy bundles --------------------------------

def test_digest_names_the_weights(synthetic_model, tmp_path):
    _, bundle_a, _ = synthetic_model("llama")
    _, bundle_b, _ = synthetic_model("llama", seed=1)
    digest_a = bd.read_manifest(str(bundle_a))["model_digest"]
    digest_b = bd.read_manifest(str(bundle_b))["model_digest"]
    assert digest_a != digest_b  # same shapes, other weights
    checkpoint, _, _ = synthetic_model("llama")
    cv.convert(str(checkpoint), str(tmp_path / "again"), progress=open(os.devnull, "w"))
    assert bd.read_manifest(str(tmp_path / "again"))["model_digest"] == digest_a
    assert graph_of(tmp_path / "again") == graph_of(bundle_a)


def test_tokenizer_files_are_copied(synthetic_model, tmp_path):
    checkpoint, _, _ = synthetic_model("qwen3")
    source = tmp_path / "model"
    shutil.copytree(checkpoint, source)
    (source / "tokenizer.json").write_text('{"model": {}}')
    (source / "tokenizer_config.json").write_text('{"add_bos_token": false}')
    (source / "generation_config.json").write_text("{}")
    cv.convert(str(source), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    assert (tmp_path / "bundle/tokenizer.json").read_text() == '{"model": {}}'
    assert (tmp_path / "bundle/tokenizer_config.json").exists()
    # The stop ids the runtime's tokenizer reads.
    assert (tmp_path / "bundle/generation_config.json").exists()
    assert bd.read_manifest(str(tmp_path / "bundle"))["tokenizer_files"] == [
        "tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def test_a_legacy_bundle_gets_its_graph_once_upgraded(synthetic_model, tmp_path, capsys):
    checkpoint, bundle, _ = synthetic_model("qwen3")
    out = tmp_path / "bundle"
    status, _, err = run(capsys, "convert", "--model", checkpoint, "--out", out, "--legacy",
                         "interleaved4row")
    assert status == 0, err
    assert "model.mlir: not written: tensor model.embed_tokens.weight is CQ4 in the " \
        "interleaved4row layout; the model graph needs packed panels (python -m cq4p " \
        "upgrade)" in err
    assert not (out / "model.mlir").exists()
    up.upgrade(str(out))
    manifest = bd.read_manifest(str(out))
    assert manifest["model_digest"] == bd.model_digest(manifest["config"], manifest["tensors"])
    # Upgraded panels are the files convert writes, byte for byte.
    assert manifest == bd.read_manifest(str(bundle))
    assert graph_of(out) == graph_of(bundle)


def test_a_tied_checkpoint_with_an_lm_head_copy_skips_it(synthetic_model, tmp_path):
    checkpoint, bundle, _ = synthetic_model("qwen3")
    embedding = None
    for path in checkpoint.glob("*.safetensors"):
        for entry in st.read_header(path):
            if entry.name == "model.embed_tokens.weight":
                embedding = st.load(entry)
    source = variant(tmp_path, checkpoint, add={"lm_head.weight": embedding})
    cv.convert(str(source), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    names = [entry["name"] for entry in bd.read_manifest(str(tmp_path / "bundle"))["tensors"]]
    assert "lm_head.weight" not in names


# --- commands that need no runtime -------------------------------------------

def test_synthetic_command(tmp_path, capsys):
    status, out, _ = run(capsys, "synthetic", "--arch", "qwen3", "--out", tmp_path / "q",
                         "--hidden", "128", "--ffn", "256", "--vocab", "256", "--layers", "1")
    assert status == 0
    assert out == (f"{tmp_path / 'q'}: qwen3 checkpoint, hidden 128, ffn 256, vocab 256, "
                   f"1 layers, 2 heads (1 kv) of 64\n")
    config = json.loads((tmp_path / "q/config.json").read_text())
    assert (config["model_type"], config["tie_word_embeddings"], config["head_dim"]) == \
        ("qwen3", True, 64)
    status, _, err = run(capsys, "synthetic", "--out", tmp_path / "x", "--ffn", "200")
    assert status == 2
    assert "ffn (200) must be a multiple of 128: it is the K of a projection" in err


def test_margin_command(synthetic_model, capsys):
    _, bundle, _ = synthetic_model("llama")
    status, out, _ = run(capsys, "margin", "--bundle", bundle, "--steps", "4")
    assert status == 0
    assert re.search(r"over 4 steps after 40 tokens: min \d+\.\d+, mean", out)


def test_a_text_prompt_needs_a_tokenizer(synthetic_model, capsys):
    _, bundle, _ = synthetic_model("llama")
    status, _, err = run(capsys, "generate", "--bundle", bundle, "--library", "unused.so",
                         "--prompt", "hello")
    assert status == 2
    assert f"--prompt needs a tokenizer: {bundle} has no tokenizer.json or tokenizer.model" in err
    status, _, err = run(capsys, "generate", "--bundle", bundle, "--library", "unused.so",
                         "--prompt", "hello", "--prompt-ids", "1")
    assert status == 2 and "give one of --prompt and --prompt-ids" in err
    status, _, err = run(capsys, "check-model", "--bundle", bundle, "--library", "unused.so",
                         "--prompt-ids", "1 x")
    assert status == 2 and "--prompt-ids: expected integers, found '1 x'" in err


def test_a_sentencepiece_tokenizer_encodes_and_decodes(synthetic_model, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from cq4p.cli import generate as gn
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["the quick brown fox jumps over the lazy dog",
                               "a model of four bit weights runs on arm cores",
                               "every layer adds to the residual stream"] * 20))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "tokenizer"),
                                   vocab_size=60, model_type="bpe")
    checkpoint, _, _ = synthetic_model("llama")
    source = tmp_path / "model"
    shutil.copytree(checkpoint, source)
    shutil.copy(tmp_path / "tokenizer.model", source / "tokenizer.model")
    cv.convert(str(source), str(tmp_path / "bundle"), progress=open(os.devnull, "w"))
    bundle = str(tmp_path / "bundle")
    ids = gn.prompt_ids(bundle, prompt="the lazy fox")
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    assert ids == [processor.bos_id()] + processor.encode("the lazy fox")
    assert gn.detokenize(bundle, ids[1:]) == "the lazy fox"
    (tmp_path / "bundle" / "tokenizer_config.json").write_text('{"add_bos_token": false}')
    assert gn.prompt_ids(bundle, prompt="the lazy fox") == ids[1:]
