"""`cq4p.Model`: a model from Python, text in and text out.

    from cq4p import Model

    with Model("path/to/checkpoint-or-bundle") as model:
        for piece in model.generate("Once upon a time", max_tokens=32):
            print(piece, end="", flush=True)
        print(model.stats)
        for piece in model.chat("Hello!"):
            ...

A checkpoint directory is converted and compiled once, into the cache of
`cq4p.cache` (what `cq4p chat` uses too); a bundle is compiled once. The
model is the runtime's (`cq4p.native.runtime.NativeModel`, the C API), and
text goes through the bundle's tokenizer in the runtime.

`generate` and `chat` return iterators of text pieces, each delivered as the
runtime produces it (never part of a character). The runtime's generation
calls back into Python for each piece, so the call runs on a thread of its
own and hands the pieces over a queue; leaving the loop early (break, an
exception) stops the generation at its next piece. One generation runs at
a time per model (the runtime refuses a second while one runs).
"""

import queue
import sys
import threading
from dataclasses import dataclass

from cq4p import cache as ch
from cq4p.native import runtime as native

# The generating thread's stack: the runtime refuses a caller with less
# than a step needs (docs/MODEL.md, "Stack": up to 2 MiB measured).
GENERATION_STACK_BYTES = 16 << 20
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class Stats:
    """The runtime's GenerateStats of one generation or chat turn."""

    prompt_tokens: int
    generated_tokens: int
    prefill_seconds: float
    decode_seconds: float
    time_to_first_token: float  # seconds, from the call to the first sampled token

    @classmethod
    def from_runtime(cls, stats):
        return cls(int(stats["prompt_tokens"]), int(stats["generated_tokens"]),
                   float(stats["prefill_seconds"]), float(stats["decode_seconds"]),
                   float(stats["time_to_first_token_seconds"]))

    @property
    def decoded_tokens(self):
        """Tokens that ran a decode step (the last one sampled is not run)."""
        return max(self.generated_tokens - 1, 0)

    @property
    def prefill_tokens_per_second(self):
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self):
        return self.decoded_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def __str__(self):
        return (f"prefill: {self.prefill_tokens_per_second:.1f} tok/s ({self.prompt_tokens} "
                f"tokens in {self.prefill_seconds * 1e3:.3f} ms), decode: "
                f"{self.decode_tokens_per_second:.1f} tok/s ({self.decoded_tokens} tokens in "
                f"{self.decode_seconds * 1e3:.3f} ms), time to first token: "
                f"{self.time_to_first_token * 1e3:.3f} ms")


class _Stop(Exception):
    """Raised in the text callback to stop a generation nobody reads."""


_STACK_SIZE_LOCK = threading.Lock()


def _stream(call):
    """Runs call(on_text) on a thread; yields each text piece it streams,
    then raises what the call raised. Closing the iterator stops the call
    at its next piece and waits for it."""
    pieces = queue.Queue()
    stop = threading.Event()
    done = object()

    def on_text(piece):
        if stop.is_set():
            raise _Stop()
        pieces.put(piece)

    def work():
        try:
            call(on_text)
            pieces.put(done)
        except _Stop:
            pieces.put(done)
        except BaseException as error:  # noqa: B902 - handed to the reader
            pieces.put(error)

    with _STACK_SIZE_LOCK:
        previous = threading.stack_size(GENERATION_STACK_BYTES)
        try:
            worker = threading.Thread(target=work, name="cq4p-generate", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    try:
        while True:
            item = pieces.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _sampling(temperature, top_k, top_p, seed, stop, ignore_eos):
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
            "stop_strings": stop, "ignore_stop_ids": ignore_eos}


class Conversation:
    """A chat with a model (the runtime's cq4p_chat_*): each send() adds a
    user turn and streams the reply; the KV cache keeps the conversation,
    so a turn prefills only its new tokens."""

    def __init__(self, model, system=None, think=False, show_thinking=False):
        self._model = model
        self._chat = native.NativeChat(model.native, system_prompt=system,
                                       enable_thinking=think, show_thinking=show_thinking)

    def send(self, message, max_tokens=DEFAULT_MAX_TOKENS, temperature=0.0, top_k=0,
             top_p=1.0, seed=0, stop=None, ignore_eos=False):
        """The reply to `message`, as an iterator of text pieces; the
        model's stats are the turn's once it is read to the end."""
        options = _sampling(temperature, top_k, top_p, seed, stop, ignore_eos)

        def call(on_text):
            _, _, stats = self._chat.send(message, max_tokens, on_text=on_text, **options)
            self._model.stats = Stats.from_runtime(stats)

        return _stream(call)

    def history(self):
        """The token ids of the whole conversation so far."""
        return self._chat.history()

    def close(self):
        self._chat.close()


class Model:
    """A model ready to run: a bundle (or a checkpoint, prepared once
    through the cache) and its compiled library, opened by the runtime.

    threads: the runtime's threads (1 to 1024); context: KV cache positions
    (0: the runtime's default, 2048 or the model's trained length when
    shorter); progress: where the preparation's progress goes (None:
    nowhere; default: stderr); cache: the cache's root (default
    $CQ4P_CACHE or ~/.cache/cq4p/models).
    """

    def __init__(self, path, threads=1, context=0, progress=True, cache=None):
        self.native = None
        self._conversation = None
        if progress is True:
            progress = sys.stderr
        self.prepared = ch.Cache(cache, progress or None).prepare(path)
        self.bundle, self.library = self.prepared.bundle, self.prepared.library
        self.native = native.NativeModel(self.bundle, self.library, threads=threads,
                                         context=context)
        self.stats = None  # Stats of the last generation or chat turn
        self._tokenizer = None

    # --- tokens ---------------------------------------------------------------

    @property
    def tokenizer(self):
        """The bundle's tokenizer (cq4p.native.runtime.NativeTokenizer)."""
        if self._tokenizer is None:
            self._tokenizer = native.model_tokenizer(self.native)
        return self._tokenizer

    def encode(self, text, add_special=True):
        """The token ids of `text` (with the tokenizer's BOS when add_special)."""
        return self.tokenizer.encode(text, add_special)

    def decode(self, ids):
        """The text of token ids."""
        return self.tokenizer.decode(ids)

    def prefill(self, ids):
        """Appends `ids` at the model's position; the logits (numpy
        float32 [vocab]) after the last."""
        return self.native.prefill(ids)

    def decode_step(self, token):
        """Appends one token; the logits of the next position."""
        return self.native.decode(token)

    def reset(self):
        """Back to position 0 (an empty KV cache)."""
        self.native.reset()

    @property
    def position(self):
        return self.native.position

    def info(self):
        """The runtime's model info: vocab, hidden, layers, context, ..."""
        return self.native.info()

    # --- text -----------------------------------------------------------------

    def generate(self, prompt, max_tokens=DEFAULT_MAX_TOKENS, temperature=0.0, top_k=0,
                 top_p=1.0, seed=0, stop=None, ignore_eos=False):
        """Text after the text `prompt` (from position 0), as an iterator
        of pieces. temperature <= 0 is greedy; top_k 0 and top_p 1 are off;
        generation ends after max_tokens, at an end-of-sequence or end-of-
        turn id (unless ignore_eos) or at a `stop` string (one or a list)."""
        options = _sampling(temperature, top_k, top_p, seed, stop, ignore_eos)

        def call(on_text):
            self.native.reset()
            _, _, stats = native.generate_text(self.native, prompt, max_tokens,
                                               on_text=on_text, **options)
            self.stats = Stats.from_runtime(stats)

        return _stream(call)

    def conversation(self, system=None, think=False, show_thinking=False):
        """A new Conversation (system prompt; Gemma 4's thinking), which
        chat() then continues."""
        if self._conversation is not None:
            self._conversation.close()
        self._conversation = Conversation(self, system, think, show_thinking)
        return self._conversation

    def chat(self, message, **options):
        """The reply to `message` in the model's conversation (started by
        the first call, or by conversation()), as an iterator of pieces;
        options as generate's."""
        if self._conversation is None:
            self.conversation()
        return self._conversation.send(message, **options)

    # --- lifetime -------------------------------------------------------------

    def close(self):
        """Frees the model; its tokenizer and conversations go with it."""
        if self._conversation is not None:
            self._conversation.close()
        if self.native is not None:
            self.native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Model({self.prepared.bundle!r}, library={self.prepared.library!r})"
