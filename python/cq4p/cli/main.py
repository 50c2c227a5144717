"""cq4p (or python -m cq4p) {chat, run, convert, upgrade, inspect, synthetic,
margin, check, generate, tokenize, check-model}."""

import argparse
import os
import re
import sys

from cq4p.native import locate

# Every command needs numpy: a Python without it gets one line naming the fix
# (here, before the modules below import it).
locate.require_numpy()

from cq4p import __version__
from cq4p import api
from cq4p import cache as ch
from cq4p.cli import chat as ct
from cq4p.cli import check as ck
from cq4p.cli import convert as cv
from cq4p.cli import generate as gn
from cq4p.cli import inspection
from cq4p.cli import upgrade as up
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.model import reference as rf
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130

# Bounds of the numeric options, checked as argparse reads them: the C API's
# types (native.INT32_MAX...) and cq4p-run's own limits.
MAX_STEPS = native.MAX_NEW_TOKENS
MAX_SHAPE = 1 << 20  # synthetic checkpoints: any dimension
MAX_ROWS = 1 << 16


def number(low=None, high=None, low_open=False):
    """An argparse type: a finite number float32 holds, in [low, high]
    ((low, high] when low_open)."""
    def parse(text):
        try:
            return native.check_float32("value", text, low, high, low_open)
        except native.ArgumentError as error:
            raise argparse.ArgumentTypeError(str(error)[len("value: "):]) from None
    return parse


def _convert(args):
    cv.convert(args.model, args.out, force=args.force, seed=args.seed,
               calibration=args.calibration, legacy=args.legacy, quantizer=args.quantizer)
    return 0


def _upgrade(args):
    outcomes = up.upgrade(args.bundle)
    for outcome in outcomes:
        print(outcome)
    upgraded = sum(outcome.action == "upgraded" for outcome in outcomes)
    kept = sum(outcome.action == "kept" for outcome in outcomes)
    print(f"{upgraded} upgraded, {kept} kept as legacy files")
    return 0


def _inspect(args):
    return inspection.inspect(args.path, sys.stdout, deep=args.deep)


def _synthetic(args):
    try:
        shape = synthetic.default_shape(args.arch, hidden=args.hidden, ffn=args.ffn,
                                        vocab=args.vocab, layers=args.layers, heads=args.heads,
                                        kv_heads=args.kv_heads, head_dim=args.head_dim,
                                        window=args.window)
        shape = shape.resolved(k_multiple=args.arch in synthetic.ARCHITECTURES)
    except ValueError as error:
        raise gn.GenerateError(str(error)) from error
    if args.with_tokenizer and shape.vocab < synthetic.TOKENIZER_MIN_VOCAB:
        raise gn.GenerateError(f"--with-tokenizer needs a vocabulary of at least "
                               f"{synthetic.TOKENIZER_MIN_VOCAB}, found {shape.vocab} (--vocab)")
    synthetic.write_model(args.out, args.arch, shape, seed=args.seed)
    if args.with_tokenizer:
        synthetic.write_tokenizer(args.out, synthetic.text_config(
            synthetic.model_config(args.arch, shape))["vocab_size"])
    print(f"{args.out}: {args.arch} checkpoint, hidden {shape.hidden}, ffn {shape.ffn}, "
          f"vocab {shape.vocab}, {shape.layers} layers, {shape.heads} heads "
          f"({shape.kv_heads} kv) of {shape.head_dim}")
    return 0


def _margin(args):
    oracle = rf.Reference.from_bundle(args.bundle)
    prompt = synthetic.prompt(oracle_config(args.bundle), args.prompt_length, args.seed)
    tokens, margins = rf.greedy_margins(oracle, prompt, args.steps)
    print("greedy: " + " ".join(map(str, tokens)))
    print(f"top-1 minus top-2 logit / logit std over {args.steps} steps after "
          f"{args.prompt_length} tokens: min {margins.min():.3f}, mean {margins.mean():.3f}")
    return 0


def oracle_config(bundle):
    """The bundle's config as synthetic.prompt reads it (a wrapper's own:
    its text_config is found there)."""
    return bd.read_manifest(bundle)["config"]


def _prompt(args):
    if (args.prompt is None) == (args.prompt_ids is None):
        raise gn.GenerateError("give one of --prompt and --prompt-ids")
    return gn.prompt_ids(args.bundle, args.prompt, args.prompt_ids)


def _generate(args):
    if args.prompt is not None and args.prompt_ids is None and gn.has_tokenizer_json(args.bundle):
        gn.generate_text(args.bundle, args.library, args.prompt, args.n, threads=args.threads,
                         context=args.context, temperature=args.temperature, top_k=args.top_k,
                         top_p=args.top_p, seed=args.seed, stop_strings=args.stop,
                         ignore_eos=args.ignore_eos)
        return 0
    gn.generate(args.bundle, args.library, _prompt(args), args.n, threads=args.threads,
                context=args.context, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, seed=args.seed)
    return 0


def _open_tokenizer(args):
    if args.bundle is not None:
        return native.NativeTokenizer(directory=args.bundle)
    config = os.path.join(os.path.dirname(os.path.abspath(args.tokenizer)),
                          "tokenizer_config.json")
    return native.NativeTokenizer(tokenizer_json=args.tokenizer,
                                  tokenizer_config=config if os.path.isfile(config) else None)


def _tokenize(args):
    if (args.text is None) == (args.decode is None):
        raise gn.GenerateError("give a text to encode or --decode IDS")
    with _open_tokenizer(args) as tokenizer:
        if args.decode is not None:
            print(tokenizer.decode(gn.parse_ids(args.decode)))
        else:
            print(" ".join(map(str, tokenizer.encode(args.text, not args.no_special))))
    return 0


def _check_model(args):
    prompt = None
    if args.prompt is not None or args.prompt_ids is not None:
        prompt = _prompt(args)
    ok = gn.check_model(args.bundle, args.library, prompt, steps=args.steps,
                        threads=args.threads, context=args.context, tolerance=args.tolerance,
                        seed=args.seed)
    return 0 if ok else 1


def _check(args):
    results = ck.check_bundle(args.bundle, args.library, rows=args.rows)
    print(f"{'tensor':48} {'kind':10} {'rel. error':>10}")
    worst = 0.0
    for name, kind, error in results:
        print(f"{name:48} {kind:10} {error:10.2e}")
        worst = max(worst, error)
    verdict = "ok" if worst <= ck.TOLERANCE else "FAILED"
    print(f"{len(results)} tensors, worst relative error {worst:.2e} "
          f"(tolerance {ck.TOLERANCE}): {verdict}")
    return 0 if worst <= ck.TOLERANCE else 1


def _bound(value):
    """A bound as help text: the C types' limits by their power of two."""
    for bits in (64, 63, 31):
        if value == 2**bits - 1:
            return f"2^{bits} - 1"
    if value > 1 << 20 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def span(low, high):
    """The range of integer(low, high) as its options' help says it."""
    return f"{_bound(low)} to {_bound(high)}"


def integer(low, high):
    """An argparse type: an integer in [low, high] (its help says span(low,
    high), which python/tests/test_help.py checks)."""
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer, found {native.excerpt(repr(text))}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer in [{low}, {high}], found {native.excerpt(text)}")
        return value
    parse.bounds = (low, high)
    parse.__name__ = "integer"
    return parse


class Parser(argparse.ArgumentParser):
    """argparse's parser whose refusals echo at most locate.ECHO_CHARACTERS of
    any value the user gave (an unknown command or flag, a bad choice): the
    error stays one short line, as cq4p-run's do."""

    def error(self, message):
        limit = locate.ECHO_CHARACTERS
        shown = re.compile(r".{%d}\.\.\.(?: \(\d+ characters\))?" % limit, re.S)

        def shorten(text):
            # A value an argument type already cut (excerpt) stays as it is.
            return text if shown.fullmatch(text) else locate.excerpt(text)
        message = re.sub(r"'([^']{%d,})'" % (limit + 1),
                         lambda m: "'" + shorten(m.group(1)) + "'", message)
        message = re.sub(r"[^\s']{%d,}" % (limit + 4),
                         lambda m: shorten(m.group(0)), message)
        super().error(message)


def parser():
    # `cq4p` is the installed command; `python -m cq4p` runs this file.
    prog = "python -m cq4p" if os.path.basename(sys.argv[0]) == "__main__.py" else "cq4p"
    main_parser = Parser(
        prog=prog, description="CQ4 bundles and the models they hold: convert a Hugging Face "
        "checkpoint to a bundle, inspect and check it, run it. `chat` and `run` do it all in "
        "one command (converted and compiled once, kept in ~/.cache/cq4p/models).",
        epilog=f"`{prog} COMMAND --help` describes each command's options.")
    main_parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    seed_range = span(0, native.UINT64_MAX)

    def command(name, summary, description=None):
        return commands.add_parser(name, help=summary, description=description or summary)

    for name in ("chat", "run"):
        text_command(command, name)

    convert = command("convert", "a safetensors checkpoint -> a cq4p bundle",
                      "Quantizes a Hugging Face checkpoint to CQ4 panels and writes a bundle: "
                      "one file per tensor, manifest.json, model.mlir and the tokenizer files.")
    convert.add_argument("--model", required=True,
                         help="the checkpoint: a directory with config.json and *.safetensors "
                              "(required)")
    convert.add_argument("--out", required=True,
                         help="the bundle directory to create (required; it must not exist "
                              "unless --force)")
    convert.add_argument("--force", action="store_true",
                         help="replace an existing --out (only a bundle or an empty directory)")
    convert.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                         help=f"seed of the rotations, {seed_range} (default 0)")
    convert.add_argument("--calibration", metavar="NPZ",
                         help=".npz of per-input-channel mean |activation| by tensor name "
                              "(default: none, unit input scales)")
    convert.add_argument("--legacy", choices=cv.LEGACY_LAYOUTS,
                         help="write pre-panel CQ4 files in this layout where the shape allows "
                              "(default: panels)")
    convert.add_argument("--quantizer", choices=cv.QUANTIZERS, default="auto",
                         help="native: the runtime library's multi-threaded quantizer "
                              "(threads: $CQ4P_CONVERT_THREADS, 1 to 1024, default every "
                              "CPU); numpy: the Python one; auto (default): native when the "
                              "library is built. The bundles are the same bytes")
    convert.set_defaults(run=_convert)

    upgrade = command("upgrade", "rewrite a bundle's legacy CQ4 files as panels")
    upgrade.add_argument("bundle", help="the bundle directory, rewritten in place")
    upgrade.set_defaults(run=_upgrade)

    inspect = command("inspect", "describe a tensor file or a bundle")
    inspect.add_argument("path", help="a bundle directory or one tensor file")
    inspect.add_argument("--deep", action="store_true",
                         help="also check every content rule of FORMAT.md and every sha256 "
                              "(reads every byte)")
    inspect.set_defaults(run=_inspect)

    synth = command("synthetic", "write a small checkpoint of a supported architecture, with "
                    "wide greedy margins")
    synth.add_argument("--arch", choices=synthetic.ALL_ARCHITECTURES, default="llama",
                       help="llama (default), qwen3, gemma3, or a family shaped like a released "
                       "model: llama32 (Llama-3.2-1B), qwen25 (Qwen2.5-0.5B), smollm2 "
                       "(SmolLM2-360M), lfm2 (LFM2-350M), gemma4 (Gemma 4 E2B)")
    synth.add_argument("--out", required=True, help="the checkpoint directory to write "
                       "(required)")
    sizes = {"hidden": "hidden size", "ffn": "MLP width", "vocab": "vocabulary size",
             "layers": "decoder layers", "heads": "attention heads",
             "kv-heads": "key/value heads", "head-dim": "head dimension",
             "window": "sliding window of gemma3/gemma4"}
    for option, meaning in sizes.items():
        low = 0 if option == "window" else 1
        default = "the architecture's" + (": 8 for gemma3, 512 for gemma4"
                                          if option == "window" else "")
        synth.add_argument(f"--{option}", type=integer(low, MAX_SHAPE),
                           help=f"{meaning}, {span(low, MAX_SHAPE)} (default: {default})")
    synth.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                       help=f"seed of the weights, {seed_range} (default 0)")
    synth.add_argument("--with-tokenizer", action="store_true",
                       help="also write a byte-level BPE tokenizer of the model's vocabulary "
                            f"(at least {synthetic.TOKENIZER_MIN_VOCAB}) with a ChatML "
                            "template, so that text and chat run (the replies are noise)")
    synth.set_defaults(run=_synthetic)

    margin = command("margin", "greedy top-1 margins of a bundle's dequantized model on a prompt "
                     "of synthetic-table tokens")
    margin.add_argument("--bundle", required=True, help="the bundle directory (required)")
    margin.add_argument("--prompt-length", type=integer(1, MAX_STEPS),
                        default=gn.DEFAULT_PROMPT_TOKENS,
                        help=f"prompt tokens, {span(1, MAX_STEPS)} (default "
                             f"{gn.DEFAULT_PROMPT_TOKENS})")
    margin.add_argument("--steps", type=integer(0, MAX_STEPS), default=gn.DEFAULT_STEPS,
                        help=f"greedy steps, {span(0, MAX_STEPS)} (default {gn.DEFAULT_STEPS})")
    margin.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=1,
                        help=f"seed of the prompt, {seed_range} (default 1)")
    margin.set_defaults(run=_margin)

    check = command("check", "a bundle's tensors through a compiled kernel library vs an fp32 "
                    "numpy reference")
    check.add_argument("--bundle", required=True, help="the bundle directory (required)")
    check.add_argument("--library", required=True,
                       help="the kernel library cq4p-compile built (required)")
    check.add_argument("--rows", type=integer(1, MAX_ROWS), default=3,
                       help=f"activation rows per tensor, {span(1, MAX_ROWS)} (default 3)")
    check.set_defaults(run=_check)

    def model_command(name, help_text):
        command_parser = command(name, help_text)
        command_parser.add_argument("--bundle", required=True,
                                    help="the bundle directory (required)")
        command_parser.add_argument("--library", required=True,
                                    help="the model library cq4p-compile built from the "
                                         "bundle's model.mlir (required)")
        command_parser.add_argument("--prompt-ids", metavar="IDS",
                                    help='the prompt as token ids, e.g. "1 2 3"')
        command_parser.add_argument("--prompt", metavar="TEXT",
                                    help="the prompt as text (the runtime's tokenizer reads the "
                                         "bundle's tokenizer.json; a tokenizer.model alone "
                                         "needs python3-sentencepiece)")
        command_parser.add_argument("--threads", type=integer(1, native.MAX_THREADS), default=1,
                                    help=f"the runtime's threads, "
                                         f"{span(1, native.MAX_THREADS)} (default 1)")
        command_parser.add_argument("--context", type=integer(0, native.INT64_MAX), default=0,
                                    help=f"KV cache positions, {span(0, native.INT64_MAX)} "
                                         f"(default 0: the runtime's, 2048 or the model's "
                                         f"trained length when shorter)")
        return command_parser

    generate = model_command("generate", "generate tokens with a compiled model")
    generate.add_argument("-n", type=integer(0, native.MAX_NEW_TOKENS), default=gn.DEFAULT_STEPS,
                          help=f"tokens to generate, {span(0, native.MAX_NEW_TOKENS)} "
                               f"(default {gn.DEFAULT_STEPS})")
    add_sampling(generate)
    generate.add_argument("--stop", action="append", metavar="TEXT",
                          help="a stop string (text prompts; may be repeated; default none)")
    generate.add_argument("--ignore-eos", action="store_true",
                          help="do not stop at EOS / end of turn (text prompts)")
    generate.set_defaults(run=_generate)

    tokenize = command("tokenize", "the ids of a text (or the text of ids) through the "
                       "runtime's tokenizer")
    source = tokenize.add_mutually_exclusive_group(required=True)
    source.add_argument("--bundle", help="a bundle (or model directory) with tokenizer.json "
                        "(this or --tokenizer is required)")
    source.add_argument("--tokenizer", metavar="FILE",
                        help="a tokenizer.json (tokenizer_config.json beside it is read too)")
    tokenize.add_argument("text", nargs="?", help="the text to encode")
    tokenize.add_argument("--decode", metavar="IDS", help='ids to decode, e.g. "9707 11"')
    tokenize.add_argument("--no-special", action="store_true",
                          help="without the post-processor's ids (BOS)")
    tokenize.set_defaults(run=_tokenize)

    check_model = model_command("check-model", "a compiled model's logits vs the numpy oracle "
                                "of its dequantized weights, step by step")
    check_model.add_argument("--steps", type=integer(0, MAX_STEPS), default=gn.DEFAULT_STEPS,
                             help=f"greedy steps after the prompt, {span(0, MAX_STEPS)} "
                                  f"(default {gn.DEFAULT_STEPS})")
    check_model.add_argument("--tolerance", type=number(0.0), default=None,
                             help=f"max |logit diff| / logit std, a number >= 0 (default "
                                  f"{gn.LOGIT_TOLERANCE}, lfm2 "
                                  f"{gn.ARCHITECTURE_TOLERANCE['lfm2']})")
    check_model.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                             help=f"seed of the random prompt used without --prompt(-ids), "
                                  f"{seed_range} (default 0)")
    check_model.set_defaults(run=_check_model)
    return main_parser


def add_sampling(command_parser):
    """--temperature, --top-k, --top-p, --seed: cq4p-run's sampling flags."""
    command_parser.add_argument("--temperature", type=number(), default=0.0,
                                help="sampling temperature, a finite number (default 0: "
                                     "greedy, as is any value <= 0)")
    command_parser.add_argument("--top-k", type=integer(0, native.INT32_MAX), default=0,
                                help=f"sample among the k likeliest, "
                                     f"{span(0, native.INT32_MAX)} (default 0: off)")
    command_parser.add_argument("--top-p", type=number(0.0, 1.0, low_open=True), default=1.0,
                                help="nucleus sampling, a number in (0, 1] (default 1: off)")
    command_parser.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                                help=f"the sampler's seed, {span(0, native.UINT64_MAX)} "
                                     f"(default 0)")


def text_command(command, name):
    """`chat` and `run`: a model directory to streamed text, cq4p-run's
    flags by their names."""
    if name == "chat":
        summary = "chat with a model: one user turn per line of stdin, each reply streamed"
    else:
        summary = "the text a model writes after --prompt, streamed"
    parser_ = command(name, summary, summary + ". MODEL_DIR is a Hugging Face checkpoint "
                      "(config.json, *.safetensors, tokenizer.json) or a cq4p bundle; on first "
                      "use it is converted and compiled for this machine into the cache "
                      "($CQ4P_CACHE, default ~/.cache/cq4p/models), keyed by its content and "
                      "cq4p's, so later runs start at once.")
    parser_.add_argument("model", metavar="MODEL_DIR",
                         help="a checkpoint directory or a cq4p bundle")
    if name == "run":
        parser_.add_argument("--prompt", required=True, metavar="TEXT",
                             help="the prompt (required), tokenized with the model's BOS")
    parser_.add_argument("-n", type=integer(0, native.MAX_NEW_TOKENS),
                         default=api.DEFAULT_MAX_TOKENS,
                         help=f"most tokens per {'reply' if name == 'chat' else 'generation'}, "
                              f"{span(0, native.MAX_NEW_TOKENS)} (default "
                              f"{api.DEFAULT_MAX_TOKENS}); it also ends at an end of turn or "
                              f"a --stop string")
    add_sampling(parser_)
    parser_.add_argument("--stop", action="append", metavar="TEXT",
                         help="end the text at this string, left out (may be repeated; "
                              "default none)")
    parser_.add_argument("--ignore-eos", action="store_true",
                         help="do not stop at EOS / end of turn")
    parser_.add_argument("--threads", type=integer(1, native.MAX_THREADS), default=None,
                         help=f"the runtime's threads, {span(1, native.MAX_THREADS)} "
                              f"(default: every CPU this process may use, "
                              f"{ct.default_threads()} here)")
    parser_.add_argument("--context", type=integer(0, native.INT64_MAX), default=0,
                         help=f"KV cache positions, {span(0, native.INT64_MAX)} (default 0: "
                              f"the runtime's, 2048 or the model's trained length when "
                              f"shorter)")
    if name == "chat":
        parser_.add_argument("--system", metavar="TEXT",
                             help="a system prompt (default none)")
        parser_.add_argument("--think", action="store_true",
                             help="Gemma 4: turn its thinking on (other chat formats refuse it)")
        parser_.add_argument("--show-thinking", action="store_true",
                             help="Gemma 4: stream the model's thought channel too (held back "
                                  "by default)")
    parser_.add_argument("--quiet", "-q", action="store_true",
                         help="no progress while preparing, no rates after each text")
    parser_.set_defaults(run=getattr(ct, name))


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (cv.ConvertError, bd.BundleError, rd.FormatError, ck.CheckError,
            tools.ToolError, gn.GenerateError, native.NativeError, ch.PrepareError,
            ct.ChatError,
            native.LibraryNotFoundError, OSError) as error:
        print(f"cq4p {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"cq4p {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError,
            MemoryError, RecursionError) as error:
        # A defect of cq4p's own (every input is meant to be refused above
        # by name): still one line, never a traceback.
        print(f"cq4p {args.command}: internal error: {type(error).__name__}: {error}",
              file=sys.stderr)
        return EXIT_INTERNAL

