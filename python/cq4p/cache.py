"""The cache of prepared models: a checkpoint or a bundle made ready to run.

`prepare(path)` gives a bundle and the model library cq4p-compile built
from its model.mlir for this machine. A checkpoint directory (config.json
and *.safetensors) is converted (`cq4p.cli.convert.convert`) and compiled;
a bundle directory (manifest.json) is compiled only and used where it is.
The result is kept under the cache's root, `$CQ4P_CACHE`, else
`$XDG_CACHE_HOME/cq4p/models` (`~/.cache/cq4p/models`), so that the next
use of the same input starts at once:

    <root>/<key>/                  a prepared model: bundle/ (checkpoints),
                                   libmodel.so, prepared.json
    <root>/<key>.lock              held (fcntl.flock) while <key> is prepared
    <root>/.prepare-<key>-<pid>-*  a preparation under way
    <root>/hashes/<path digest>.json   a directory's content hashes and stamps

**The key** is a sha256 over everything the prepared files depend on: the
input's content (every file convert reads: config.json, the *.safetensors,
the tokenizer files; for a bundle, manifest.json, which records every
tensor file's sha256 and the model_digest, and model.mlir), cq4p's version
and the digest of this package's own sources (a changed converter is a new
cq4p), the sha256 of the cq4p-compile binary and of the runtime library,
the compile options, and this CPU's identity (the library is compiled for
the widest instruction set the CPU runs). Any change gives a new key, so a
changed checkpoint or a new cq4p prepares again; entries of old keys stay
until the cache is removed.

**Content, not dates.** A file's size and mtime say nothing of its bytes,
and hashing a multi-GB checkpoint on every start is too slow, so each
file's sha256 is stored with its stamp (device, inode, size, mtime_ns and
ctime_ns) in hashes/, and reused while the stamp is unchanged. The ctime is
in the stamp because a process cannot set it (a tool that restores an
mtime after writing still changes it), and a file whose mtime is within
`RACY_SECONDS` of the hash is not stamped at all (its next write could keep
the same mtime: git's "racy" rule), so it is hashed again next time.

**Safe to share.** Two processes preparing the same key take its lock in
turn; the second finds the first one's entry and uses it. A preparation is
written into a temporary directory in the root and renamed to <key> once
complete (prepared.json, which lists every file with its size, written
last); the next preparation under the lock removes temporaries left by an
interrupted one. An entry is used only when prepared.json reads and every
file it lists is there with its size; otherwise it is moved aside and
prepared again.
"""

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cq4p
from cq4p.io import bundle as bd
from cq4p.native import locate
from cq4p.native import tools

CACHE_VARIABLE = "CQ4P_CACHE"
ENTRY_FORMAT = 1  # the layout of an entry; part of every key
PREPARED = "prepared.json"
LIBRARY = "libmodel.so"
BUNDLE = "bundle"
HASHES = "hashes"
TEMPORARY_PREFIX = ".prepare-"
STALE_PREFIX = ".stale-"
RACY_SECONDS = 2.0
HASH_BLOCK = 1 << 20
SLOW_HASH_BYTES = 256 << 20  # hashing this much is said (about a second or more)
# What the compile step passes after --target=host: on x86-64 the widest
# instruction set level this CPU runs (one level's code generation instead
# of the default three, less than half the library), which the key's CPU
# identity makes safe when the cache is shared by machines. `widest`, not
# `native`: the level's own tuning, the code the default library runs here
# (native's tuning for the CPU measured slower on AMD EPYC, bench/model).
X86_COMPILE_OPTIONS = ("--host-cpu=widest",)


class PrepareError(RuntimeError):
    """An input that cannot be prepared, or a preparation that failed; the
    message is one line."""


@dataclass(frozen=True)
class Prepared:
    """A model ready to run: the bundle and its library."""

    bundle: str
    library: str
    entry: str  # the cache entry's directory
    key: str
    prepared_now: bool  # False: found in the cache


def cache_root():
    """$CQ4P_CACHE, else $XDG_CACHE_HOME/cq4p/models (~/.cache/cq4p/models)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "cq4p" / "models"


# --- what a directory is --------------------------------------------------------

CHECKPOINT, BUNDLE_KIND = "checkpoint", "bundle"


def kind_of(path):
    """"bundle" (has manifest.json) or "checkpoint" (config.json and a
    *.safetensors); a PrepareError naming what is missing otherwise."""
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise PrepareError(f"{path}: {what}; expected a checkpoint directory (config.json and "
                           f"*.safetensors) or a cq4p bundle (manifest.json)")
    if (path / bd.MANIFEST).is_file():
        return BUNDLE_KIND
    if (path / "config.json").is_file() and _safetensors(path):
        return CHECKPOINT
    raise PrepareError(f"{path}: neither a checkpoint (config.json and *.safetensors) nor a "
                       f"cq4p bundle (manifest.json)")


def _safetensors(directory):
    """The shards convert reads (its glob: hidden files left out)."""
    pattern = os.path.join(glob.escape(str(directory)), "*.safetensors")
    return sorted(os.path.basename(path) for path in glob.glob(pattern))


def input_files(path, kind):
    """The names of the files in `path` that preparing it reads."""
    if kind == BUNDLE_KIND:
        names = [bd.MANIFEST]
        if (Path(path) / bd.MODEL_GRAPH).is_file():
            names.append(bd.MODEL_GRAPH)
        return names
    names = ["config.json"] + _safetensors(path)
    return names + [name for name in bd.TOKENIZER_FILES if (Path(path) / name).is_file()]


# --- content hashes with stamps -------------------------------------------------

def _stamp(info):
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _write_json_atomically(path, value):
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                         dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(value, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        bd.share_as_umask_says(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


class ContentHashes:
    """sha256 of files, each kept with its stamp in the cache's hashes/ and
    recomputed only when the stamp changed."""

    def __init__(self, root, progress=None):
        self.directory = Path(root) / HASHES
        self.progress = progress

    def _record_path(self, directory):
        real = os.path.realpath(directory)
        return self.directory / (hashlib.sha256(os.fsencode(real)).hexdigest() + ".json")

    def of(self, directory, names):
        """{name: sha256} of the files `names` in `directory`."""
        directory = Path(directory)
        record_path = self._record_path(directory)
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            record = {}
        if not isinstance(record, dict):
            record = {}
        infos = {name: os.stat(directory / name) for name in names}
        hashes, stale = {}, []
        for name in names:
            known = record.get(name)
            if isinstance(known, dict) and known.get("stamp") == _stamp(infos[name]):
                hashes[name] = known["sha256"]
            else:
                stale.append(name)
        size = sum(infos[name].st_size for name in stale)
        if size >= SLOW_HASH_BYTES and self.progress is not None:
            print(f"cq4p: hashing {len(stale)} file(s) of {directory} ({_size(size)}); each "
                  f"hash is kept with the file's stamp, so an unchanged file is read once",
                  file=self.progress, flush=True)
        for name in stale:
            hashes[name] = _sha256_of(directory / name)
            after = os.stat(directory / name)
            if _stamp(after) != _stamp(infos[name]):
                raise PrepareError(f"{directory / name}: changed while it was read; try again "
                                   f"once it is written")
            if time.time() - after.st_mtime_ns / 1e9 > RACY_SECONDS:
                record[name] = {"stamp": _stamp(after), "sha256": hashes[name]}
            else:
                record.pop(name, None)  # racy: hashed again next time
        if stale:
            with contextlib.suppress(OSError):  # a read-only cache still works, slower
                self.directory.mkdir(parents=True, exist_ok=True)
                _write_json_atomically(record_path, record)
        return hashes


def _size(count):
    """Bytes in GB or MB, for messages."""
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:.1f} MB"


# --- what else the key holds ----------------------------------------------------

def package_digest():
    """sha256 over this package's Python sources (relative path and bytes):
    a converter edited in place, or another install, is another cq4p."""
    root = Path(cq4p.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(os.fsencode(str(path.relative_to(root))) + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def cpu_identity():
    """What the compiled code depends on of this CPU: its model and
    features (/proc/cpuinfo's first processor on Linux)."""
    fields = {}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("vendor_id", "model name", "flags", "CPU implementer", "CPU part",
                            "Features"):
                    fields[name] = value.strip()
    return {"machine": platform.machine(), "processor": platform.processor(), **fields}


def compile_options():
    if platform.machine().lower() in ("x86_64", "amd64"):
        return ["--target=host", *X86_COMPILE_OPTIONS]
    return ["--target=host"]


# --- entries --------------------------------------------------------------------

# The files of an entry whose content is checked at every use (each small):
# the library and what the runtime reads of the bundle before its tensors.
# The tensor files are checked by size here and by the runtime when it
# opens them (their headers and sizes against the manifest).
CHECKED_CONTENT = (LIBRARY, f"{BUNDLE}/{bd.MANIFEST}", f"{BUNDLE}/{bd.MODEL_GRAPH}")


def _entry_files(entry):
    """({relative path: size} of every file under `entry` but
    prepared.json, {relative path: sha256} of those of CHECKED_CONTENT)."""
    sizes = {}
    for path in sorted(Path(entry).rglob("*")):
        if path.is_file() and path.name != PREPARED:
            sizes[str(path.relative_to(entry))] = path.stat().st_size
    digests = {name: _sha256_of(Path(entry) / name) for name in CHECKED_CONTENT
               if name in sizes}
    return sizes, digests


def read_entry(entry):
    """The prepared.json of a complete entry, or None when the entry is
    missing, partial or damaged (a file missing, of another size, or of
    other content among CHECKED_CONTENT)."""
    entry = Path(entry)
    try:
        record = json.loads((entry / PREPARED).read_text())
        sizes, digests = record["files"], record["sha256"]
        if LIBRARY not in sizes or LIBRARY not in digests:
            return None
        for name, size in sizes.items():
            path = entry / name
            if path.is_symlink() or not path.is_file() or path.stat().st_size != size:
                return None
        for name, digest in digests.items():
            if _sha256_of(entry / name) != digest:
                return None
        if record["kind"] == BUNDLE_KIND and not (Path(record["bundle"]) / bd.MANIFEST).is_file():
            return None
        return record
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _remove_aside(root, path, prefix):
    """Renames `path` out of the way in `root`, then removes it."""
    aside = tempfile.mkdtemp(prefix=prefix, dir=root)
    os.rmdir(aside)
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _locked(root, key, progress):
    path = Path(root) / f"{key}.lock"
    handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is not None:
                print(f"cq4p: waiting for another process preparing the same model "
                      f"({path})", file=progress, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def _run_compiler(command, progress):
    """Runs cq4p-compile, showing the seconds spent on a terminal."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            while True:
                try:
                    process.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    if progress is not None and progress.isatty():
                        print(f"\rcq4p: compiling ... {time.monotonic() - started:.0f} s",
                              end="", file=progress, flush=True)
        except BaseException:
            process.kill()
            process.wait()
            raise
        if progress is not None and progress.isatty():
            print("\r", end="", file=progress)
        errors.seek(0)
        diagnostics = errors.read().decode("utf-8", "replace").strip()
    if process.returncode != 0:
        lines = diagnostics.splitlines()
        errors_said = [line for line in lines if "error" in line]
        said = (errors_said or lines or ["no message"])[0]
        raise PrepareError(f"cq4p-compile failed (exit status {process.returncode}): {said}")
    return time.monotonic() - started


class Cache:
    """The prepared models under one root (cache_root() by default)."""

    def __init__(self, root=None, progress=None):
        self.root = Path(root) if root is not None else cache_root()
        self.progress = progress
        self.hashes = ContentHashes(self.root, progress)

    def _say(self, text):
        if self.progress is not None:
            print(f"cq4p: {text}", file=self.progress, flush=True)

    def key(self, path, kind, compiler, runtime):
        """(key, {input name: sha256}) of preparing `path`."""
        inputs = self.hashes.of(path, input_files(path, kind))
        tool_hashes = {}
        for name, tool in (("cq4p-compile", compiler), ("runtime", runtime)):
            real = os.path.realpath(tool)
            tool_hashes[name] = self.hashes.of(os.path.dirname(real),
                                               [os.path.basename(real)])
        description = {"format": ENTRY_FORMAT, "kind": kind, "inputs": inputs,
                       "version": cq4p.__version__, "package": package_digest(),
                       "tools": tool_hashes, "compile": compile_options(),
                       "cpu": cpu_identity()}
        text = json.dumps(description, sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()[:32], inputs

    def prepare(self, path):
        """The Prepared model of a checkpoint or bundle directory: from the
        cache, or converted and compiled into it (under its key's lock)."""
        path = os.path.abspath(path)
        kind = kind_of(path)
        compiler = tools.find_tool("cq4p-compile")
        try:
            runtime = locate.runtime_library()
        except locate.NotFoundError as error:
            raise PrepareError(str(error)) from None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            # mkdir's own words for a file in the way ("File exists") would
            # send the reader looking for a directory that is not there.
            why = error.strerror
            if isinstance(error, FileExistsError) or os.path.exists(self.root):
                why = "it exists and is not a directory"
            raise PrepareError(f"cannot create the cache {self.root}: {why} (set "
                               f"{CACHE_VARIABLE} to a writable directory)") from None
        if kind == BUNDLE_KIND and not os.path.isfile(os.path.join(path, bd.MODEL_GRAPH)):
            raise PrepareError(f"{path} has no {bd.MODEL_GRAPH}: convert its checkpoint again "
                               f"with this cq4p (the converter writes the graph cq4p-compile "
                               f"reads)")
        key, inputs = self.key(path, kind, compiler, runtime)
        entry = self.root / key
        record = read_entry(entry)
        if record is None:
            with _locked(self.root, key, self.progress):
                record = read_entry(entry)
                if record is None:
                    self._prepare(path, kind, key, inputs, compiler)
                    record = read_entry(entry)
                    if record is None:
                        raise PrepareError(f"{entry}: incomplete right after it was prepared "
                                           f"(is something else writing the cache?)")
                    return self._prepared(entry, key, record, True)
        return self._prepared(entry, key, record, False)

    @staticmethod
    def _prepared(entry, key, record, now):
        bundle = record["bundle"] if record["kind"] == BUNDLE_KIND else str(entry / BUNDLE)
        return Prepared(bundle, str(entry / LIBRARY), str(entry), key, now)

    def _prepare(self, path, kind, key, inputs, compiler):
        """Converts (a checkpoint) and compiles into a temporary directory,
        then renames it to the entry. Called under the key's lock."""
        from cq4p.cli import convert as cv  # numpy and the converter: only when needed

        started = time.monotonic()
        entry = self.root / key
        for name in os.listdir(self.root):
            if name.startswith(f"{TEMPORARY_PREFIX}{key}-"):
                self._say(f"removing {self.root / name} (an interrupted preparation)")
                shutil.rmtree(self.root / name, ignore_errors=True)
        if os.path.lexists(entry):
            self._say(f"{entry} is incomplete or damaged: preparing it again")
            _remove_aside(self.root, entry, f"{STALE_PREFIX}{key}-")
        self._say(f"preparing the {kind} {path} for this machine (first use, or it "
                  f"or cq4p changed) into {entry}")
        temporary = Path(tempfile.mkdtemp(prefix=f"{TEMPORARY_PREFIX}{key}-{os.getpid()}-",
                                          dir=self.root))
        try:
            bd.share_as_umask_says(temporary, directory=True)
            if kind == CHECKPOINT:
                bundle = temporary / BUNDLE
                self._say("converting the checkpoint (python -m cq4p convert)")
                with open(os.devnull, "w") as quiet:
                    cv.convert(path, str(bundle), progress=self.progress or quiet)
            else:
                bundle = Path(path)
            graph = bundle / bd.MODEL_GRAPH
            if not graph.is_file():
                raise PrepareError(f"convert wrote no {bd.MODEL_GRAPH} for {path} (the reason "
                                   f"is above), so there is nothing to compile")
            command = [compiler, str(graph), *compile_options(), "-o", str(temporary / LIBRARY)]
            self._say(f"compiling {graph.name} ({' '.join(compile_options())})")
            seconds = _run_compiler(command, self.progress)
            self._say(f"compiled in {seconds:.1f} s")
            sizes, digests = _entry_files(temporary)
            record = {"kind": kind, "source": path, "inputs": inputs,
                      "bundle": str(path) if kind == BUNDLE_KIND else None,
                      "compiler": compiler, "compile": compile_options(),
                      "files": sizes, "sha256": digests, "version": cq4p.__version__,
                      "prepared": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            _write_json_atomically(temporary / PREPARED, record)
            os.rename(temporary, entry)
            bd.sync_directory(self.root)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        self._say(f"ready in {time.monotonic() - started:.1f} s")


def prepare(path, progress=None, root=None):
    """Cache(root, progress).prepare(path)."""
    return Cache(root, progress).prepare(path)
