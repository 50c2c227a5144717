"""The model families users ship, end to end on the host: a synthetic
checkpoint shaped like each (LFM2, Gemma 4, Llama 3.2, Qwen2.5, SmolLM2)
-> convert -> cq4p-compile --target=host -> the runtime, checked step by
step against the numpy oracle (cq4p.model.reference, written from the published
definitions): logits within the tolerance at every step and the oracle's
greedy tokens, over a prompt longer than two prefill chunks and 32 decoded
tokens.

Needs the build tree's tools and runtime library (as test_model_e2e).
"""

import os
import subprocess

import numpy as np
import pytest

from cq4p.cli import convert as cv
from cq4p.cli import generate as gn
from cq4p.model import reference as rf
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

CHUNK = 8
PROMPT_TOKENS = 2 * CHUNK + 5
GREEDY_STEPS = 32
# Gemma 4's sliding window, small enough that the prompt and the decoded
# tokens slide past it (the released 512 would not be reached here).
GEMMA4_WINDOW = 16


def _shape(arch):
    if arch == "gemma4":
        return synthetic.default_shape(arch, window=GEMMA4_WINDOW)
    return synthetic.default_shape(arch)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """family(arch) -> (bundle, library, config), made once per module."""
    made = {}

    def make(arch):
        if arch not in made:
            root = tmp_path_factory.mktemp(arch)
            config = synthetic.write_model(str(root / "checkpoint"), arch, shape=_shape(arch))
            with open(os.devnull, "w") as quiet:
                cv.convert(str(root / "checkpoint"), str(root / "bundle"), progress=quiet)
            library = str(root / "libmodel.so")
            result = subprocess.run(
                [tools.find_tool("cq4p-compile"), str(root / "bundle" / "model.mlir"),
                 "--target=host", "--prefill-chunk", str(CHUNK), "-o", library],
                capture_output=True, text=True, check=False)
            assert result.returncode == 0, result.stderr
            made[arch] = (str(root / "bundle"), library, config)
        return made[arch]

    return make


@pytest.mark.parametrize("arch", synthetic.FAMILIES)
def test_the_family_generates_the_oracles_tokens(family, arch):
    bundle, library, config = family(arch)
    prompt = synthetic.prompt(config, PROMPT_TOKENS, seed=3)
    oracle = rf.Reference.from_bundle(bundle)
    with native.NativeModel(bundle, library, threads=2) as model:
        rows = gn.compare(model, oracle, prompt, GREEDY_STEPS)
        ids, _ = model.generate(prompt, GREEDY_STEPS)
    worst = max(row[1] for row in rows)
    print(f"{arch}: worst step max |diff| / std = {worst:.4f} over {len(rows)} steps")
    assert worst <= gn.default_tolerance(arch)
    assert [row[3] for row in rows] == [row[2] for row in rows]
    assert ids == oracle.generate(prompt, GREEDY_STEPS)


@pytest.mark.parametrize("arch", ["lfm2", "gemma4"])
def test_chunks_of_any_size_leave_the_same_state(family, tmp_path, arch):
    # LFM2's convolution state and Gemma 4's shared caches: a prompt run as
    # full chunks and a tail, and the same prompt in chunks of 2 (a library
    # whose prefill chunk is 2), give the same next logits, and the same
    # logits after a decode step: a prompt row's attention visits the same
    # tiles of keys whatever chunk it is in. One token at a time (the decode
    # path, whose dot products sum in another order) gives them within the
    # family's tolerance against the oracle.
    bundle, library, config = family(arch)
    pairs = str(tmp_path / "libmodel-2.so")
    result = subprocess.run(
        [tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"),
         "--target=host", "--prefill-chunk", "2", "-o", pairs],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    # An even length: the pairs library runs it as pairs, with no one-row tail.
    prompt = synthetic.prompt(config, PROMPT_TOKENS + 1, seed=4)
    assert len(prompt) % 2 == 0 and len(prompt) % CHUNK
    with native.NativeModel(bundle, library, threads=1) as model:
        chunked = model.prefill(prompt)
        after = model.decode(prompt[0])
    with native.NativeModel(bundle, pairs, threads=1) as model:
        paired = model.prefill(prompt)
        paired_after = model.decode(prompt[0])
    with native.NativeModel(bundle, pairs, threads=1) as model:
        for token in prompt[:-1]:
            model.decode(token)
        single = model.prefill(prompt[-1:])
        single_after = model.decode(prompt[0])
    scale = float(np.std(chunked))
    assert float(np.max(np.abs(chunked - paired))) / scale <= 1e-4
    assert float(np.max(np.abs(after - paired_after))) / scale <= 1e-4
    tolerance = gn.default_tolerance(arch)
    assert float(np.max(np.abs(chunked - single))) / scale <= tolerance
    assert float(np.max(np.abs(after - single_after))) / scale <= tolerance


@pytest.mark.parametrize("tolerance", ["nan", "inf", "-1"])
def test_check_model_refuses_a_tolerance_that_passes_anything(family, tolerance, capsys):
    from cq4p.cli import main as cli

    bundle, library, _ = family("llama32")
    # Refused as argparse reads it (exit status 2, before anything runs).
    with pytest.raises(SystemExit) as refused:
        cli.main(["check-model", "--bundle", bundle, "--library", library, "--steps", "1",
                  "--tolerance", tolerance])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --tolerance: expected a" in err and f"found {tolerance}" in err


def test_check_model_fails_on_logits_that_are_not_finite(family, tmp_path, capsys):
    # Both sides NaN must not pass: a bundle whose final norm is NaN makes
    # the oracle's and the compiled logits NaN alike.
    import shutil

    from cq4p.io import bundle as bd

    bundle, library, _ = family("llama32")
    broken = tmp_path / "bundle"
    shutil.copytree(bundle, broken)
    manifest = bd.read_manifest(str(broken))
    entry = next(e for e in manifest["tensors"] if e["name"].endswith("model.norm.weight"))
    path = bd.resolve(str(broken), entry["file"])
    data = bytearray(open(path, "rb").read())
    data[-2:] = np.array([np.nan], dtype=np.float16).tobytes()  # the last element
    open(path, "wb").write(bytes(data))
    ok = gn.check_model(str(broken), library, steps=1, out=None)
    assert not ok
    assert "not finite" in capsys.readouterr().out


def test_inspect_shows_the_true_shape_of_a_padded_k(family, capsys):
    # SmolLM2's hidden 960 is stored as K = 1024 (zero-padded); the
    # manifest records the true shape and inspect shows it.
    from cq4p.cli import main as cli

    bundle, _, config = family("smollm2")
    assert cli.main(["inspect", bundle]) == 0
    out = capsys.readouterr().out
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    assert f"model.embed_tokens.weight.cq4p.weights CQ4 orthogonal panels gs 128 " \
           f"{vocab}x1024 (true shape {vocab}x{hidden})" in out
