"""Two bounded mutation fuzzers of the model layer's readers (docs/TRUST.md):

- model.mlir through cq4p-opt's parse and verify (and the model planner,
  --cq4p-lower-model): mutated converted graphs of the synthetic families,
  each run as a process under hostile.run's limits; every run must end in a
  verdict (exit 0 or 1) with no signal, no hang and no crash dump;
- config.json through convert's config reader (convert.parse_config, the
  architecture's model_spec and check_spec_values), in process: every
  mutated config is refused with a ConvertError or accepted, and an accepted
  one is what the runtime's manifest reader takes (written into a manifest
  and read back by bundle.read_manifest, the Python twin of that reader).

Each runs for CQ4P_FUZZ_SECONDS (default 30) from seeds made by the
families' own graph and config writers (cq4p.model.synthetic, cq4p.model.ir), and the
random generator's seed is CQ4P_FUZZ_SEED (default 0, so that a run of
the test suite is reproducible; printed, so that a failure can be replayed;
set it to explore further). A failing input is written beside the
test's temporary directory and named in the assertion.
"""

import json
import os
import random
import time

import pytest

import hostile
from cq4p.cli import convert as cv
from cq4p.io import bundle as bd
from cq4p.model import architecture as arch
from cq4p.model import ir
from cq4p.model import synthetic
from cq4p.native import tools

SECONDS = float(os.environ.get("CQ4P_FUZZ_SECONDS", "30"))
FAMILIES = ("llama", "qwen3", "gemma3", "lfm2", "gemma4", "qwen25", "smollm2")

# Text MLIR's parser and our verifiers meet in these: brackets and nesting,
# numbers at their edges, the attribute names the verifiers read.
MLIR_TOKENS = [
    "[", "]", "{", "}", "(", ")", "<", ">", "->", ",", ":", "=", "\"", "%", "@", "#", "!",
    "0", "-1", "1", "2147483648", "9223372036854775807", "18446744073709551616",
    "0x7F800000", "0x7FC00000", "0xFF800000", "1.0e+39", "-0.0", "nan", "inf",
    "i64", "f32", "f16", "index", "tensor<?x128xf32>", "tensor<1x0xf32>", "?",
    "layer = 0 : i64", "layer = 1 : i64", "layers = 0 : i64", "hidden = 0 : i64",
    "vocab = 1 : i64", "epsilon", "scale", "window", "head_dim", "num_heads", "num_kv_heads",
    "gs = 0", "gs = 129", "panels", "orthogonal", "hadamard", "cq4p.embedding",
    "cq4p.linear", "cq4p.cached_attention", "cq4p.rms_norm", "cq4p.short_conv", "module {",
    "func.func @forward(", "return", "// ", "\n", "\x00", "\\", "\u00e9", "\ud7ff",
]


def _graph_seeds():
    """model.mlir text of each family's synthetic model (graph only: the
    tensors' manifest entries as convert would write them, no weights)."""
    seeds = []
    for family in FAMILIES:
        shape = synthetic.default_shape(family)
        config = synthetic.model_config(family, shape)
        spec = arch.model_spec(config)
        shapes = {name: value.shape
                  for name, value in synthetic.model_tensors(family, shape, 0).items()}
        spec = arch.with_checkpoint_names(spec, shapes)
        split = spec.split_tables()
        entries = [_entry(name, shapes[name], split.get(name, 1))
                   for name in spec.check_tensors(shapes)]
        seeds.append(ir.model_graph(spec, entries, "digest"))
    return seeds


def _entry(name, shape, rows_per_row=1):
    """A manifest entry as convert writes it for a tensor of `shape` (a
    table stored as `rows_per_row` rows per checkpoint row: split_rows)."""
    if len(shape) == 2 and (cv.is_orthogonal_tensor(name) or cv.is_hadamard_tensor(name, shape)):
        orthogonal = cv.is_orthogonal_tensor(name)
        stored = (shape[0] * rows_per_row, shape[1] // rows_per_row)
        return {"name": name, "file": name, "shape": [stored[0], arch.padded(stored[1])],
                "original_shape": list(shape), "dtype": "CQ4",
                "rotation": "orthogonal" if orthogonal else "hadamard", "layout": "panels",
                "group_size": 128}
    return {"name": name, "file": name, "shape": list(shape), "original_shape": list(shape),
            "dtype": "FP16"}


def _mutate_text(rng, text, tokens):
    """One to four edits: delete, duplicate or swap a span, insert a token,
    replace a number, or nest a bracket run; (text, whether a run of more
    than 256 brackets was nested in)."""
    deep = False
    for _ in range(rng.randint(1, 4)):
        size = len(text)
        at = rng.randrange(max(size, 1))
        span = rng.randint(1, 64)
        choice = rng.randrange(7)
        if choice == 0:
            text = text[:at] + text[at + span:]
        elif choice == 1:
            text = text[:at] + text[at:at + span] * rng.randint(2, 8) + text[at:]
        elif choice == 2:
            other = rng.randrange(max(size, 1))
            text = text[:at] + text[other:other + span] + text[at + span:]
        elif choice == 3:
            text = text[:at] + rng.choice(tokens) + text[at:]
        elif choice == 4:
            digits = [i for i in range(at, min(size, at + 400)) if text[i].isdigit()]
            if digits:
                i = digits[0]
                text = text[:i] + rng.choice(["0", "-1", "65536", "99999999999999999999",
                                              "1e39", "3"]) + text[i + 1:]
        elif choice == 5:
            depth = rng.choice([2, 100, 300, 5000])
            deep = deep or depth > 256
            opener = rng.choice("[{(<")
            closer = {"[": "]", "{": "}", "(": ")", "<": ">"}[opener]
            text = text[:at] + opener * depth + closer * rng.choice([0, depth]) + text[at:]
        else:
            text = text[:at] + chr(rng.randrange(0, 0x80)) + text[at + 1:]
    return text, deep


def _fuzz_seed():
    seed = int(os.environ.get("CQ4P_FUZZ_SEED", "0"))
    print(f"CQ4P_FUZZ_SEED={seed}")
    return seed


def test_model_mlir_fuzz_through_cq4p_opt(tmp_path):
    try:
        opt = tools.find_tool("cq4p-opt")
    except tools.ToolError:
        pytest.skip("cq4p-opt is not built")
    seeds = _graph_seeds()
    for text in seeds:  # the seeds themselves verify and plan
        path = tmp_path / "seed.mlir"
        path.write_text(text)
        outcome = hostile.run([opt, path, "--cq4p-lower-model"])
        assert outcome.returncode == 0, outcome.describe()
    rng = random.Random(_fuzz_seed())
    deadline = time.monotonic() + SECONDS
    runs = inputs = 0
    while time.monotonic() < deadline:
        # Inputs within the nesting bound go BATCH to a process, split by
        # cq4p-opt itself (--split-input-file); a deeper one, which the
        # bound refuses as a whole file, alone.
        batch = []
        while len(batch) < BATCH:
            mutated, deep = _mutate_text(rng, rng.choice(seeds), MLIR_TOKENS)
            if deep:
                _run_opt(opt, tmp_path, [mutated], rng)
                inputs += 1
                runs += 1
            else:
                batch.append(mutated)
        _run_opt(opt, tmp_path, batch, rng)
        inputs += len(batch)
        runs += 1
    print(f"model.mlir fuzz: {inputs} inputs in {runs} runs of cq4p-opt in {SECONDS:.0f} s")
    assert inputs > 0


BATCH = 16
SPLIT = "\n// -----\n"


def _run_opt(opt, tmp_path, inputs, rng):
    """Runs cq4p-opt over `inputs` (one file, split); on a crash, replays
    each alone and fails naming the first that crashes by itself."""
    options = rng.choice([[], ["--cq4p-lower-model"], ["--cq4p-lower-model=kv-cache=f16"]])
    path = tmp_path / "input.mlir"
    path.write_text(SPLIT.join(inputs), errors="surrogatepass")
    outcome = hostile.run([opt, path, "--split-input-file", *options, "-o", os.devnull],
                          timeout=60)
    problem = _opt_problem(outcome)
    if problem is None:
        return
    culprit = path
    for index, text in enumerate(inputs):
        alone = tmp_path / f"alone-{index}.mlir"
        alone.write_text(text, errors="surrogatepass")
        if _opt_problem(hostile.run([opt, alone, *options, "-o", os.devnull],
                                    timeout=60)) is not None:
            culprit = alone
            break
    kept = tmp_path.parent / f"crash-{culprit.name}"
    kept.write_bytes(culprit.read_bytes())
    pytest.fail(f"{problem} on {kept} (options {options}): {outcome.stderr[-1500:]}")


def _opt_problem(outcome):
    """Why a cq4p-opt run is a defect (a crash, a hang, an exit status other
    than a verdict), or None."""
    problem = hostile.crashed(outcome)
    if problem is None and outcome.returncode not in (0, 1):
        problem = f"exit status {outcome.returncode}"
    return problem


JSON_TOKENS = ["{", "}", "[", "]", ",", ":", "\"", "NaN", "Infinity", "-Infinity", "1e400",
               "-1e400", "1e300", "1e39", "0", "-1", "null", "true", "false", "\"\\ud800\"",
               "\"\\udfff\"", "\\u0000", "1" + "0" * 30, "9223372036854775808", "0.0",
               "\"rope_theta\": ", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": ",
               "\"num_hidden_layers\": ", "\"hidden_size\": ", "\"rms_norm_eps\": ",
               "\"head_dim\": ", "\"vocab_size\": ", "\"layer_types\": [",
               "\"text_config\": {", "\xff", "\ufeff"]


def _config_seeds():
    """config.json text of every synthetic family, compact and indented."""
    return [json.dumps(synthetic.model_config(family, synthetic.default_shape(family)),
                       indent=2 if index % 2 else None)
            for index, family in enumerate(synthetic.ALL_ARCHITECTURES)]


def _config_verdict(path, raw):
    """None when convert's config reader refuses `raw` cleanly, or accepts a
    config whose manifest the manifest reader takes back; else the defect."""
    try:
        config = cv.parse_config(path, raw)
    except cv.ConvertError:
        return None
    except Exception as error:  # noqa: BLE001 - any other exception is the defect
        return f"parse_config raised {type(error).__name__}: {error}"
    try:
        cv.check_spec_values(path, arch.model_spec(config))
    except (arch.ArchitectureError, cv.ConvertError):
        pass
    except (ValueError, TypeError, OverflowError, KeyError):
        pass  # convert.checked_model words these as a ConvertError
    except Exception as error:  # noqa: BLE001
        return f"model_spec raised {type(error).__name__}: {error}"
    directory = os.path.dirname(path)
    with open(os.path.join(directory, "manifest.json"), "w") as out:
        json.dump(bd.manifest(config, [], "digest"), out)
    try:
        bd.read_manifest(directory)
    except bd.BundleError as error:
        return f"accepted, but the manifest holding it is refused: {error}"
    return None


def test_config_json_fuzz_through_convert(tmp_path):
    seeds = _config_seeds()
    path = str(tmp_path / "config.json")
    for text in seeds:
        assert cv.parse_config(path, text.encode()) == json.loads(text)
    rng = random.Random(_fuzz_seed())
    deadline = time.monotonic() + SECONDS
    runs = refused = 0
    while time.monotonic() < deadline:
        mutated, _ = _mutate_text(rng, rng.choice(seeds), JSON_TOKENS)
        raw = mutated.encode("utf-8", errors="surrogatepass")
        runs += 1
        problem = _config_verdict(path, raw)
        if problem is not None:
            kept = tmp_path.parent / f"config-crash-{runs}.json"
            kept.write_bytes(raw)
            pytest.fail(f"{problem} ({kept})")
        try:
            cv.parse_config(path, raw)
        except cv.ConvertError:
            refused += 1
    print(f"config.json fuzz: {runs} runs in {SECONDS:.0f} s, {refused} refused")
    assert runs > 0 and refused > 0
