"""Whole models end to end: synthetic checkpoint -> convert -> cq4p-compile
-> the runtime (ctypes, cq4p_model_*) -> compared with the oracle.

Needs the build tree's cq4p-compile and cq4p-opt (or $CQ4P_COMPILE,
$CQ4P_OPT) and the runtime library with the model API
($CQ4P_RUNTIME_LIB, else build/lib/libcq4p_runtime.so).
"""

import os
import subprocess

import numpy as np
import pytest

from cq4p.cli import check as ck
from cq4p.cli import convert as cv
from cq4p.cli import generate as gn
from cq4p.cli import main as cli
from cq4p.io import bundle as bd
from cq4p.model import reference as rf
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

CHUNK = 8
PROMPT_TOKENS = 40
GREEDY_STEPS = 32
# Compiled vs oracle: max |logit diff| / oracle logit std (int8 activations
# over the dequantized weights; measured 0.03 to 0.06).
LOGIT_TOLERANCE = gn.LOGIT_TOLERANCE
# Prefill in chunks vs one token at a time: the same kernels but the
# attention's, whose sums run in another order (the prompt attention's tiles
# against the decode row's), so the hidden states differ in their last bits;
# where such a difference moves an activation across an int8 rounding
# boundary, the logits move by one quantization step. Over lengths 1 to 32,
# three prompts each, per family: 7 to 20 of the 96 prompts differ by more
# than 1e-4 (measured on the compiler before this bound was set), none by
# more than 0.033. The bound is half the oracle's (LOGIT_TOLERANCE).
CHUNKING_TOLERANCE = 0.05


def compile_model(bundle, library, chunk=CHUNK, kv_cache="f32", options=()):
    result = subprocess.run([tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"),
                             "--target=host", "--prefill-chunk", str(chunk),
                             f"--kv-cache={kv_cache}", *options, "-o", library],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return library


@pytest.fixture(scope="module")
def compiled(synthetic_model, tmp_path_factory):
    """compiled(arch, seed=0) -> (bundle, library, config)."""
    made = {}

    def make(arch, seed=0):
        if (arch, seed) not in made:
            _, bundle, config = synthetic_model(arch, seed)
            library = str(tmp_path_factory.mktemp(f"lib-{arch}-{seed}") / "libmodel.so")
            made[arch, seed] = (str(bundle), compile_model(str(bundle), library), config)
        return made[arch, seed]

    return make


def relative(got, expected):
    return float(np.max(np.abs(got - expected)) / np.std(expected))


@pytest.mark.parametrize("arch", synthetic.ARCHITECTURES)
def test_the_graph_verifies(synthetic_model, arch):
    _, bundle, _ = synthetic_model(arch)
    printed = tools.run_opt((bundle / "model.mlir").read_text())
    assert "cq4p.cached_attention" in printed


@pytest.mark.parametrize("arch", synthetic.ARCHITECTURES)
def test_logits_match_the_oracle(compiled, arch):
    bundle, library, config = compiled(arch)
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    oracle = rf.Reference.from_bundle(bundle)
    expected = oracle.prefill(prompt)[-1]
    with native.NativeModel(bundle, library, threads=2) as model:
        info = model.info()
        assert (info["architecture"], info["vocab"], info["prefill_chunk"]) == \
            ({"gemma3": "gemma3"}.get(arch, arch), 512, CHUNK)
        got = model.prefill(prompt)
        assert model.position == PROMPT_TOKENS
    error = relative(got, expected)
    print(f"{arch}: last-position logits after {PROMPT_TOKENS} tokens: max |diff| / std = "
          f"{error:.4f} (tolerance {LOGIT_TOLERANCE})")
    assert error <= LOGIT_TOLERANCE
    assert int(np.argmax(got)) == int(np.argmax(expected))


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_an_fp16_kv_cache_keeps_the_oracles_tokens(synthetic_model, tmp_path, arch):
    # Keys and values rounded to fp16 (keys by the rotary embedding's
    # store, values by a conversion into the cache): the same greedy
    # tokens, every step within the tolerance, and the runtime sizes the
    # cache by the library's element type.
    _, bundle, config = synthetic_model(arch)
    library = compile_model(str(bundle), str(tmp_path / "libmodel-f16.so"), kv_cache="f16")
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    expected = rf.Reference.from_bundle(str(bundle)).generate(prompt, GREEDY_STEPS)
    with native.NativeModel(str(bundle), library, threads=2) as model:
        assert model.info()["kv_dtype"] == 2
        ids, _ = model.generate(prompt, GREEDY_STEPS)
        rows = gn.compare(model, rf.Reference.from_bundle(str(bundle)), prompt, GREEDY_STEPS)
    assert ids == expected
    worst = max(row[1] for row in rows)
    print(f"{arch}, fp16 KV cache: worst step max |diff| / std = {worst:.4f}")
    assert worst <= LOGIT_TOLERANCE


def assert_same_logits(bundle, libraries, prompt):
    """The libraries' logits over a chunked prefill of `prompt` and 4 greedy
    decode steps are equal bit for bit."""
    outputs = []
    for path in libraries:
        with native.NativeModel(bundle, path, threads=2) as model:
            steps = [model.prefill(prompt)]
            for _ in range(4):
                steps.append(model.decode(int(np.argmax(steps[-1]))))
            outputs.append(np.stack(steps))
    for other in outputs[1:]:
        assert np.array_equal(outputs[0].view(np.uint32), other.view(np.uint32))


def test_attention_splits_whole_kv_groups_at_any_thread_count(tmp_path):
    # Eight KV heads of two query heads each: the attention dispatch's
    # ranges hold whole groups (cq4p-lower-model gives it a grain of 2
    # heads), so a group's heads walk the cache together however many
    # threads share it. One, two and three threads (twelve ranges asked
    # for, eight groups to give) compute the oracle's logits within the
    # tolerance, and the same bits, over a chunked prefill and decode steps.
    shape = synthetic.Shape(hidden=256, ffn=512, vocab=512, layers=1, heads=16, kv_heads=8,
                            head_dim=16)
    config = synthetic.write_model(str(tmp_path / "checkpoint"), "llama", shape=shape, seed=4)
    bundle = str(tmp_path / "bundle")
    with open(os.devnull, "w") as quiet:
        cv.convert(str(tmp_path / "checkpoint"), bundle, progress=quiet)
    library = compile_model(bundle, str(tmp_path / "libmodel.so"))
    prompt = synthetic.prompt(config, 2 * CHUNK + 3, seed=5)
    expected = rf.Reference.from_bundle(bundle).prefill(prompt)[-1]
    outputs = []
    for threads in (1, 2, 3):
        with native.NativeModel(bundle, library, threads=threads) as model:
            steps = [model.prefill(prompt)]
            for _ in range(4):
                steps.append(model.decode(int(np.argmax(steps[-1]))))
        outputs.append(np.stack(steps))
    error = relative(outputs[0][0], expected)
    print(f"16 heads over 8 KV heads: last-position logits max |diff| / std = {error:.4f}")
    assert error <= LOGIT_TOLERANCE
    for other in outputs[1:]:
        assert np.array_equal(outputs[0].view(np.uint32), other.view(np.uint32))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_fused_dense_mlp_computes_the_same_logits(compiled, tmp_path, arch):
    # --fuse-dense-mlp runs the same matmuls and gating per super-block in
    # one dispatch: logits equal the unfused library's bit for bit, over a
    # chunked prefill and decode steps.
    bundle, library, config = compiled(arch)
    fused = compile_model(bundle, str(tmp_path / "libmodel-fused.so"),
                          options=("--fuse-dense-mlp",))
    assert_same_logits(bundle, (library, fused), synthetic.prompt(config, 2 * CHUNK + 3, seed=2))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_gating_in_the_down_projections_transform_computes_the_same_logits(
        compiled, tmp_path, arch):
    # By default the down projection's activation transform forms act(gate)
    # * up as it loads the gate and up rows (silu for llama, gelu_tanh for
    # gemma3); --gate-in-transform=false runs the gating as its own pass
    # and the transform reads its row. Logits equal bit for bit, over a
    # chunked prefill and decode steps.
    bundle, library, config = compiled(arch)
    separate = compile_model(bundle, str(tmp_path / "libmodel-glu-pass.so"),
                             options=("--gate-in-transform=false",))
    # The libraries' LLVM IR: the fused transform only by default (the
    # gating kernel itself is inlined into its task).
    for options, fused in ((("--gate-in-transform=false",), False), ((), True)):
        ir = subprocess.run([tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"),
                             "--target=host", "--prefill-chunk", str(CHUNK), "--emit=llvm",
                             *options, "-o", "-"], capture_output=True, text=True, check=True)
        assert ("@cq4p_quantize_glu_" in ir.stdout) == fused
    assert_same_logits(bundle, (library, separate),
                       synthetic.prompt(config, 2 * CHUNK + 3, seed=3))


def test_an_unknown_kv_cache_type_is_refused(synthetic_model, tmp_path):
    _, bundle, _ = synthetic_model("llama")
    result = subprocess.run([tools.find_tool("cq4p-compile"), str(bundle / "model.mlir"),
                             "--target=host", "--kv-cache=bf16", "-o", str(tmp_path / "x.so")],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "--kv-cache=bf16 is not a KV cache element type (f32 or f16)" in result.stderr


@pytest.mark.parametrize("arch", synthetic.ARCHITECTURES)
def test_greedy_generation_matches_the_oracle(compiled, arch):
    bundle, library, config = compiled(arch)
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=1)
    expected = rf.Reference.from_bundle(bundle).generate(prompt, GREEDY_STEPS)
    with native.NativeModel(bundle, library, threads=2) as model:
        ids, stats = model.generate(prompt, GREEDY_STEPS)
        # Stepping by hand, the oracle's tokens fed to both, every step's
        # logits stay within the tolerance.
        rows = gn.compare(model, rf.Reference.from_bundle(bundle), prompt, GREEDY_STEPS)
    assert ids == expected
    assert (stats["prompt_tokens"], stats["generated_tokens"]) == (PROMPT_TOKENS, GREEDY_STEPS)
    worst = max(row[1] for row in rows)
    print(f"{arch}: {GREEDY_STEPS} greedy tokens equal the oracle's; worst step max |diff| / "
          f"std = {worst:.4f}")
    assert worst <= LOGIT_TOLERANCE


@pytest.mark.parametrize("arch", synthetic.ARCHITECTURES)
def test_chunked_prefill_equals_decoding_one_token_at_a_time(compiled, arch):
    bundle, library, config = compiled(arch)
    with native.NativeModel(bundle, library, threads=2) as model:
        for length in (1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5):
            prompt = synthetic.prompt(config, length, seed=length)
            model.reset()
            chunked = model.prefill(prompt)
            model.reset()
            for token in prompt:
                stepped = model.decode(token)
            assert model.position == length
            error = relative(chunked, stepped)
            print(f"{arch}: prompt of {length}: chunked vs token by token max |diff| / std = "
                  f"{error:.2e}")
            assert error <= CHUNKING_TOLERANCE, (length, error)


def test_bad_input_is_refused_and_changes_nothing(compiled):
    bundle, library, config = compiled("llama")
    with native.NativeModel(bundle, library, context=16) as model:
        assert model.info()["context"] == 16
        model.prefill([1, 2, 3])
        with pytest.raises(native.NativeError, match=r"token id 512 at index 1 >= vocab 512"):
            model.prefill([4, 512])
        with pytest.raises(native.NativeError, match=r"token id -1"):
            model.decode(-1)
        assert model.position == 3
        with pytest.raises(native.NativeError, match=r"context overflow: .*context 16"):
            model.prefill(list(range(14)))
        assert model.position == 3
        model.prefill(list(range(13)))
        with pytest.raises(native.NativeError, match=r"context overflow"):
            model.decode(1)
        assert model.position == 16


def test_a_library_for_another_bundle_is_refused_by_digest(compiled, synthetic_model):
    _, library_a, _ = compiled("llama", seed=0)
    _, bundle_b, _ = synthetic_model("llama", seed=1)
    digest_a = bd.read_manifest(compiled("llama")[0])["model_digest"]
    digest_b = bd.read_manifest(str(bundle_b))["model_digest"]
    assert digest_a != digest_b
    with pytest.raises(native.NativeError) as refusal:
        native.NativeModel(str(bundle_b), library_a)
    assert digest_a in refusal.value.message and digest_b in refusal.value.message


def test_generate_and_check_model_commands(compiled, capsys):
    bundle, library, config = compiled("qwen3")
    prompt = synthetic.prompt(config, 12, seed=4)
    expected = rf.Reference.from_bundle(bundle).generate(prompt, 8)
    status = cli.main(["generate", "--bundle", bundle, "--library", library, "--prompt-ids",
                       " ".join(map(str, prompt)), "-n", "8", "--threads", "2"])
    out = capsys.readouterr().out
    assert status == 0
    assert f"ids: {' '.join(map(str, expected))}\n" in out
    assert "prefill: 12 tokens in " in out and "decode: 7 tokens in " in out
    assert "time to first token: " in out

    status = cli.main(["check-model", "--bundle", bundle, "--library", library, "--steps", "4"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "5 steps: worst " in out and "greedy tokens agree at 5 of 5: ok" in out

    status = cli.main(["check-model", "--bundle", bundle, "--library", library, "--steps", "2",
                       "--tolerance", "1e-6"])
    assert status == 1 and "over tolerance" in capsys.readouterr().out

    status = cli.main(["generate", "--bundle", bundle, "--library", library, "--prompt-ids",
                       "1 2 100000"])
    assert status == 2 and "token id 100000 at index 2 >= vocab 512" in capsys.readouterr().err


def test_check_runs_every_tensor_through_a_model_library(tmp_path):
    # vocab 384: no other linear shares the lm_head's shape, whose library
    # kernel is then the one-row GEMV alone.
    checkpoint, bundle = str(tmp_path / "checkpoint"), str(tmp_path / "bundle")
    synthetic.write_model(checkpoint, "llama", synthetic.default_shape("llama", vocab=384,
                                                                       layers=1))
    cv.convert(checkpoint, bundle, progress=open(os.devnull, "w"))
    library = compile_model(bundle, str(tmp_path / "libmodel.so"))
    results = ck.check_bundle(bundle, library, rows=3)
    assert {name for name, _, _ in results} == {
        "model.embed_tokens.weight", "lm_head.weight"} | {
        f"model.layers.0.{part}.weight" for part in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    for name, kind, error in results:
        assert error < ck.TOLERANCE, (name, kind, error)
