"""The oracle (cq4p.model.reference) on the families of issue 17: hand-computed
cases of each new piece (a conv state carried across steps, a KV-shared
layer reading its donor's cache, proportional RoPE, llama3 frequencies, q/k/v
biases), and the synthetic families: chunked prefill equals one token at a
time, greedy margins are wide, every branch moves the residual."""

import math
import os

import numpy as np
import pytest

from cq4p.cli import convert as cv
from cq4p.io import bundle as bd
from cq4p.model import reference as rf
from cq4p.model import synthetic

PROMPT_TOKENS = 40
GREEDY_STEPS = 32
MARGIN_FLOOR = 0.5


def relative(a, b):
    return float(np.max(np.abs(a - b)) / np.std(b))


def rms(x):
    return float(np.sqrt(np.mean(np.square(x))))


# --- hand-computed cases -----------------------------------------------------

def test_short_conv_carries_its_state_across_steps():
    # Two channels, kernel width 3: y[t] = w0 bx[t-2] + w1 bx[t-1] + w2 bx[t].
    kernel = np.array([[[1.0, 10.0, 100.0]], [[-1.0, 0.5, 2.0]]], dtype=np.float32)
    bx = np.array([[1, 0], [2, 1], [3, 0], [4, 2], [5, 0]], dtype=np.float32)
    expected = np.array([[100, 0], [210, 2], [321, 0.5], [432, 3], [543, 1]],
                        dtype=np.float32)
    start = np.zeros((2, 2), np.float32)
    whole, state = rf.short_conv(bx, start, kernel)
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(state, bx[-2:])
    # In pieces of 2, 1 and 2 rows: the same outputs and the same state.
    pieces, state = [], start
    for rows in (slice(0, 2), slice(2, 3), slice(3, 5)):
        y, state = rf.short_conv(bx[rows], state, kernel)
        pieces.append(y)
    np.testing.assert_array_equal(np.concatenate(pieces), expected)
    np.testing.assert_array_equal(state, bx[-2:])


def test_an_lfm2_conv_layer_by_hand(synthetic_family):
    """The first layer's conv branch of the synthetic LFM2 model, written
    out: in_proj to B, C, x (in that order), B*x through the causal conv,
    C times it, out_proj."""
    config, tensors = synthetic_family("lfm2")
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, 6, seed=4)
    record = model.trace(ids)[0]
    w = {k[len("model.layers.0."):]: v.astype(np.float32) for k, v in tensors.items()
         if k.startswith("model.layers.0.")}
    x = rf.rms_norm(record["residual"], w["operator_norm.weight"], 1e-5, False)
    h = x.shape[1]
    bcx = x @ w["conv.in_proj.weight"].T
    b, c, xx = bcx[:, :h], bcx[:, h:2 * h], bcx[:, 2 * h:]
    bx = b * xx
    kernel = w["conv.conv.weight"][:, 0, :]
    y = np.zeros_like(bx)
    for t in range(len(ids)):
        for k in range(3):
            if t - 2 + k >= 0:
                y[t] += kernel[:, k] * bx[t - 2 + k]
    expected = (c * y) @ w["conv.out_proj.weight"].T
    np.testing.assert_allclose(record["attention"], expected, rtol=1e-4, atol=1e-6 * rms(
        expected))


def test_proportional_rope_rotates_only_its_share_of_pairs():
    """Gemma 4's full layers: head_dim 512, partial_rotary_factor 0.25,
    theta 1e6: pairs (j, j + 256) rotate by position * 1e6^(-2j/512) for
    j < 64; the other pairs pass through."""
    inv = rf.proportional_inv_freq(512, 1e6, 0.25)
    assert np.count_nonzero(inv) == 64 and inv[0] == 1.0
    assert inv[63] == pytest.approx(1e6 ** (-126 / 512), rel=1e-14)
    x = np.zeros((1, 1, 512), np.float32)
    x[0, 0, 0] = 1.0    # pair 0: rotates by the position itself
    x[0, 0, 63] = 2.0   # pair 63: the slowest that rotates
    x[0, 0, 100] = 3.0  # pair 100: does not rotate
    x[0, 0, 356] = 4.0  # its partner
    position = 3
    got = rf.rope_with(x, [position], inv)[0, 0]
    expected = np.zeros(512)
    expected[0], expected[256] = math.cos(3), math.sin(3)
    angle = 3 * 1e6 ** (-126 / 512)
    expected[63], expected[63 + 256] = 2 * math.cos(angle), 2 * math.sin(angle)
    expected[100], expected[356] = 3.0, 4.0
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_llama3_frequencies():
    for d, counts in ((64, (15, 3, 14)), (128, (29, 6, 29))):
        base = rf.default_inv_freq(d, 500000.0)
        inv = rf.llama3_inv_freq(d, 500000.0, 32.0, 1.0, 4.0, 8192)
        kept = int(np.sum(np.isclose(inv, base, rtol=1e-13)))
        divided = int(np.sum(np.isclose(inv, base / 32, rtol=1e-13)))
        assert (kept, d // 2 - kept - divided, divided) == counts
    inv = rf.llama3_inv_freq(64, 500000.0, 32.0, 1.0, 4.0, 8192)
    # j = 16: wavelength 2 pi sqrt(5e5) = 4442.883, s = (8192 / 4442.883 - 1) / 3.
    s = (8192 / (2 * math.pi * math.sqrt(5e5)) - 1) / 3
    assert inv[16] == pytest.approx((1 - s) / 32 / math.sqrt(5e5) + s / math.sqrt(5e5),
                                    rel=1e-13)
    assert inv[0] == 1.0 and inv[31] == pytest.approx(5e5 ** (-62 / 64) / 32, rel=1e-13)
    # The smooth band meets both neighbours continuously (its boundaries,
    # inclusive in Hugging Face's definition, give s = 1 and s = 0).
    theta = (2048 / (2 * math.pi)) ** 2  # head_dim 4: pair 1's wavelength is 2048
    assert rf.llama3_inv_freq(4, theta, 32.0, 1.0, 4.0, 8192)[1] == pytest.approx(
        theta ** -0.5, rel=1e-12)
    theta = (8192 / (2 * math.pi)) ** 2  # wavelength 8192: divided by the factor
    assert rf.llama3_inv_freq(4, theta, 32.0, 1.0, 4.0, 8192)[1] == pytest.approx(
        theta ** -0.5 / 32, rel=1e-12)


def test_qwen2_biases_are_added_before_rotary(synthetic_family):
    """The first token's attention attends to itself alone: its output is
    its own v (with v's bias), through o_proj; q and k biases change later
    tokens' attention."""
    config, tensors = synthetic_family("qwen25")
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, 8, seed=2)
    records = model.trace(ids)
    p = "model.layers.0."
    w = {k[len(p):]: v.astype(np.float32) for k, v in tensors.items() if k.startswith(p)}
    x = rf.rms_norm(records[0]["residual"][:1], w["input_layernorm.weight"], 1e-6, False)
    v = x @ w["self_attn.v_proj.weight"].T + w["self_attn.v_proj.bias"]
    group = 14 // 2
    heads = np.repeat(v.reshape(1, 2, 64), group, axis=1).reshape(1, 14 * 64)
    expected = heads @ w["self_attn.o_proj.weight"].T
    np.testing.assert_allclose(records[0]["attention"][:1], expected, rtol=1e-4,
                               atol=1e-5 * rms(expected))
    for bias in ("q", "k", "v"):
        name = f"{p}self_attn.{bias}_proj.bias"
        changed = rf.Reference(config, {**tensors, name: np.zeros_like(tensors[name])})
        assert relative(changed.forward(ids)[-1], model.forward(ids)[-1]) > 0.01, bias


def test_a_kv_shared_layer_reads_its_donor_cache(synthetic_family):
    config, tensors = synthetic_family("gemma4")
    model = rf.Reference(config, tensors)
    c = model.config
    first_shared = c.layers - config["text_config"]["num_kv_shared_layers"]
    assert c.donors[:first_shared] == [None] * first_shared
    assert c.donors[first_shared:] == [3, 4]  # sliding reads layer 3, full layer 4
    ids = synthetic.prompt(config, 10, seed=5)
    records = model.trace(ids)
    # The shared layers keep no cache of their own.
    for layer in range(first_shared, c.layers):
        assert model.keys[layer].shape[0] == 0
    # Layer 6 (full, shared) by hand: its own q (norm, proportional rope),
    # the donor's cached keys and values, scale 1, then o_proj.
    p = "model.language_model.layers.6."
    w = {k[len(p):]: v.astype(np.float32) for k, v in tensors.items() if k.startswith(p)}
    x = rf.rms_norm(records[6]["residual"], w["input_layernorm.weight"], 1e-6, False)
    q = (x @ w["self_attn.q_proj.weight"].T).reshape(len(ids), 8, 512)
    q = rf.rope_with(rf.rms_norm(q, w["self_attn.q_norm.weight"], 1e-6, False),
                     np.arange(len(ids)), rf.proportional_inv_freq(512, 1e6, 0.25))
    keys, values = model.keys[4], model.values[4]
    assert keys.shape == (len(ids), 1, 512)
    out = np.zeros((len(ids), 8, 512), np.float32)
    for t in range(len(ids)):
        for head in range(8):
            scores = keys[:t + 1, 0] @ q[t, head]
            p_ = np.exp(scores - scores.max())
            out[t, head] = (p_ / p_.sum()) @ values[:t + 1, 0]
    attention = rf.rms_norm(out.reshape(len(ids), -1) @ w["self_attn.o_proj.weight"].T,
                            w["post_attention_layernorm.weight"], 1e-6, False)
    np.testing.assert_allclose(records[6]["attention"], attention, rtol=2e-4,
                               atol=1e-5 * rms(attention))
    # The donor's values are weightless-RMS-normed per head.
    np.testing.assert_allclose(np.sqrt(np.mean(values ** 2, axis=-1)), 1.0, rtol=1e-3)
    # k/v tensors a checkpoint carries for shared layers are never read.
    carried = synthetic.with_shared_kv_tensors(config, tensors)
    assert len(carried) == len(tensors) + 6
    np.testing.assert_array_equal(rf.Reference(config, carried).forward(ids),
                                  model.forward(ids))


def test_gemma4_softcap_and_ple(synthetic_family):
    config, tensors = synthetic_family("gemma4")
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, 12, seed=6)
    logits = model.forward(ids)
    uncapped = rf.Reference(dict(config, text_config=dict(config["text_config"],
                                                          final_logit_softcapping=None)),
                            tensors).forward(ids)
    np.testing.assert_allclose(logits, 30 * np.tanh(uncapped / 30), rtol=1e-5, atol=1e-5)
    # Every layer's PLE branch adds to the residual, and its per-layer input
    # depends on the token (the PLE table row) as well as the context.
    records = model.trace(ids)
    for record in records:
        assert rms(record["ple"]) > 0.1 * rms(record["residual"])
    table = "model.language_model.embed_tokens_per_layer.weight"
    shifted = rf.Reference(config, {**tensors, table: np.roll(tensors[table], 1, axis=0)})
    assert relative(shifted.forward(ids)[-1], logits[-1]) > 0.01


def test_from_bundle_drops_padded_k_columns(tmp_path):
    """SmolLM2's hidden 960: the converter stores K as 1024 (zeros); the
    oracle of the bundle reads the original 960 columns back."""
    shape = synthetic.default_shape("smollm2", layers=1, vocab=256, ffn=256)
    config = synthetic.write_model(str(tmp_path / "checkpoint"), "smollm2", shape)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(tmp_path / "checkpoint"), str(tmp_path / "bundle"), progress=quiet)
    entries = {e["name"]: e for e in bd.read_manifest(str(tmp_path / "bundle"))["tensors"]}
    q = entries["model.layers.0.self_attn.q_proj.weight"]
    assert (q["shape"], q["original_shape"]) == ([960, 1024], [960, 960])
    bundle = rf.Reference.from_bundle(str(tmp_path / "bundle"))
    checkpoint = rf.Reference.from_checkpoint(str(tmp_path / "checkpoint"))
    assert bundle.weights["model.layers.0.self_attn.q_proj.weight"].shape == (960, 960)
    ids = synthetic.prompt(config, 16, seed=1)
    got, expected = bundle.forward(ids), checkpoint.forward(ids)
    # CQ4's error only (a misread column would decorrelate the logits).
    assert float(np.mean(np.abs(got - expected)) / np.std(expected)) < 0.15
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.98
    assert bundle.generate(ids, 8) == checkpoint.generate(ids, 8)


# --- the synthetic families --------------------------------------------------

@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_prefill_in_chunks_equals_one_token_at_a_time(synthetic_family, family):
    config, tensors = synthetic_family(family)
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, 20, seed=3)
    full = model.forward(ids)
    states = [None if s is None else s.copy() for s in model.conv_states]
    model.reset()
    stepped = [model.decode(token)[None] for token in ids]
    np.testing.assert_allclose(np.concatenate(stepped), full, rtol=0,
                               atol=1e-5 * float(np.std(full)))
    for got, expected in zip(model.conv_states, states):
        if expected is not None:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    model.reset()
    chunks = [model.prefill(ids[:3]), model.prefill(ids[3:4]), model.prefill(ids[4:11]),
              model.decode(ids[11])[None], model.prefill(ids[12:])]
    assert relative(np.concatenate(chunks), full) < 1e-5
    assert model.position == len(ids)


@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_family_greedy_margins_are_wide(synthetic_family, family):
    config, tensors = synthetic_family(family)
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    tokens, margins = rf.greedy_margins(model, ids, GREEDY_STEPS)
    print(f"{family}: greedy margins / logit std: min {margins.min():.2f}, "
          f"mean {margins.mean():.2f}")
    assert margins.min() > MARGIN_FLOOR
    assert len(set(tokens)) > GREEDY_STEPS // 2
    assert tokens == model.generate(ids, GREEDY_STEPS)


@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_family_branches_move_the_residual(synthetic_family, family):
    config, tensors = synthetic_family(family)
    records = rf.Reference(config, tensors).trace(synthetic.prompt(config, PROMPT_TOKENS,
                                                                   seed=1))
    for layer, record in enumerate(records):
        attention = rms(record["attention"]) / rms(record["residual"])
        mlp = rms(record["mlp"]) / rms(record["residual"] + record["attention"])
        assert 0.2 < attention < 0.5, (layer, attention)
        if layer < len(records) - 1:
            assert 0.2 < mlp < 0.5, (layer, mlp)


@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_family_attention_carries_earlier_tokens(synthetic_family, family):
    config, tensors = synthetic_family(family)
    model = rf.Reference(config, tensors)
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    changed = list(ids)
    changed[5] = (changed[5] + 1) % synthetic.covered_tokens(config)
    before, after = model.forward(ids), model.forward(changed)
    np.testing.assert_array_equal(before[:5], after[:5])  # causal
    assert relative(after[-1], before[-1]) > 0.02


@pytest.mark.parametrize("family", ["llama32", "qwen25", "smollm2", "lfm2"])
def test_family_bundles_keep_wide_margins(synthetic_model, family):
    """Converted (CQ4, dequantized), greedy decoding is still the model's."""
    _, bundle, config = synthetic_model(family)
    oracle = rf.Reference.from_bundle(str(bundle))
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    tokens, margins = rf.greedy_margins(oracle, ids, GREEDY_STEPS)
    assert margins.min() > MARGIN_FLOOR
    checkpoint = rf.Reference.from_checkpoint(str(_checkpoint_of(synthetic_model, family)))
    assert tokens == checkpoint.generate(ids, GREEDY_STEPS)


def _checkpoint_of(synthetic_model, family):
    return synthetic_model(family)[0]
