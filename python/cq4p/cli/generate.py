"""Running a compiled model: `python -m cq4p generate` and `check-model`.

Both go through the runtime's C API (`cq4p.native.runtime.NativeModel`): a bundle
and the model library cq4p-compile built from its model.mlir. `generate`
samples new tokens and reports the runtime's timings; `check-model` runs
the compiled model and the oracle (`cq4p.model.reference`, the dequantized model
in fp32) side by side and compares their logits step by step.

Text prompts and detokenized output go through the runtime's tokenizer
(the C API, `native.NativeTokenizer`) when the bundle has a tokenizer.json;
a bundle with only a SentencePiece tokenizer.model needs Debian's
python3-sentencepiece. Token ids work without either.
"""

import json
import math
import os
import sys

import numpy as np

from cq4p.io import bundle as bd
from cq4p.model import architecture as arch
from cq4p.model import reference as rf
from cq4p.native import runtime as native

# Compiled vs oracle: max |logit difference| over the vocabulary, relative
# to the oracle's logit std. The compiled model quantizes every linear's
# activations to int8 per group of 128 (docs/FORMAT.md section 5); emulating that
# in numpy on the synthetic models gives 0.03 to 0.056, mostly on the
# peaked top logit.
LOGIT_TOLERANCE = 0.1
# LFM2's convolution block multiplies three projections' outputs (B * x,
# then C * the convolution), so their int8 quantization errors compound:
# 0.035 to 0.108 per step measured over 99 steps of three prompts on the
# synthetic LFM2 (median 0.054).
ARCHITECTURE_TOLERANCE = {"lfm2": 0.15}
DEFAULT_PROMPT_TOKENS = 40


def default_tolerance(architecture):
    """The compiled-vs-oracle tolerance of a model architecture."""
    return ARCHITECTURE_TOLERANCE.get(architecture, LOGIT_TOLERANCE)
DEFAULT_STEPS = 32


class GenerateError(ValueError):
    """A request that cannot run; the message is one line."""


def load_tokenizer(bundle_dir):
    """(SentencePieceProcessor, None), or (None, what is missing): for a
    bundle with a tokenizer.model and no tokenizer.json."""
    path = os.path.join(bundle_dir, "tokenizer.model")
    if not os.path.isfile(path):
        return None, f"{bundle_dir} has no tokenizer.json or tokenizer.model"
    try:
        import sentencepiece
    except ImportError:
        return None, "the sentencepiece module is not installed (apt install python3-sentencepiece)"
    return sentencepiece.SentencePieceProcessor(model_file=path), None


def has_tokenizer_json(bundle_dir):
    return os.path.isfile(os.path.join(bundle_dir, "tokenizer.json"))


def _adds_bos(bundle_dir, tokenizer):
    path = os.path.join(bundle_dir, "tokenizer_config.json")
    settings = {}
    if os.path.isfile(path):
        with open(path) as handle:
            settings = json.load(handle)
    return bool(settings.get("add_bos_token", True)) and tokenizer.bos_id() >= 0


def parse_ids(text):
    try:
        ids = [int(token) for token in text.replace(",", " ").split()]
    except ValueError as error:
        raise GenerateError(f"--prompt-ids: expected integers, found {text!r}") from error
    if not ids:
        raise GenerateError("--prompt-ids: no ids")
    for index, token in enumerate(ids):
        if not 0 <= token <= native.INT64_MAX:
            raise GenerateError(f"--prompt-ids: item {index} ({token}) is not a token id "
                                f"(an integer in [0, {native.INT64_MAX}])")
    return ids


def prompt_ids(bundle_dir, prompt=None, ids=None):
    """The prompt's token ids: `ids` (text of integers) as given, or the
    encoded `prompt` text (with BOS when the tokenizer adds one)."""
    if ids is not None:
        return parse_ids(ids)
    if has_tokenizer_json(bundle_dir):
        with native.NativeTokenizer(directory=bundle_dir) as tokenizer:
            return tokenizer.encode(prompt, add_special=True)
    tokenizer, missing = load_tokenizer(bundle_dir)
    if tokenizer is None:
        raise GenerateError(f"--prompt needs a tokenizer: {missing}; give --prompt-ids instead")
    encoded = list(tokenizer.encode(prompt))
    return ([tokenizer.bos_id()] if _adds_bos(bundle_dir, tokenizer) else []) + encoded


def detokenize(bundle_dir, ids):
    if has_tokenizer_json(bundle_dir):
        with native.NativeTokenizer(directory=bundle_dir) as tokenizer:
            return tokenizer.decode([i for i in ids if i < tokenizer.info()["vocab"]])
    tokenizer, _ = load_tokenizer(bundle_dir)
    return None if tokenizer is None else tokenizer.decode(ids)


def _rate(tokens, seconds):
    return f"{tokens / seconds:.1f} tok/s" if seconds > 0 else "n/a"


def generate(bundle_dir, library, prompt, count, threads=1, context=0, temperature=0.0,
             top_k=0, top_p=1.0, seed=0, out=None):
    """Generates `count` tokens after the ids `prompt`, printing ids, text
    and timings to `out`; returns the new ids."""
    with native.NativeModel(bundle_dir, library, threads=threads, context=context) as model:
        ids, stats = model.generate(prompt, count, temperature, top_k, top_p, seed)
    print(f"prompt: {len(prompt)} tokens", file=out)
    print("ids: " + " ".join(map(str, ids)), file=out)
    text = detokenize(bundle_dir, ids)
    if text is not None:
        print(f"text: {text}", file=out)
    decoded = max(stats["generated_tokens"] - 1, 0)  # the last id is sampled, not decoded
    print(f"prefill: {stats['prompt_tokens']} tokens in {stats['prefill_seconds']:.4f} s "
          f"({_rate(stats['prompt_tokens'], stats['prefill_seconds'])})", file=out)
    print(f"decode: {decoded} tokens in {stats['decode_seconds']:.4f} s "
          f"({_rate(decoded, stats['decode_seconds'])})", file=out)
    print(f"time to first token: {stats['time_to_first_token_seconds']:.4f} s", file=out)
    return ids


def generate_text(bundle_dir, library, prompt, count, threads=1, context=0, temperature=0.0,
                  top_k=0, top_p=1.0, seed=0, stop_strings=None, ignore_eos=False, out=None):
    """Generates from the text `prompt` through the runtime's tokenizer and
    cq4p_model_generate_text, streaming the text to `out`; returns the ids."""
    if not has_tokenizer_json(bundle_dir):
        raise GenerateError(f"{bundle_dir} has no tokenizer.json: give --prompt-ids")
    out = out if out is not None else sys.stdout
    with native.NativeModel(bundle_dir, library, threads=threads, context=context) as model:
        ids, _, stats = native.generate_text(
            model, prompt, count, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, stop_strings=stop_strings, ignore_stop_ids=ignore_eos,
            on_text=lambda piece: (out.write(piece), out.flush()))
    print(file=out)
    print("ids: " + " ".join(map(str, ids)), file=out)
    decoded = max(stats["generated_tokens"] - 1, 0)
    print(f"prefill: {stats['prompt_tokens']} tokens in {stats['prefill_seconds']:.4f} s "
          f"({_rate(stats['prompt_tokens'], stats['prefill_seconds'])})", file=out)
    print(f"decode: {decoded} tokens in {stats['decode_seconds']:.4f} s "
          f"({_rate(decoded, stats['decode_seconds'])})", file=out)
    print(f"time to first token: {stats['time_to_first_token_seconds']:.4f} s", file=out)
    return ids


def compare(model, oracle, prompt, steps):
    """Prefills `prompt` into both, then decodes `steps` tokens (the
    oracle's greedy choice, fed to both). One row per step: (step, max
    |diff| / oracle logit std, oracle top-1, compiled top-1, oracle top-1
    minus top-2 over its std)."""
    model.reset()
    oracle.reset()
    compiled, expected = model.prefill(prompt), oracle.prefill(prompt)[-1]
    rows = []
    if expected.size < 2:
        raise GenerateError(f"the model's vocabulary has {expected.size} token: check-model "
                            f"compares the top two logits, so it needs at least 2")
    for step in range(steps + 1):
        # In float64: logits of 1e-30 (a soft-cap that small) have a float32
        # variance of 0.
        std = float(np.std(expected, dtype=np.float64))
        if not std > 0 or not math.isfinite(std):
            raise GenerateError(f"step {step}: the oracle's logits have standard deviation "
                                f"{std}: check-model measures differences relative to it, so "
                                f"it needs finite logits that differ")
        top2 = np.partition(expected, -2)[-2:]
        token = int(np.argmax(expected))
        rows.append((step, float(np.max(np.abs(compiled - expected))) / std, token,
                     int(np.argmax(compiled)), float(top2[1] - top2[0]) / std))
        if step < steps:
            compiled, expected = model.decode(token), oracle.decode(token)
    return rows


def check_config(bundle_dir):
    """The bundle's config by convert's rules (a bundle whose manifest was
    edited, or written by an older converter): a model the compiler and
    runtime take (architecture.check_limits), every number a normal finite
    float32 (convert.check_spec_values); GenerateError naming the field."""
    from cq4p.cli import convert as cv  # convert imports this module's siblings
    manifest = bd.read_manifest(bundle_dir)
    where = os.path.join(bundle_dir, bd.MANIFEST) + " config"
    # The oracle's bounds on sizes first (BundleError naming the field):
    # model_spec makes a record per layer of what the config claims.
    rf.Config(manifest.get("config"))
    try:
        spec = arch.model_spec(manifest.get("config") or {})
        spec = arch.with_checkpoint_names(spec, {
            entry["name"]: tuple(entry.get("original_shape") or entry["shape"])
            for entry in manifest["tensors"]})
        arch.check_limits(spec)
        cv.check_spec_values(where, spec)
    except arch.ArchitectureError as error:
        raise GenerateError(f"{where}: {error}") from None
    except cv.ConvertError as error:
        raise GenerateError(str(error)) from None
    except (ValueError, TypeError, OverflowError, KeyError) as error:
        raise GenerateError(f"{where}: cannot read the model's fields: "
                            f"{type(error).__name__}: {error}") from None


def check_model(bundle_dir, library, prompt=None, steps=DEFAULT_STEPS, threads=1, context=0,
                tolerance=None, seed=0, out=None):
    """Compiled model vs oracle; prints a row per step and a verdict;
    returns True when every step is within `tolerance` (None: the model
    architecture's, `default_tolerance`) and every clear greedy decision
    (oracle margin above twice the tolerance) agrees."""
    check_config(bundle_dir)
    oracle = rf.Reference.from_bundle(bundle_dir)
    if prompt is None:
        rng = np.random.default_rng(seed)
        prompt = [int(t) for t in rng.integers(0, oracle.vocab, DEFAULT_PROMPT_TOKENS)]
    with native.NativeModel(bundle_dir, library, threads=threads, context=context) as model:
        if tolerance is None:
            tolerance = default_tolerance(model.info()["architecture"])
        if not (np.isfinite(tolerance) and tolerance >= 0):
            raise GenerateError(f"tolerance {tolerance}: expected a finite number >= 0")
        try:
            rows = compare(model, oracle, prompt, steps)
        except native.NativeError as error:
            # The runtime refuses to return logits that are not finite: a
            # failed check. Any other refusal (an id past the vocabulary)
            # is the caller's error and goes up as it is.
            if "non-finite" not in str(error):
                raise
            print(f"the compiled model's logits are not finite: {error}: FAILED", file=out)
            return False
    print(f"prompt: {len(prompt)} tokens; {steps} greedy steps (the oracle's tokens fed to "
          f"both)", file=out)
    print(f"{'step':>4} {'max|diff|/std':>13} {'oracle':>7} {'compiled':>8} {'margin':>7}",
          file=out)
    ok, disagreements = True, 0
    for step, error, expected, got, margin in rows:
        note = ""
        if not error <= tolerance:  # a NaN error fails too
            ok, note = False, "  over tolerance" if error > tolerance else "  not finite"
        if got != expected:
            disagreements += 1
            if margin > 2 * tolerance:
                ok, note = False, note + "  tokens differ"
            else:
                note += "  tokens differ (a near tie)"
        print(f"{step:>4} {error:>13.4f} {expected:>7} {got:>8} {margin:>7.2f}{note}", file=out)
    worst = max(row[1] for row in rows)
    print(f"{len(rows)} steps: worst {worst:.4f} (tolerance {tolerance}), greedy tokens agree "
          f"at {len(rows) - disagreements} of {len(rows)}: {'ok' if ok else 'FAILED'}",
          file=out)
    return ok
