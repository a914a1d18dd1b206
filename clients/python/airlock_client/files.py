"""Local tar streams for uploads and downloads: write_tar packs a file or a
directory (symlinks as links, special files refused), extract_tar unpacks a
stream from the daemon without ever writing outside its directory."""

import os
import stat
import tarfile
import tempfile
from typing import IO

from .errors import AirlockError
from .types import FilesResult

_SPOOL = 8 << 20  # tar streams larger than this are spooled to disk


class UnsafeTarError(AirlockError):
    """A tar entry that would land outside the target directory, or a kind
    of file that is not copied."""


def write_tar(src: str) -> IO[bytes]:
    """A tar stream (a file object at its start) of src, its entries named
    from src's last component ("." is the current directory's name)."""
    src = os.path.abspath(src)
    base = os.path.basename(src)
    if not base:
        raise UnsafeTarError("cannot copy / (name a directory below it)")
    os.lstat(src)  # a missing source is FileNotFoundError, naming it
    for p in _walk(src):
        mode = os.lstat(p).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            raise UnsafeTarError(f"{p}: a {_kind(mode)} cannot be copied (only files, directories and symlinks)")
    f = tempfile.SpooledTemporaryFile(max_size=_SPOOL)
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT, dereference=False) as tf:
        for p in _walk(src):
            name = os.path.join(base, os.path.relpath(p, src)) if p != src else base
            ti = tf.gettarinfo(p, arcname=os.path.normpath(name))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            if ti.isreg():
                with open(p, "rb") as r:
                    tf.addfile(ti, r)
            else:
                tf.addfile(ti)
    f.seek(0)
    return f  # type: ignore[return-value]


def _walk(src: str):
    yield src
    if os.path.isdir(src) and not os.path.islink(src):
        for root, dirs, files in os.walk(src):
            dirs.sort()
            for n in sorted(dirs + files):
                yield os.path.join(root, n)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def extract_tar(stream: IO[bytes], directory: str) -> FilesResult:
    """Unpacks the tar stream into directory (created if missing). Entries
    with absolute names or '..' are refused, as is any entry whose path
    passes through a symlink (a link in the stream or already there);
    symlinks are made as links with their targets unchanged; setuid, setgid
    and sticky bits are dropped; other kinds of entries are refused."""
    os.makedirs(directory, exist_ok=True)
    root = os.path.realpath(directory)
    res = FilesResult()
    dirs = []
    with tarfile.open(fileobj=stream, mode="r|") as tf:
        for ti in tf:
            target = _target(root, ti.name)
            if target == root:
                continue
            _check_parents(root, target)
            if ti.isdir():
                _replace_non_dir(target)
                if not os.path.isdir(target):
                    os.mkdir(target, 0o700)
                dirs.append((target, ti.mode & 0o777))
            elif ti.isreg():
                _remove_existing(target)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as w:
                    src = tf.extractfile(ti)
                    while src is not None:
                        b = src.read(1 << 20)
                        if not b:
                            break
                        w.write(b)
                        res.bytes += len(b)
                os.chmod(target, ti.mode & 0o777)
            elif ti.issym():
                _remove_existing(target)
                os.symlink(ti.linkname, target)
            else:
                raise UnsafeTarError(f"{ti.name}: a {_tar_kind(ti)} entry is not copied")
            res.files += 1
    for d, mode in reversed(dirs):
        os.chmod(d, mode)
    return res


def _target(root: str, name: str) -> str:
    if name.startswith("/") or any(part == ".." for part in name.split("/")):
        raise UnsafeTarError(f"{name!r}: an entry outside the target directory")
    return os.path.normpath(os.path.join(root, name))


def _check_parents(root: str, target: str) -> None:
    """Every directory between root and target is a real directory."""
    rel = os.path.relpath(os.path.dirname(target), root)
    p = root
    for part in [] if rel == "." else rel.split(os.sep):
        p = os.path.join(p, part)
        st = os.lstat(p) if os.path.lexists(p) else None
        if st is None:
            os.mkdir(p, 0o755)
        elif not stat.S_ISDIR(st.st_mode):
            raise UnsafeTarError(f"{os.path.relpath(target, root)}: its parent {os.path.relpath(p, root)} "
                                 "is not a directory (a symlink is never followed)")


def _replace_non_dir(p: str) -> None:
    if os.path.lexists(p) and not stat.S_ISDIR(os.lstat(p).st_mode):
        os.unlink(p)


def _remove_existing(p: str) -> None:
    if not os.path.lexists(p):
        return
    if stat.S_ISDIR(os.lstat(p).st_mode):
        raise UnsafeTarError(f"{p}: a directory is in the way")
    os.unlink(p)


def _tar_kind(ti: tarfile.TarInfo) -> str:
    if ti.islnk():
        return "hard link"
    if ti.isfifo():
        return "fifo"
    if ti.ischr() or ti.isblk():
        return "device"
    return "special"
