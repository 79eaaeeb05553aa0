"""Reading files bounded: regular files only, never more bytes than what a real file of their kind holds.

A path a user names, or one found in a folder, may be a FIFO (opening it for reading waits for a writer,
forever), a device, a directory, or a symbolic link out of the folder; and a zip may declare entries far
larger than its own bytes (a few hundred KiB that inflate to gigabytes). So every file ppo_dict reads is
opened here: without blocking, checked to be a regular file (:func:`open_regular`), and read with a cap
(:func:`read_capped`, :func:`zip_entry`); each refusal is an :class:`UnreadableFile` (an ``OSError``, so
readers that already report an ``OSError`` report it the same way) naming the file and why. A YAML document
(a hyperparameter file, a sweep file) is read with its aliases bounded (:func:`read_yaml`).
"""

from __future__ import annotations

import fcntl
import io
import math
import os
import stat
import zipfile
from typing import Any, BinaryIO, Optional

import numpy as np

#: what a refused file is, by ``stat`` type
KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)
MiB = 2**20


class UnreadableFile(OSError):
    """A file that is not read: not a regular file, or larger than its kind allows (the message says which)."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``"Type: message"`` of an exception a reader raised, on one line and at most ``limit`` characters (torch's
    and numpy's messages run over several lines: a refusal is one)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kind_of(mode: int) -> str:
    """``"a FIFO (named pipe)"``, ``"a directory"``... for a ``st_mode``; ``"a regular file"`` for one."""
    return next((name for test, name in KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "not a file")


def entry_kind(path: str) -> str:
    """What ``path`` itself is (a symbolic link is not followed); ``""`` when nothing is there."""
    try:
        return kind_of(os.lstat(path).st_mode)
    except FileNotFoundError:
        return ""


def open_regular(path: str, follow: bool = True) -> BinaryIO:
    """``path`` opened for reading in binary, once it is known to be a regular file: opened without blocking
    (a FIFO would wait for a writer), then checked with ``fstat``. ``follow=False``: a symbolic link is
    refused too (a run directory's own files: one must not lead out of it)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        if not follow and entry_kind(path) == "a symbolic link":
            raise UnreadableFile(f"{path}: is a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path}: is {kind_of(mode)}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str, cap: int, what: str, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, refused when it holds more than ``cap`` (``what``: the kind of
    file, said with both sizes)."""
    with open_regular(path, follow) as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            raise UnreadableFile(f"{path}: {size:,} bytes; {what} holds at most {cap:,}")
        chunks = [f.read(size)]  # what fstat says it holds: read(cap + 1) would allocate the whole cap first
        total = len(chunks[0])
        while total <= cap:  # grew since fstat: read on in bounded chunks, up to past the cap
            chunk = f.read(min(cap + 1 - total, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    if len(data) > cap:  # grew while read
        raise UnreadableFile(f"{path}: over {cap:,} bytes; {what} holds at most {cap:,}")
    return data


def zip_entry(archive: zipfile.ZipFile, name: str, cap: int, where: Any) -> bytes:
    """The entry ``name`` of ``archive``, refused (naming it and both sizes) when it declares more than ``cap``
    bytes; zipfile stops at the declared size and checks the CRC, so no more is ever inflated."""
    info = archive.getinfo(name)
    if info.file_size > cap:
        raise UnreadableFile(
            f"{where}: its entry {name!r} holds {info.file_size:,} bytes; ppo_dict reads at most {cap:,} for it"
        )
    with archive.open(info) as f:
        return f.read(cap + 1)


def npz_arrays(path: str, cap: int, what: str, follow: bool = True) -> dict[str, np.ndarray]:
    """The arrays of a numpy ``.npz`` file (no pickles: ``allow_pickle=False``), each entry capped at ``cap``
    bytes and its header's shape checked against the bytes the entry holds before numpy allocates it."""
    data = read_capped(path, cap, what, follow)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                raw = zip_entry(archive, info.filename, cap, path)
                declared = npy_bytes(raw)
                if declared is not None and declared > len(raw):
                    raise UnreadableFile(
                        f"{path}: its array {info.filename!r} declares {declared:,} bytes and holds {len(raw):,}"
                    )
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except UnreadableFile:
        raise
    except Exception as exc:  # noqa: BLE001 (a truncated or foreign file: whatever zipfile or numpy raises)
        raise UnreadableFile(f"{path}: not {what} numpy reads: {one_line(exc)}") from None


def npy_bytes(raw: bytes) -> Optional[int]:
    """The bytes an ``.npy`` entry's header says its array has (None: not an .npy header numpy reads)."""
    try:
        stream = io.BytesIO(raw)
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    except Exception:  # noqa: BLE001 (numpy's load then says what is wrong with it)
        return None
    return math.prod(shape) * dtype.itemsize


#: The most nodes a hyperparameter file may hold once its aliases are expanded. rl-zoo's files use
#: aliases (``<<: *pybullet-defaults``; its ppo.yml expands to about 2,000 nodes); a file whose aliases
#: nest (a "billion laughs" document: a few lines that expand to 10**9 values) is refused before
#: anything reads its values.
MAX_YAML_NODES = 100_000


def expanded_nodes(node: Any, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many nodes ``node`` (a composed YAML node) holds with every alias expanded; each shared node is
    counted once per use but measured once (``sizes``), so a bomb is measured without being expanded.
    Raises ``ValueError`` for an alias inside its own anchor (a document that never ends)."""
    import yaml

    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise ValueError("an alias refers to a node that contains it (a recursive document)")
    open_nodes.add(key)
    children = (
        [n for pair in node.value for n in pair]
        if isinstance(node, yaml.MappingNode)
        else node.value
        if isinstance(node, yaml.SequenceNode)
        else []
    )
    sizes[key] = 1 + sum(expanded_nodes(child, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    return sizes[key]


def read_yaml(file: Any) -> Any:
    """The YAML document in ``file`` (plain values: yaml's safe loader), refused with ``ValueError`` when it
    expands to more than :data:`MAX_YAML_NODES` nodes or refers to itself."""
    import yaml

    loader = yaml.SafeLoader(file)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_nodes(node, {}, set())
        if size > MAX_YAML_NODES:
            raise ValueError(
                f"its aliases expand it to {size:,} values; a hyperparameter file holds at most {MAX_YAML_NODES:,}"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
