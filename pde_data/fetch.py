"""Download the public PDE benchmark files: resumable, verified, atomically placed.

:data:`SOURCES` lists, per benchmark, the files a loader needs and where they are published.
It holds only what ``shared/reference/formats.md`` states: the hosting URLs, Zenodo record ids
and file names given there. No exact byte sizes and no checksums are published there, so every
static ``size`` and ``checksum`` is ``None``; for the neuraloperator archives on Zenodo the md5
and size are read from the Zenodo record API when the file is downloaded (that is what
neuraloperator's own downloader does), and verified.

Three kinds of source:

* ``"direct"``: the URL is the file; :func:`fetch` downloads it.
* ``"zenodo"``: the URL is a Zenodo record API endpoint (``https://zenodo.org/api/records/<id>``);
  :func:`fetch` reads the record, finds the file by name, and downloads it from the link given
  there, verifying the size and md5 the record publishes.
* ``"manual"``: Google Drive folders and PDEBench's DaRUS files (whose per-file ids are not in
  formats.md). :func:`fetch` never scrapes these; it raises :class:`FetchError` saying which URL to
  open and the exact path to save each file to, and returns the paths once they are there.

Downloads go to ``root/<name>.part``; an interrupted transfer keeps the ``.part`` file and the next
call resumes it with ``Range: bytes=<n>-`` (a server that answers ``200`` instead of ``206``
makes the download start again from zero). The finished file is checked against the expected
size and checksum and then renamed into place atomically.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from sciattn._checks import check_choice
from sciattn._io import atomic_path

__all__ = [
    "FetchError",
    "RemoteFile",
    "SOURCES",
    "describe_sources",
    "fetch",
    "verify",
]

_CHUNK = 1 << 20
_HASHES = ("md5", "sha256")


class FetchError(ConnectionError):
    """A file could not be downloaded (network failure, HTTP error, or a manual-only source).

    The message names the URL and the exact path where the file can be placed by hand.
    """


@dataclass(frozen=True)
class RemoteFile:
    """One published file of a benchmark.

    Attributes:
        name: path of the file relative to the data root (may contain ``/``).
        url: where it is published (for ``kind="zenodo"`` the record API endpoint).
        size: exact size in bytes, or ``None`` when not published.
        checksum: ``"<algorithm>:<hex digest>"`` (md5 or sha256), or ``None`` when not published.
        notes: what to do with it (manual step, archive extraction, caveats).
        kind: ``"direct"``, ``"zenodo"`` or ``"manual"`` (see the module docstring).
    """

    name: str
    url: str
    size: int | None = None
    checksum: str | None = None
    notes: str = ""
    kind: str = "direct"

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, ("direct", "zenodo", "manual"))
        if self.checksum is not None:
            _split_checksum(self.checksum)


# ----------------------------------------------------------------------------- the sources

_FNO_DRIVE = "https://drive.google.com/drive/folders/1UnbQh2WWc6knEHbLn-ZaXrKUZhp7pjt-"
_GEOFNO_DRIVE = "https://drive.google.com/drive/folders/1YBuaoTdOSr_qzaow-G-iwvbUI7fiUzu8"
_ZENODO_API = "https://zenodo.org/api/records/"
_DARCY_RECORD = 12784353
_NS_RECORD = 12825163
_PDEBENCH_DOI = "https://doi.org/10.18419/darus-2986"
_PDEBENCH_DATAFILE = "https://darus.uni-stuttgart.de/api/access/datafile/<id>"
_THE_WELL = "https://sdsc-users.flatironinstitute.org/~polymathic/data/the_well/datasets/"
_SHAPENET_CAR = "http://www.nobuyuki-umetani.com/publication/mlcfd_data.zip"
_AIRFRANS = "https://data.isir.upmc.fr/extrality/NeurIPS_2022/Dataset.zip"

_DRIVE_NOTE = (
    "Google Drive: manual download (open the folder, download this file, save it at the target path)"
)
_PDEBENCH_NOTE = (
    "PDEBench on DaRUS (doi:10.18419/darus-2986): manual download; find this file's datafile id and md5 "
    "in pdebench/data_download/pdebench_data_urls.csv, download "
    f"{_PDEBENCH_DATAFILE} and check the md5 with sciattn.pde_data.fetch.verify"
)


def _fno(*names: str) -> list[RemoteFile]:
    return [RemoteFile(n, _FNO_DRIVE, notes=_DRIVE_NOTE, kind="manual") for n in names]


def _geofno(*names: str, note: str = "") -> list[RemoteFile]:
    extra = f"; {note}" if note else ""
    return [RemoteFile(n, _GEOFNO_DRIVE, notes=_DRIVE_NOTE + extra, kind="manual") for n in names]


def _zenodo(record: int, name: str, note: str) -> RemoteFile:
    return RemoteFile(
        name,
        f"{_ZENODO_API}{record}",
        notes=f"Zenodo record {record}: link, size and md5 are read from the record at download time; {note}",
        kind="zenodo",
    )


def _pdebench(name: str) -> list[RemoteFile]:
    return [RemoteFile(name, _PDEBENCH_DOI, notes=_PDEBENCH_NOTE, kind="manual")]


def _build_sources() -> dict[str, list[RemoteFile]]:
    s: dict[str, list[RemoteFile]] = {}
    # neuraloperator's .pt archives (formats.md §2.2, §2.3).
    for res in (16, 32, 64, 128, 421):
        s[f"darcy_pt_{res}"] = [
            _zenodo(
                _DARCY_RECORD,
                f"darcy_{res}.tgz",
                f"archive: extract with `tar -xzf darcy_{res}.tgz -C <root>` to get the "
                f"darcy_{{train,test}}_{res}.pt files PTDataset reads",
            )
        ]
    for res in (128, 1024):
        s[f"navier_stokes_pt_{res}"] = [
            _zenodo(
                _NS_RECORD,
                f"nsforcing_{res}.tgz",
                f"archive: extract with `tar -xzf nsforcing_{res}.tgz -C <root>` to get "
                f"nsforcing_train_{res}.pt and nsforcing_test_{res}.pt (older code used record 11043303)",
            )
        ]
    # FNO .mat files (formats.md §1).
    s["fno_burgers"] = _fno("burgers_data_R10.mat")
    s["fno_darcy"] = _fno("piececonst_r421_N1024_smooth1.mat", "piececonst_r421_N1024_smooth2.mat")
    s["fno_navier_stokes_v1e-3"] = _fno("ns_V1e-3_N5000_T50.mat")
    s["fno_navier_stokes_v1e-4"] = _fno("ns_V1e-4_N10000_T30.mat")
    s["fno_navier_stokes_v1e-5"] = _fno("NavierStokes_V1e-5_N1200_T20.mat")
    # Geo-FNO .npy / .mat files (formats.md §3).
    s["geofno_airfoil"] = _geofno(
        "naca/NACA_Cylinder_X.npy", "naca/NACA_Cylinder_Y.npy", "naca/NACA_Cylinder_Q.npy"
    )
    s["geofno_pipe"] = _geofno("pipe/Pipe_X.npy", "pipe/Pipe_Y.npy", "pipe/Pipe_Q.npy")
    s["geofno_elasticity"] = _geofno(
        *(f"elasticity/Meshes/Random_UnitCell_{k}_10.npy" for k in ("XY", "sigma", "rr", "theta"))
    )
    s["geofno_plasticity"] = _geofno(
        "plas_N987_T20.mat", note="Geo-FNO names the same file buri_plas_N987_time.mat"
    )
    # PDEBench HDF5 files named in formats.md §4 (manual: per-file DaRUS ids are not listed there).
    for beta in ("0.1", "0.2", "0.4", "0.7", "1.0", "2.0", "4.0", "7.0"):
        s[f"pdebench_advection_beta{beta}"] = _pdebench(f"1D_Advection_Sols_beta{beta}.hdf5")
    for nu in ("0.001", "4.0"):  # formats.md names the range {0.001 ... 4.0}, only its ends
        s[f"pdebench_burgers_nu{nu}"] = _pdebench(f"1D_Burgers_Sols_Nu{nu}.hdf5")
    for beta in ("0.01", "0.1", "1.0", "10.0", "100.0"):
        s[f"pdebench_darcy_beta{beta}"] = _pdebench(f"2D_DarcyFlow_beta{beta}_Train.hdf5")
    s["pdebench_rdb_2d"] = _pdebench("2D_rdb_NA_NA.h5")
    s["pdebench_diff_react_2d"] = _pdebench("2D_diff-react_NA_NA.h5")
    s["pdebench_diff_sorp_1d"] = _pdebench("1D_diff-sorp_NA_NA.h5")
    # The Well (formats.md §5): only stats.yaml has a fully stated URL; the per-split HDF5 file names
    # are not listed in formats.md.
    for ds in ("turbulent_radiative_layer_2D", "active_matter", "MHD_64"):
        s[f"the_well_{ds}_stats"] = [
            RemoteFile(
                f"datasets/{ds}/stats.yaml",
                f"{_THE_WELL}{ds}/stats.yaml",
                notes=(
                    "The Well normalization stats; the data files live under "
                    f"{_THE_WELL}{ds}/data/{{train,valid,test}}/*.hdf5 (use `the-well-download "
                    f"--base-path <root> --dataset {ds} --split train`)"
                ),
            )
        ]
    # ShapeNet-Car raw data (formats.md §6) and AirfRANS (§7).
    s["shapenet_car"] = [
        RemoteFile(
            "mlcfd_data.zip",
            _SHAPENET_CAR,
            notes="archive: extract with `unzip mlcfd_data.zip -d <root>` → mlcfd_data/training_data/param0..8",
        )
    ]
    s["airfrans"] = [
        RemoteFile(
            "Dataset.zip",
            _AIRFRANS,
            notes="archive (about 9.3 GB): extract with `unzip Dataset.zip -d <root>` → Dataset/manifest.json",
        )
    ]
    return s


SOURCES: dict[str, list[RemoteFile]] = _build_sources()


def describe_sources() -> list[dict[str, Any]]:
    """One row per benchmark for a ``sciattn data list`` table.

    Keys: ``name``, ``files``, ``urls`` (distinct, in order), ``kind``, ``checksum`` (``"yes"``,
    ``"no"``, or ``"from Zenodo record"``), ``checksum_known`` (bool, a static checksum for every
    file), ``notes``.
    """
    rows = []
    for name, files in SOURCES.items():
        known = all(f.checksum is not None for f in files)
        if known:
            checksum = "yes"
        elif all(f.kind == "zenodo" for f in files):
            checksum = "from Zenodo record"
        else:
            checksum = "no"
        rows.append(
            {
                "name": name,
                "files": [f.name for f in files],
                "urls": list(dict.fromkeys(f.url for f in files)),
                "kind": "/".join(dict.fromkeys(f.kind for f in files)),
                "checksum": checksum,
                "checksum_known": known,
                "notes": "; ".join(dict.fromkeys(f.notes for f in files if f.notes)),
            }
        )
    return rows


# ----------------------------------------------------------------------------- verification


def _split_checksum(checksum: str) -> tuple[str, str]:
    algo, sep, digest = checksum.partition(":")
    algo = algo.strip().lower()
    digest = digest.strip().lower()
    if not sep or algo not in _HASHES or not re.fullmatch(r"[0-9a-f]+", digest):
        raise ValueError(f"checksum: expected '<md5|sha256>:<hex digest>', got {checksum!r}")
    return algo, digest


def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | os.PathLike, checksum: str) -> bool:
    """Whether the file at ``path`` has ``checksum`` (``"md5:<hex>"`` or ``"sha256:<hex>"``).

    Reads the file in chunks; ``False`` if the file does not exist.
    """
    algo, digest = _split_checksum(checksum)
    p = Path(path)
    if not p.is_file():
        return False
    return _digest(p, algo) == digest


# ----------------------------------------------------------------------------- downloading

_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError)


def _manual_hint(url: str, target: Path) -> str:
    return f"download {url} by hand and save it as {target}"


def _network_error(rf: RemoteFile, url: str, target: Path, part: Path, exc: BaseException) -> FetchError:
    kept = ""
    if part.is_file() and part.stat().st_size > 0:
        kept = f"; the partial download is kept at {part} and the next fetch resumes it"
    return FetchError(f"{rf.name}: could not download {url} ({exc}){kept}; or {_manual_hint(url, target)}")


def _resolve_zenodo(rf: RemoteFile, target: Path, opener, timeout: float, cache: dict) -> RemoteFile:
    """Turn a ``kind="zenodo"`` entry into a direct one using the record's file list."""
    if rf.url not in cache:
        try:
            with opener.open(urllib.request.Request(rf.url), timeout=timeout) as resp:
                cache[rf.url] = json.loads(resp.read().decode("utf-8"))
        except _NETWORK_ERRORS as exc:
            raise FetchError(
                f"{rf.name}: could not read the Zenodo record {rf.url} ({exc}); download the file "
                f"{Path(rf.name).name!r} listed there by hand and save it as {target}"
            ) from exc
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
                _split_checksum(checksum)
            except ValueError:
                checksum = rf.checksum
        size = rf.size if rf.size is not None else entry.get("size")
        return RemoteFile(rf.name, url, size=size, checksum=checksum, notes=rf.notes, kind="direct")
    raise FetchError(
        f"{rf.name}: file {key!r} not found in the Zenodo record {rf.url}; "
        f"download it by hand and save it as {target}"
    )


def _content_range_start(value: str | None) -> int | None:
    if not value:
        return None
    m = re.match(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)", value)
    return int(m.group(1)) if m else None


def _download(rf: RemoteFile, target: Path, *, progress: bool, timeout: float, opener) -> None:
    """Download ``rf`` to ``target.part`` (resuming), verify, and rename into place."""
    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    if rf.size is not None and part.is_file() and part.stat().st_size > rf.size:
        part.unlink()

    for _attempt in range(3):
        have = part.stat().st_size if part.is_file() else 0
        if rf.size is not None and have == rf.size:
            break  # a complete .part from an earlier run: only verification is left
        req = urllib.request.Request(rf.url)
        if have:
            req.add_header("Range", f"bytes={have}-")
        try:
            resp = opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # range not satisfiable: start again from zero
                part.unlink()
                continue
            raise _network_error(rf, rf.url, target, part, exc) from exc
        except _NETWORK_ERRORS as exc:
            raise _network_error(rf, rf.url, target, part, exc) from exc

        with resp:
            status = getattr(resp, "status", None) or resp.getcode()
            if have and status == 206:
                start = _content_range_start(resp.headers.get("Content-Range"))
                if start is not None and start != have:
                    part.unlink()  # the server resumed from somewhere else: start again
                    continue
                mode = "ab"
            else:
                have, mode = 0, "wb"  # plain 200 (also for a Range request): from zero
            length = resp.headers.get("Content-Length")
            expected_total = have + int(length) if length and length.isdigit() else rf.size
            _stream(resp, part, mode, have, expected_total, rf, target, progress)
        break
    else:
        raise FetchError(f"{rf.name}: could not resume {rf.url}; or {_manual_hint(rf.url, target)}")

    got = part.stat().st_size
    if rf.size is not None and got != rf.size:
        if got < rf.size:
            raise FetchError(
                f"{rf.name}: download of {rf.url} stopped at {got} of {rf.size} bytes; the partial "
                f"download is kept at {part} and the next fetch resumes it; or {_manual_hint(rf.url, target)}"
            )
        part.unlink()
        raise ValueError(f"{rf.name}: size mismatch: expected {rf.size} bytes, got {got} (deleted {part})")
    if rf.checksum is not None:
        algo, want = _split_checksum(rf.checksum)
        have_digest = _digest(part, algo)
        if have_digest != want:
            part.unlink()
            raise ValueError(
                f"{rf.name}: checksum mismatch for {rf.url}: expected {algo}:{want}, "
                f"got {algo}:{have_digest} (deleted {part})"
            )
    with atomic_path(target) as tmp:
        os.replace(part, tmp)


def _stream(resp, part: Path, mode: str, have: int, total: int | None, rf, target, progress: bool) -> None:
    received = have
    with (
        open(part, mode) as fh,
        tqdm(
            total=total,
            initial=have,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=Path(rf.name).name,
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        while True:
            try:
                chunk = resp.read(_CHUNK)
            except _NETWORK_ERRORS as exc:
                fh.flush()
                raise _network_error(rf, rf.url, target, part, exc) from exc
            if not chunk:
                break
            fh.write(chunk)
            received += len(chunk)
            bar.update(len(chunk))
    if total is not None and received < total:
        raise _network_error(
            rf, rf.url, target, part, ConnectionError(f"connection closed after {received} of {total} bytes")
        )


def _present_ok(rf: RemoteFile, target: Path) -> bool:
    if not target.is_file():
        return False
    if rf.size is not None and target.stat().st_size != rf.size:
        return False
    if rf.checksum is not None:
        return verify(target, rf.checksum)
    return True  # nothing published to check against; files are only ever placed complete


def fetch(
    name: str,
    root: str | os.PathLike,
    *,
    progress: bool = True,
    timeout: float = 30,
    opener=None,
) -> list[Path]:
    """Make the files of benchmark ``name`` available under ``root``; return their paths.

    A file already at ``root/<file>`` is kept when it matches the published size/checksum (or when
    none is published). Otherwise it is downloaded to ``root/<file>.part`` (resuming a previous
    partial download with an HTTP ``Range`` request), checked, and renamed into place atomically.

    Args:
        name: a key of :data:`SOURCES`.
        root: data directory.
        progress: show a tqdm progress bar per file.
        timeout: socket timeout in seconds for each request.
        opener: object with ``open(request, timeout=...)`` (default ``urllib.request.build_opener()``).

    Raises:
        ValueError: unknown ``name`` (the message lists the known names), or a downloaded file whose
            size/checksum does not match (the ``.part`` file is deleted).
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
        if _present_ok(rf, target):
            continue
        if rf.kind == "manual":
            missing_manual.append((rf, target))
            continue
        if rf.kind == "zenodo":
            rf = _resolve_zenodo(rf, target, opener, timeout, zenodo_cache)
        _download(rf, target, progress=progress, timeout=timeout, opener=opener)
    if missing_manual:
        lines = [f"  {rf.name}: open {rf.url} and save the file as {t}" for rf, t in missing_manual]
        notes = "; ".join(dict.fromkeys(rf.notes for rf, _ in missing_manual if rf.notes))
        raise FetchError(
            f"{name}: {len(missing_manual)} file(s) must be downloaded manually "
            f"(no automatic download for this host):\n"
            + "\n".join(lines)
            + (f"\n  ({notes})" if notes else "")
        )
    return paths
