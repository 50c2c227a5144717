"""Shared fixtures, and a summary of the measured quantization errors that
is printed whether or not pytest captures output."""

import numpy as np
import pytest

from cq4p.quant import quantize as qz

# name -> relative Frobenius error of a dequantized weight, filled by tests.
RELATIVE_ERRORS = {}


# The full tier's cases: those that take more than about 8 s on a 2-core
# machine (whole models under QEMU, every family end to end, the fuzzers, the
# model-width rotations), by file and test id. `scripts/test` leaves them out,
# `scripts/test --all` (CI) runs them; the fast tier keeps one case of each
# kind (a model on NEON and SME2 under QEMU, a hybrid family end to end, the
# oracle's logits, the x86-64 levels, every tensor against numpy), so every
# component still runs. An entry without "::" is a whole file (one whose
# fixture is the slow part: marking its cases one by one would only move the
# fixture's time to the next case). test_tiers.py checks that each entry names
# a test.
SLOW = frozenset([
    "test_families_e2e.py::test_chunks_of_any_size_leave_the_same_state[gemma4]",
    "test_families_e2e.py::test_chunks_of_any_size_leave_the_same_state[lfm2]",
    "test_families_e2e.py::test_the_family_generates_the_oracles_tokens[gemma4]",
    "test_families_e2e.py::test_the_family_generates_the_oracles_tokens[llama32]",
    "test_families_e2e.py::test_the_family_generates_the_oracles_tokens[qwen25]",
    "test_families_e2e.py::test_the_family_generates_the_oracles_tokens[smollm2]",
    "test_files.py::test_layouts_dequantize_identically_orthogonal",
    "test_fuzz_model.py::test_config_json_fuzz_through_convert",
    "test_fuzz_model.py::test_model_mlir_fuzz_through_cq4p_opt",
    "test_gemma4_chat.py",
    "test_hostile_model.py::test_compile_reports_a_write_failure[obj]",
    "test_hostile_model.py::test_convert_cleans_its_temporary_on_sigterm_and_sigint",
    "test_integrity.py::test_the_librarys_digest_is_compared_with_the_recomputed_one",
    "test_integrity.py::test_the_runtime_recomputes_pythons_digest_for_every_family[gemma4]",
    "test_model_aarch64.py::test_neon_and_sme2_families_match_the_oracle_and_each_other[gemma4]",
    "test_model_aarch64.py::test_neon_and_sme2_families_match_the_oracle_and_each_other[lfm2]",
    "test_model_aarch64.py::test_neon_and_sme2_families_match_the_oracle_and_each_other[llama32]",
    "test_model_aarch64.py::test_neon_and_sme2_families_match_the_oracle_and_each_other[qwen25]",
    "test_model_aarch64.py::test_neon_and_sme2_families_match_the_oracle_and_each_other[smollm2]",
    "test_model_aarch64.py::test_neon_and_sme2_logits_are_equal_bit_for_bit_with_an_fp16_cache[128-160-2]",
    "test_model_aarch64.py::test_neon_and_sme2_logits_are_equal_bit_for_bit_with_an_fp16_cache[16-40-2]",
    "test_model_aarch64.py::test_neon_and_sme2_models_match_the_oracle_and_each_other[gemma3]",
    "test_model_aarch64.py::test_the_gating_in_the_down_projections_transform_keeps_the_logits[aarch64-neon-gemma3]",
    "test_model_aarch64.py::test_the_gating_in_the_down_projections_transform_keeps_the_logits[aarch64-neon-llama]",
    "test_model_aarch64.py::test_the_gating_in_the_down_projections_transform_keeps_the_logits[aarch64-sme2-llama]",
    "test_model_e2e.py::test_an_fp16_kv_cache_keeps_the_oracles_tokens[gemma3]",
    "test_model_e2e.py::test_an_fp16_kv_cache_keeps_the_oracles_tokens[qwen3]",
    "test_model_e2e.py::test_attention_splits_whole_kv_groups_at_any_thread_count",
    "test_model_e2e.py::test_check_runs_every_tensor_through_a_model_library",
    "test_model_e2e.py::test_logits_match_the_oracle[gemma3]",
    "test_model_e2e.py::test_the_fused_dense_mlp_computes_the_same_logits[gemma3]",
    "test_model_e2e.py::test_the_fused_dense_mlp_computes_the_same_logits[llama]",
    "test_model_e2e.py::test_the_gating_in_the_down_projections_transform_computes_the_same_logits[gemma3]",
    "test_model_e2e.py::test_the_gating_in_the_down_projections_transform_computes_the_same_logits[llama]",
    "test_native_convert.py::test_every_family_converts_to_the_same_bytes[gemma4]",
    "test_native_convert.py::test_the_rotation_is_numpys_bit_for_bit_at_model_widths[1536]",
    "test_native_convert.py::test_the_rotation_is_numpys_bit_for_bit_at_model_widths[2048]",
    "test_per_layer_table.py::test_a_one_layer_model_converts_reads_and_compiles[runtime]",
    "test_text_e2e.py::test_convert_copies_and_lists_the_tokenizer",
    "test_text_e2e.py::test_text_prompt_on_aarch64",
])


def pytest_configure(config):
    # test/run_suites.py: the fast tier runs -m "not slow".
    config.addinivalue_line(
        "markers", "slow: a case of the full tier only (scripts/test --all), e.g. whole "
        "models under QEMU, every family end to end, the fuzzers")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW or f"{item.path.name}::{item.name}" in SLOW:
            item.add_marker(pytest.mark.slow)



def relative_error(approximation, original):
    original = np.asarray(original, dtype=np.float64)
    difference = np.asarray(approximation, dtype=np.float64) - original
    return float(np.linalg.norm(difference) / np.linalg.norm(original))


def pytest_terminal_summary(terminalreporter):
    if RELATIVE_ERRORS:
        terminalreporter.section("CQ4 relative Frobenius errors (dequantized vs original)")
        for name, error in sorted(RELATIVE_ERRORS.items()):
            terminalreporter.write_line(f"{name:<56} {error:.4f}")


def gaussian_weight(n, k, seed):
    return np.random.default_rng(seed).standard_normal((n, k))


@pytest.fixture(scope="session")
def orthogonal_weight():
    """A 68 x 1536 weight and its orthogonal quantization (the K x K
    rotation is the slow part, so it is made once)."""
    w = gaussian_weight(68, 1536, 11)
    return w, qz.quantize_orthogonal(w, seed=5)


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory):
    """make(arch, seed=0) -> (checkpoint dir, bundle dir, config) of a
    synthetic model at its default sizes, converted once per session."""
    import os

    from cq4p.cli import convert as cv
    from cq4p.model import synthetic

    made = {}

    def make(arch, seed=0):
        if (arch, seed) not in made:
            root = tmp_path_factory.mktemp(f"{arch}-seed{seed}")
            config = synthetic.write_model(str(root / "checkpoint"), arch, seed=seed)
            with open(os.devnull, "w") as quiet:
                cv.convert(str(root / "checkpoint"), str(root / "bundle"), progress=quiet)
            made[arch, seed] = (root / "checkpoint", root / "bundle", config)
        return made[arch, seed]

    return make


@pytest.fixture(scope="session")
def synthetic_family(tmp_path_factory):
    """make(arch, seed=0) -> (config, {name: fp64 array}) of a synthetic
    model at its default sizes, in memory (no checkpoint, no bundle), made
    once per session."""
    from cq4p.model import synthetic

    made = {}

    def make(arch, seed=0):
        if (arch, seed) not in made:
            shape = synthetic.default_shape(arch)
            made[arch, seed] = (synthetic.model_config(arch, shape),
                                synthetic.model_tensors(arch, shape, seed))
        return made[arch, seed]

    return make
