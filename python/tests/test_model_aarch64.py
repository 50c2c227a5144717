"""Whole models on AArch64: the same bundle compiled for aarch64-neon and
aarch64-sme2, run by the cross-built cq4p-run under QEMU 11.1 (SME2 with a
512-bit streaming vector length).

- greedy tokens equal the numpy oracle's on the dequantized weights;
- every step's logits are within the model tolerance of the oracle's;
- NEON and SME2 logits are within the model tolerance of each other: SME2's
  attention (prefill and decode) sums its scores and weighted values in FMOPA tiles, in
  another order than the NEON vector code (docs/FORMAT.md section 5: prefill
  attention within 1% relative error; only int32 partials must be equal);
- NEON and SME2 logits are equal bit for bit with an fp16 KV cache (whose
  attention both run as the same vector code: the SME2 library then
  computes the same int32 partials in its streaming leaves and shares every
  fp32 step) and --sme2-fmlal-rotation=false (the lm_head's rotation from
  fp32 activations, as NEON computes it; the default rounds them to fp16
  for FMLAL, which the oracle and tolerance checks here cover);
- SME2's and NEON's decode attention over more than one 256-key softmax
  block (a 300-token prompt; NEON with an fp32 and an fp16 cache);
- a prompt longer than the prefill chunk (full chunks plus a tail), past a
  sliding window (gemma3's 8, gemma4's 16);
- the gating formed in the down projection's activation transform gives the
  logits of the separate gating pass bit for bit, on each target.

Needs $CQ4P_AARCH64_RUN (build/aarch64/bin/cq4p-run), $CQ4P_QEMU and the
cross sysroot; test/run_suites.py sets them for the aarch64 build.
"""

import os
import subprocess

import numpy as np
import pytest

from cq4p.cli import generate as gn
from cq4p.model import reference as rf
from cq4p.model import synthetic
from cq4p.native import tools

CHUNK = 16
PROMPT_TOKENS = 40  # two full chunks and a tail of 8
NEW_TOKENS = 12
SYSROOT = "/usr/aarch64-linux-gnu"
CPU = {"aarch64-neon": "max", "aarch64-sme2": "max,sme-default-vector-length=64"}

RUNNER = os.environ.get("CQ4P_AARCH64_RUN")
QEMU = os.environ.get("CQ4P_QEMU")
pytestmark = pytest.mark.skipif(
    not (RUNNER and QEMU and os.path.exists(RUNNER) and os.path.exists(QEMU)),
    reason="needs the aarch64 build's cq4p-run ($CQ4P_AARCH64_RUN) and QEMU 11.1 ($CQ4P_QEMU)")


def run_on_aarch64(bundle, target, work, prompt, flags=(), new_tokens=NEW_TOKENS, chunk=CHUNK,
                   threads=2):
    library = os.path.join(work, f"model-{target}.so")
    compiled = subprocess.run(
        [tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"), f"--target={target}",
         f"--prefill-chunk={chunk}", *flags, "-o", library], capture_output=True, text=True,
        check=False)
    assert compiled.returncode == 0, compiled.stderr
    logits_file = os.path.join(work, f"logits-{target}.bin")
    if target == "aarch64-sme2":
        backend = ["--sme2-library", library, "--backend", "sme2"]
    else:
        backend = ["--backend", "neon"]
    command = [QEMU, "-L", SYSROOT, "-cpu", CPU[target], RUNNER, "--bundle", bundle,
               "--library", library, *backend, "--prompt-ids", " ".join(map(str, prompt)),
               "-n", str(new_tokens), "--threads", str(threads), "--logits-out", logits_file]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    if target == "aarch64-sme2":
        assert "(SME2)" in result.stderr, result.stderr
    ids_line = next(line for line in result.stdout.splitlines() if line.startswith("ids:"))
    ids = [int(token) for token in ids_line.split()[1:]]
    logits = np.fromfile(logits_file, dtype="<f4")
    return ids, logits


def assert_targets_agree(results, vocab, tolerance):
    """NEON's and SME2's logits, step by step, within `tolerance` (max
    |diff| / std) of each other."""
    neon, sme2 = results["aarch64-neon"][1], results["aarch64-sme2"][1]
    assert neon.shape == sme2.shape
    for number, (a, b) in enumerate(zip(neon.reshape(-1, vocab), sme2.reshape(-1, vocab))):
        error = np.max(np.abs(a - b)) / np.std(a)
        assert error <= tolerance, (
            f"step {number}: NEON and SME2 max |diff| / std {error:.4f} > {tolerance}")


# Prefill chunks of 16 (the embedding's rows through SME2's FMLAL leaf), and
# of 128 over 160 tokens: a whole chunk, whose embedding dispatch splits into
# two ranges of 64 rows (its grain) shared by the two threads, then one of
# 32 rows, each range one call of the embedding's outer-product leaf (calls
# of at least 32 rows).
@pytest.mark.parametrize("chunk, tokens, threads", [(CHUNK, PROMPT_TOKENS, 2), (128, 160, 2)])
def test_neon_and_sme2_logits_are_equal_bit_for_bit_with_an_fp16_cache(
        chunk, tokens, threads, synthetic_model, tmp_path):
    # An fp16 KV cache: both targets run the attention as the same vector
    # code (SME2's outer products read fp32 rows), so every fp32 step is
    # shared and the int32 partials are equal; the lm_head's rotation from
    # fp32 activations on SME2 too (NEON ignores the flag).
    _, bundle, config = synthetic_model("llama")
    prompt = [(5 * i + 2) % config["vocab_size"] for i in range(tokens)]
    results = {target: run_on_aarch64(str(bundle), target, str(tmp_path), prompt,
                                      ["--kv-cache=f16", "--sme2-fmlal-rotation=false"],
                                      chunk=chunk, threads=threads)
               for target in CPU}
    neon, sme2 = results["aarch64-neon"][1], results["aarch64-sme2"][1]
    assert neon.size == NEW_TOKENS * config["vocab_size"]
    differing = int(np.count_nonzero(neon.view(np.uint32) != sme2.view(np.uint32)))
    assert differing == 0, f"{differing} of {neon.size} logits differ between NEON and SME2"


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("target", list(CPU))
def test_the_gating_in_the_down_projections_transform_keeps_the_logits(
        arch, target, synthetic_model, tmp_path):
    # The down projection's activation transform forms act(gate) * up from
    # the gate and up rows (the default) instead of reading a row a gating
    # pass wrote (--gate-in-transform=false): the same logits bit for bit on
    # each target, over a chunked prefill and decode steps.
    _, bundle, config = synthetic_model(arch)
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=4)
    logits = []
    for name, flags in (("fused", []), ("pass", ["--gate-in-transform=false"])):
        work = tmp_path / name
        work.mkdir()
        logits.append(run_on_aarch64(str(bundle), target, str(work), prompt, flags,
                                     new_tokens=4)[1])
    assert logits[0].size == 4 * config["vocab_size"]
    differing = int(np.count_nonzero(logits[0].view(np.uint32) != logits[1].view(np.uint32)))
    assert differing == 0, f"{differing} of {logits[0].size} logits differ"


def greedy_oracle(bundle, prompt, new_tokens):
    """The numpy oracle's greedy ids and the logits each was picked from."""
    oracle = rf.Reference.from_bundle(str(bundle))
    ids, logits = [], []
    step = oracle.prefill(prompt)[-1]
    for _ in range(new_tokens):
        logits.append(step)
        ids.append(int(np.argmax(step)))
        step = oracle.decode(ids[-1])
    return ids, logits


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_neon_and_sme2_models_match_the_oracle_and_each_other(arch, synthetic_model, tmp_path):
    _, bundle, config = synthetic_model(arch)
    vocab = config["vocab_size"]
    prompt = [(5 * i + 2) % vocab for i in range(PROMPT_TOKENS)]

    expected_ids, expected_logits = greedy_oracle(bundle, prompt, NEW_TOKENS)

    results = {target: run_on_aarch64(str(bundle), target, str(tmp_path), prompt)
               for target in CPU}
    for target, (ids, logits) in results.items():
        assert ids == expected_ids, f"{target}: {ids} != oracle {expected_ids}"
        logits = logits.reshape(NEW_TOKENS, vocab)
        for number, (got, want) in enumerate(zip(logits, expected_logits)):
            error = np.max(np.abs(got - want)) / np.std(want)
            assert error <= gn.LOGIT_TOLERANCE, (
                f"{target} step {number}: max |diff| / std {error:.4f} > {gn.LOGIT_TOLERANCE}")
    assert_targets_agree(results, vocab, gn.LOGIT_TOLERANCE)


@pytest.mark.parametrize("target, flags", [("aarch64-sme2", []), ("aarch64-neon", []),
                                           ("aarch64-neon", ["--kv-cache=f16"])])
def test_decode_across_softmax_blocks_matches_the_oracle(target, flags, synthetic_model,
                                                         tmp_path):
    # SME2's streaming decode attention (lib/Conversion/CQ4PToArmSME/
    # DecodeAttention.cpp) and the NEON code (lib/Conversion/CQ4PToNeon/
    # NeonAttention.cpp) take the softmax in blocks of 256 keys: a 300-token
    # prompt puts every decode step's keys (301 to 304) across two blocks,
    # the last tile of 16 (NEON: quad of 4) partial, and NEON's prefill
    # chunks past the first 256 rows across two blocks too.
    _, bundle, config = synthetic_model("llama")
    vocab, new_tokens = config["vocab_size"], 4
    prompt = [(7 * i + 3) % vocab for i in range(300)]
    expected_ids, expected_logits = greedy_oracle(bundle, prompt, new_tokens)
    ids, logits = run_on_aarch64(str(bundle), target, str(tmp_path), prompt, flags,
                                 new_tokens=new_tokens)
    assert ids == expected_ids, f"{ids} != oracle {expected_ids}"
    for number, (got, want) in enumerate(zip(logits.reshape(new_tokens, vocab),
                                             expected_logits)):
        error = np.max(np.abs(got - want)) / np.std(want)
        assert error <= gn.LOGIT_TOLERANCE, (
            f"step {number}: max |diff| / std {error:.4f} > {gn.LOGIT_TOLERANCE}")


@pytest.mark.parametrize("arch", synthetic.FAMILIES)
def test_neon_and_sme2_families_match_the_oracle_and_each_other(arch, tmp_path):
    # Every family on both targets: LFM2's convolution state, Gemma 4's
    # shared caches, per-layer head dims, PLE and softcap (its window small
    # enough for the prompt to slide past it), Llama 3's frequencies,
    # Qwen2's biases, SmolLM2's padded K.
    import os as _os

    from cq4p.cli import convert as cv

    sizes = {"window": 16} if arch == "gemma4" else {}
    config = synthetic.write_model(str(tmp_path / "checkpoint"), arch,
                                   shape=synthetic.default_shape(arch, **sizes))
    with open(_os.devnull, "w") as quiet:
        cv.convert(str(tmp_path / "checkpoint"), str(tmp_path / "bundle"), progress=quiet)
    bundle = str(tmp_path / "bundle")
    vocab = config.get("text_config", config)["vocab_size"]
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=5)

    expected_ids, expected_logits = greedy_oracle(bundle, prompt, NEW_TOKENS)
    tolerance = gn.default_tolerance(arch)

    results = {target: run_on_aarch64(bundle, target, str(tmp_path), prompt) for target in CPU}
    for target, (ids, logits) in results.items():
        assert ids == expected_ids, f"{target}: {ids} != oracle {expected_ids}"
        logits = logits.reshape(NEW_TOKENS, vocab)
        for number, (got, want) in enumerate(zip(logits, expected_logits)):
            error = np.max(np.abs(got - want)) / np.std(want)
            assert error <= tolerance, (
                f"{target} step {number}: max |diff| / std {error:.4f} > {tolerance}")
    assert_targets_agree(results, vocab, tolerance)
