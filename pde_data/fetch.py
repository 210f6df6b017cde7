"""Download the catalogue's public files with pooch: checked against their checksums, placed atomically.

:data:`SOURCES` is ``{group: files}``, read from the catalogue's records (their ``downloads``;
:mod:`.downloads` says where each is published). ``sciattn data fetch`` with no name gets the small files
bundled with neuraloperator (:data:`~.downloads.SMALL`: Darcy 16 and 32, Burgers 16, mini car, each with its
sha256) into :func:`~.registry.default_root` (``$SCIATTN_DATA`` or ``~/.cache/sciattn/data``), where
:func:`~.registry.load` finds them.

What :func:`fetch` adds to ``pooch.retrieve`` (which downloads to a temporary file, checks the hash, moves the
file into place, and downloads again when a file on disk fails its checksum):

* an interrupted transfer keeps ``root/<file>.part`` and the next call resumes it with ``Range: bytes=<n>-``
  (a server that answers ``200`` instead of ``206`` makes the download start again from zero);
* a Zenodo source is a record API endpoint: the file is found in the record by name, with its size and md5;
* a manual source (Google Drive folders, PDEBench's DaRUS files) is never scraped: the error says which URL to
  open and where to save each file;
* every failure is one line naming the file, the URL and the path to place a manual copy at.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from sciattn._checks import check_choice

from . import catalogue
from .downloads import SMALL, RemoteFile, split_checksum

__all__ = ["FetchError", "RemoteFile", "SOURCES", "SMALL", "describe_sources", "fetch", "fetch_small", "verify"]

_CHUNK = 1 << 20


class FetchError(ConnectionError):
    """A file could not be downloaded (network failure, HTTP error, or a manual-only source).

    The message names the URL and the exact path where the file can be placed by hand.
    """


class _Sources(MutableMapping):
    """``{group: [RemoteFile, ...]}`` of every catalogue record's ``downloads``, plus groups set here."""

    def __init__(self):
        self._extra: dict[str, list[RemoteFile]] = {}

    def _catalogue(self) -> dict[str, list[RemoteFile]]:
        return {g: list(files) for r in catalogue.records() for g, files in r.downloads.items()}

    def __getitem__(self, name: str) -> list[RemoteFile]:
        return self._extra[name] if name in self._extra else self._catalogue()[name]

    def __setitem__(self, name: str, files: list[RemoteFile]) -> None:
        self._extra[name] = list(files)

    def __delitem__(self, name: str) -> None:
        del self._extra[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._catalogue(), *self._extra]))

    def __len__(self) -> int:
        return len(list(iter(self)))


SOURCES: MutableMapping[str, list[RemoteFile]] = _Sources()


def describe_sources() -> list[dict[str, Any]]:
    """One row per download group for a ``sciattn data list`` table.

    Keys: ``name``, ``files``, ``urls`` (distinct, in order), ``kind``, ``checksum`` (``"yes"``,
    ``"no"``, or ``"from Zenodo record"``), ``checksum_known`` (bool, a static checksum for every
    file), ``notes``.
    """
    rows = []
    for name, files in SOURCES.items():
        known = all(f.checksum is not None for f in files)
        checksum = "yes" if known else "from Zenodo record" if all(f.kind == "zenodo" for f in files) else "no"
        rows.append({"name": name, "files": [f.name for f in files], "urls": list(dict.fromkeys(f.url for f in files)),
                     "kind": "/".join(dict.fromkeys(f.kind for f in files)), "checksum": checksum,
                     "checksum_known": known, "notes": "; ".join(dict.fromkeys(f.notes for f in files if f.notes))})
    return rows


def verify(path: str | os.PathLike, checksum: str) -> bool:
    """Whether the file at ``path`` has ``checksum`` (``"md5:<hex>"`` or ``"sha256:<hex>"``); ``False`` if the file
    does not exist."""
    import pooch

    algo, digest = split_checksum(checksum)
    p = Path(path)
    return p.is_file() and pooch.file_hash(str(p), alg=algo) == digest


_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError)


def _manual_hint(url: str, target: Path) -> str:
    return f"download {url} by hand and save it as {target}"


def _network_error(rf: RemoteFile, target: Path, part: Path, exc: BaseException) -> FetchError:
    kept = ""
    if part.is_file() and part.stat().st_size > 0:
        kept = f"; the partial download is kept at {part} and the next fetch resumes it"
    return FetchError(f"{rf.name}: could not download {rf.url} ({exc}){kept}; or {_manual_hint(rf.url, target)}")


def _resolve_zenodo(rf: RemoteFile, target: Path, opener, timeout: float, cache: dict) -> RemoteFile:
    """Turn a ``kind="zenodo"`` entry into a direct one using the record's file list."""
    if rf.url not in cache:
        try:
            with opener.open(urllib.request.Request(rf.url), timeout=timeout) as resp:
                cache[rf.url] = json.loads(resp.read().decode("utf-8"))
        except _NETWORK_ERRORS as exc:
            raise FetchError(f"{rf.name}: could not read the Zenodo record {rf.url} ({exc}); download the file "
                             f"{Path(rf.name).name!r} listed there by hand and save it as {target}") from exc
        except ValueError as exc:
            raise FetchError(f"{rf.name}: the Zenodo record {rf.url} is not valid JSON ({exc})") from exc
    record = cache[rf.url]
    files = record.get("files", []) if isinstance(record, dict) else []
    if isinstance(files, dict):  # some API versions nest the list under "entries"
        files = files.get("entries", [])
    if isinstance(files, dict):
        files = list(files.values())
    key = Path(rf.name).name
    for entry in files:
        if not isinstance(entry, dict) or entry.get("key", entry.get("filename")) != key:
            continue
        links = entry.get("links", {}) or {}
        url = links.get("content") or links.get("self") or links.get("download")
        if not url:
            break
        checksum = rf.checksum or entry.get("checksum")
        if checksum is not None:
            try:
                split_checksum(checksum)
            except ValueError:
                checksum = rf.checksum
        size = rf.size if rf.size is not None else entry.get("size")
        return RemoteFile(rf.name, url, size=size, checksum=checksum, notes=rf.notes, kind="direct")
    raise FetchError(f"{rf.name}: file {key!r} not found in the Zenodo record {rf.url}; "
                     f"download it by hand and save it as {target}")


class _ResumingDownloader:
    """A pooch downloader: streams ``rf.url`` into ``target.part`` (resuming it with an HTTP ``Range`` request),
    then hands the complete file to pooch, which checks its hash and moves it into place."""

    def __init__(self, rf: RemoteFile, target: Path, *, opener, timeout: float, progress: bool):
        self.rf, self.target, self.opener, self.timeout, self.progress = rf, target, opener, timeout, progress
        self.part = target.with_name(target.name + ".part")

    def __call__(self, url: str, output_file: str, pooch_obj) -> None:
        rf, part = self.rf, self.part
        if rf.size is not None and part.is_file() and part.stat().st_size > rf.size:
            part.unlink()
        for _attempt in range(3):
            have = part.stat().st_size if part.is_file() else 0
            if rf.size is not None and have == rf.size:
                break  # a complete .part from an earlier run: only verification is left
            req = urllib.request.Request(url)
            if have:
                req.add_header("Range", f"bytes={have}-")
            try:
                resp = self.opener.open(req, timeout=self.timeout)
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and have:  # range not satisfiable: start again from zero
                    part.unlink()
                    continue
                raise _network_error(rf, self.target, part, exc) from exc
            except _NETWORK_ERRORS as exc:
                raise _network_error(rf, self.target, part, exc) from exc
            with resp:
                status = getattr(resp, "status", None) or resp.getcode()
                if have and status == 206:
                    m = re.match(r"\s*bytes\s+(\d+)-", resp.headers.get("Content-Range") or "")
                    if m and int(m.group(1)) != have:
                        part.unlink()  # the server resumed from somewhere else: start again
                        continue
                    mode = "ab"
                else:
                    have, mode = 0, "wb"  # plain 200 (also for a Range request): from zero
                length = resp.headers.get("Content-Length")
                total = have + int(length) if length and length.isdigit() else rf.size
                self._stream(resp, mode, have, total)
            break
        else:
            raise FetchError(f"{rf.name}: could not resume {rf.url}; or {_manual_hint(rf.url, self.target)}")
        got = part.stat().st_size
        if rf.size is not None and got < rf.size:
            raise FetchError(f"{rf.name}: download of {rf.url} stopped at {got} of {rf.size} bytes; the partial "
                             f"download is kept at {part} and the next fetch resumes it; or "
                             f"{_manual_hint(rf.url, self.target)}")
        if rf.size is not None and got > rf.size:
            part.unlink()
            raise ValueError(f"{rf.name}: size mismatch: expected {rf.size} bytes, got {got} (deleted {part})")
        os.replace(part, output_file)

    def _stream(self, resp, mode: str, have: int, total: int | None) -> None:
        from tqdm.auto import tqdm

        received = have
        with (open(self.part, mode) as fh,
              tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=Path(self.rf.name).name, disable=not self.progress, leave=False) as bar):
            while True:
                try:
                    chunk = resp.read(_CHUNK)
                except _NETWORK_ERRORS as exc:
                    fh.flush()
                    raise _network_error(self.rf, self.target, self.part, exc) from exc
                if not chunk:
                    break
                fh.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        if total is not None and received < total:
            raise _network_error(self.rf, self.target, self.part,
                                 ConnectionError(f"connection closed after {received} of {total} bytes"))


def _retrieve(rf: RemoteFile, root: Path, *, opener, timeout: float, progress: bool) -> None:
    """``pooch.retrieve`` of ``rf`` into ``root/rf.name``: kept when its checksum matches (or none is published),
    downloaded otherwise; a download that fails its checksum is deleted and reported in one line."""
    import pooch

    target = root / rf.name
    downloader = _ResumingDownloader(rf, target, opener=opener, timeout=timeout, progress=progress)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")
    try:
        pooch.retrieve(rf.url, known_hash=rf.checksum, fname=rf.name, path=root, downloader=downloader)
    except ValueError as err:
        m = re.search(r"expected (\S+) but got ([0-9a-f]+)", str(err))
        if m is None:
            raise
        algo, want = split_checksum(rf.checksum)
        raise ValueError(f"{rf.name}: checksum mismatch for {rf.url}: expected {algo}:{want}, got {algo}:{m.group(2)} "
                         f"(deleted the download); the file may be corrupt on the server, or download it by hand "
                         f"and save it as {target}") from None
    finally:
        logger.setLevel(level)


def fetch(name: str, root: str | os.PathLike, *, progress: bool = True, timeout: float = 30,
          opener=None) -> list[Path]:
    """Make the files of download group ``name`` available under ``root``; return their paths.

    A file already at ``root/<file>`` is kept when it matches its published checksum (or when none is
    published); a corrupt or truncated one is downloaded again. See the module docstring for resuming,
    Zenodo and manual sources.

    Args:
        name: a key of :data:`SOURCES`.
        root: data directory.
        progress: show a tqdm progress bar per file.
        timeout: socket timeout in seconds for each request.
        opener: object with ``open(request, timeout=...)`` (default ``urllib.request.build_opener()``).

    Raises:
        ValueError: unknown ``name`` (the message lists the known names), or a downloaded file whose
            size/checksum does not match (the download is deleted).
        FetchError: a network failure (the ``.part`` file is kept for resuming), or files of a
            manual-only source are missing; the message names the URL and the target path.
    """
    check_choice("name", name, list(SOURCES))
    root = Path(root).expanduser().resolve()
    opener = opener if opener is not None else urllib.request.build_opener()
    zenodo_cache: dict[str, Any] = {}
    paths: list[Path] = []
    missing_manual: list[tuple[RemoteFile, Path]] = []
    for rf in SOURCES[name]:
        target = root / rf.name
        paths.append(target)
        if rf.kind != "direct" and target.is_file() and (rf.checksum is None or verify(target, rf.checksum)):
            continue
        if rf.kind == "manual":
            missing_manual.append((rf, target))
            continue
        if rf.kind == "zenodo":
            rf = _resolve_zenodo(rf, target, opener, timeout, zenodo_cache)
        _retrieve(rf, root, opener=opener, timeout=timeout, progress=progress)
    if missing_manual:
        lines = [f"  {rf.name}: open {rf.url} and save the file as {t}" for rf, t in missing_manual]
        notes = "; ".join(dict.fromkeys(rf.notes for rf, _ in missing_manual if rf.notes))
        raise FetchError(f"{name}: {len(missing_manual)} file(s) must be downloaded manually (no automatic download "
                         "for this host):\n" + "\n".join(lines) + (f"\n  ({notes})" if notes else ""))
    return paths


def fetch_small(root: str | os.PathLike | None = None, *, progress: bool = True, timeout: float = 30,
                opener=None) -> list[Path]:
    """Every group of :data:`~.downloads.SMALL` into ``root`` (default :func:`~.registry.default_root`)."""
    from .registry import default_root

    root = default_root() if root is None else root
    return [p for group in SMALL for p in fetch(group, root, progress=progress, timeout=timeout, opener=opener)]
