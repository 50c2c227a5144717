"""`cq4p chat MODEL_DIR` and `cq4p run MODEL_DIR --prompt TEXT`: one command
from a checkpoint (or a bundle) to streamed text.

The directory is prepared once through the cache (`cq4p.cache`: converted
and compiled for this machine, progress on stderr) and opened with
`cq4p.Model`; later runs find it there and start at once. `run` streams
the text after one prompt, like `cq4p-run --prompt`; `chat` reads one user
turn per line of stdin and streams each reply, like `cq4p-run --chat`. The
text goes to stdout as UTF-8 bytes, exactly as cq4p-run writes it; each
generation's rates go to stderr (not with --quiet). The flags are
cq4p-run's, by the same names.
"""

import os
import sys

from cq4p import api
from cq4p import cache as ch
from cq4p.native import runtime as native


class ChatError(ValueError):
    """A request that cannot run; the message is one line."""


def default_threads():
    """Every CPU this process may run on (at most the runtime's 1024)."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return max(1, min(count, native.MAX_THREADS))


def _check_tokenizer(path):
    """Text needs the model's tokenizer.json: refused before any
    preparation (which can take minutes) rather than after."""
    ch.kind_of(path)
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise ChatError(f"{path} has no tokenizer.json: text in and out needs the model's "
                        f"Hugging Face tokenizer files beside its config.json (the token-level "
                        f"API, cq4p.Model.prefill, runs without them)")


def _open(args):
    _check_tokenizer(args.model)
    return api.Model(args.model, threads=args.threads or default_threads(), context=args.context,
                     progress=None if args.quiet else sys.stderr)


def _options(args):
    return {"max_tokens": args.n, "temperature": args.temperature, "top_k": args.top_k,
            "top_p": args.top_p, "seed": args.seed, "stop": args.stop,
            "ignore_eos": args.ignore_eos}


def _write(out, pieces):
    for piece in pieces:
        out.write(piece.encode("utf-8"))
        out.flush()
    out.write(b"\n")
    out.flush()


def run(args):
    """`cq4p run`: the text after --prompt, streamed."""
    out = sys.stdout.buffer
    with _open(args) as model:
        _write(out, model.generate(args.prompt, **_options(args)))
        if not args.quiet:
            print(model.stats, file=sys.stderr, flush=True)
    return 0


def chat(args):
    """`cq4p chat`: one user turn per line of stdin, each reply streamed."""
    out = sys.stdout.buffer
    with _open(args) as model:
        conversation = model.conversation(system=args.system, think=args.think,
                                          show_thinking=args.show_thinking)
        interactive = sys.stdin.isatty()
        if not args.quiet:
            print(f"cq4p chat: {model.tokenizer.info()['chat_format']} format; one turn per "
                  f"line, end with end of input{' (Ctrl-D)' if interactive else ''}",
                  file=sys.stderr, flush=True)
        number = 0
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.buffer.readline()
            if not line:
                break
            number += 1
            text = line[:-1] if line.endswith(b"\n") else line
            if not text:
                continue
            try:
                message = text.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ChatError(f"stdin line {number}: not valid UTF-8 at byte "
                                f"{error.start}") from None
            _write(out, conversation.send(message, **_options(args)))
            if not args.quiet:
                print(model.stats, file=sys.stderr, flush=True)
    return 0
