"""The oracle (cq4p.model.reference) and the synthetic models it is run on."""

import math

import numpy as np
import pytest

from cq4p.model import reference as rf
from cq4p.model import synthetic

PROMPT_TOKENS = 40
GREEDY_STEPS = 32
MARGIN_FLOOR = 0.5  # top-1 minus top-2 logit, in logit standard deviations


def relative(a, b):
    return float(np.max(np.abs(a - b)) / np.std(b))


def test_attention_follows_its_definition_loop_by_loop():
    rng = np.random.default_rng(0)
    m, t, heads, kv_heads, d, window, scale = 3, 7, 4, 2, 8, 3, 0.3
    q = rng.standard_normal((m, heads, d)).astype(np.float32)
    keys = rng.standard_normal((t, kv_heads, d)).astype(np.float32)
    values = rng.standard_normal((t, kv_heads, d)).astype(np.float32)
    positions = np.array([4, 5, 6])
    got = rf.attention(q, keys, values, positions, scale, window).reshape(m, heads, d)
    for r, i in enumerate(positions):
        for h in range(heads):
            kv = h // (heads // kv_heads)
            visible = [j for j in range(t) if j <= i and i - j < window]
            scores = np.array([scale * float(q[r, h] @ keys[j, kv]) for j in visible])
            p = np.exp(scores - scores.max())
            p /= p.sum()
            expected = sum(w * values[j, kv].astype(np.float64) for w, j in zip(p, visible))
            np.testing.assert_allclose(got[r, h], expected, rtol=1e-5, atol=1e-6)


def test_rope_rotates_pairs_half_a_head_apart():
    d, theta, factor, position = 8, 100.0, 2.0, 3
    x = np.arange(2 * d, dtype=np.float32).reshape(1, 2, d) + 1
    got = rf.rope(x, [position], theta, factor)
    for i in range(d // 2):
        angle = position * theta ** (-2 * i / d) / factor
        c, s = math.cos(angle), math.sin(angle)
        for head in range(2):
            a, b = x[0, head, i], x[0, head, i + d // 2]
            np.testing.assert_allclose(got[0, head, i], a * c - b * s, rtol=1e-6)
            np.testing.assert_allclose(got[0, head, i + d // 2], b * c + a * s, rtol=1e-6)


def test_rms_norm_and_activations():
    x = np.array([[3.0, 4.0]], dtype=np.float32)
    w = np.array([0.5, 2.0], dtype=np.float32)
    rms = math.sqrt(12.5 + 1e-6)
    np.testing.assert_allclose(rf.rms_norm(x, w, 1e-6, False), [[1.5 / rms, 8 / rms]], rtol=1e-6)
    np.testing.assert_allclose(rf.rms_norm(x, w, 1e-6, True), [[4.5 / rms, 12 / rms]], rtol=1e-6)
    assert rf.silu(np.float32(2.0)) == pytest.approx(2 / (1 + math.exp(-2)), rel=1e-6)
    assert rf.gelu_tanh(np.float32(1.0)) == pytest.approx(0.8411920, rel=1e-6)
    assert rf.bf16(640 ** 0.5) == 25.25 and rf.bf16(256 ** 0.5) == 16.0


@pytest.mark.parametrize("model", synthetic.ARCHITECTURES)
def test_cached_decode_equals_the_full_sequence(synthetic_model, model):
    _, bundle, config = synthetic_model(model)
    oracle = rf.Reference.from_bundle(str(bundle))
    ids = synthetic.prompt(config, 20, seed=3)
    full = oracle.forward(ids)
    oracle.reset()
    stepped = [oracle.prefill(ids[:5])]
    stepped += [oracle.decode(token)[None] for token in ids[5:12]]
    stepped.append(oracle.prefill(ids[12:]))
    stepped = np.concatenate(stepped)
    assert oracle.position == len(ids)
    assert relative(stepped, full) < 1e-5


@pytest.mark.parametrize("model", synthetic.ARCHITECTURES)
def test_greedy_margins_are_wide(synthetic_model, model):
    """Greedy decoding is the model's decision, not quantization noise:
    under the dequantized model, every step's top-1 logit beats the
    runner-up by MARGIN_FLOOR standard deviations of the logits."""
    _, bundle, config = synthetic_model(model)
    oracle = rf.Reference.from_bundle(str(bundle))
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    tokens, margins = rf.greedy_margins(oracle, ids, GREEDY_STEPS)
    print(f"{model}: greedy margins / logit std: min {margins.min():.2f}, "
          f"mean {margins.mean():.2f}")
    assert margins.min() > MARGIN_FLOOR
    assert len(set(tokens)) > GREEDY_STEPS // 2  # it moves along, not stuck on one token
    assert tokens == oracle.generate(ids, GREEDY_STEPS)


@pytest.mark.parametrize("model", synthetic.ARCHITECTURES)
def test_every_branch_moves_the_residual(synthetic_model, model):
    checkpoint, _, config = synthetic_model(model)
    oracle = rf.Reference.from_checkpoint(str(checkpoint))
    records = oracle.trace(synthetic.prompt(config, PROMPT_TOKENS, seed=1))

    def rms(x):
        return float(np.sqrt(np.mean(np.square(x))))

    for layer, record in enumerate(records):
        attention = rms(record["attention"]) / rms(record["residual"])
        mlp = rms(record["mlp"]) / rms(record["residual"] + record["attention"])
        assert 0.2 < attention < 0.5, (layer, attention)
        if layer < len(records) - 1:  # the last MLP is the successor table
            assert 0.2 < mlp < 0.5, (layer, mlp)


@pytest.mark.parametrize("model", synthetic.ARCHITECTURES)
def test_attention_carries_earlier_tokens(synthetic_model, model):
    _, bundle, config = synthetic_model(model)
    oracle = rf.Reference.from_bundle(str(bundle))
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    changed = list(ids)
    changed[5] = (changed[5] + 1) % synthetic.covered_tokens(config)
    before, after = oracle.forward(ids), oracle.forward(changed)
    np.testing.assert_array_equal(before[:5], after[:5])  # causal
    # Gemma3's window is 8: position 5 reaches the last one through its
    # global layer.
    assert relative(after[-1], before[-1]) > 0.05


def with_window(bundle, window):
    oracle = rf.Reference.from_bundle(str(bundle))
    oracle.config.windows = [window if w else 0 for w in oracle.config.windows]
    return oracle


def test_the_sliding_window_counts(synthetic_model):
    _, bundle, config = synthetic_model("gemma3")
    assert config["sliding_window"] == 8
    ids = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    windowed = rf.Reference.from_bundle(str(bundle)).forward(ids)
    wide = with_window(bundle, PROMPT_TOKENS).forward(ids)
    unbounded = with_window(bundle, 4096).forward(ids)
    # Up to the window's length nothing differs; past it, the window shows.
    np.testing.assert_array_equal(windowed[:8], unbounded[:8])
    assert relative(windowed[-1], unbounded[-1]) > 0.05
    # A window longer than the prompt is full attention.
    np.testing.assert_array_equal(wide, unbounded)


def test_the_oracle_reads_the_window_from_config(synthetic_model):
    checkpoint, _, config = synthetic_model("llama")
    weights = rf.Reference.from_checkpoint(str(checkpoint)).weights
    ids = synthetic.prompt(config, 20, seed=2)
    mistral = dict(config, model_type="mistral", sliding_window=4)
    full = rf.Reference(config, weights).forward(ids)
    windowed = rf.Reference(mistral, weights).forward(ids)
    np.testing.assert_array_equal(full[:4], windowed[:4])
    assert relative(windowed[-1], full[-1]) > 0.05
    assert rf.Reference(dict(mistral, sliding_window=None), weights).config.windows == [0, 0]


def test_out_of_vocabulary_ids_are_refused(synthetic_model):
    _, bundle, _ = synthetic_model("llama")
    oracle = rf.Reference.from_bundle(str(bundle))
    with pytest.raises(ValueError, match=r"token id 512 is outside the vocabulary \(0 to 511\)"):
        oracle.prefill([1, 512])
