"""Where the catalogue's datasets are published: the ``downloads`` of their records.

Each record maps a *group* name (``sciattn data fetch GROUP``) to the files it holds, as :class:`RemoteFile`.
The sources of the FNO, Geo-FNO, PDEBench, The Well, ShapeNet-Car and AirfRANS data hold only what
``shared/reference/formats.md`` states: the hosting URLs, Zenodo record ids and file names. No sizes and no
checksums are published there, so theirs are ``None`` (a Zenodo record's md5 and size are read from the record
at download time). The small files bundled with neuraloperator (:data:`SMALL`, what a bare ``sciattn data
fetch`` gets) are pinned to one commit of its repository, with the sha256 of each file.

Three kinds of source: ``"direct"`` (the URL is the file), ``"zenodo"`` (the URL is a Zenodo record API
endpoint; the file is found in the record by name) and ``"manual"`` (Google Drive folders and PDEBench's DaRUS
files: the fetch says which URL to open and where to save each file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sciattn._checks import check_choice

__all__ = ["RemoteFile", "SMALL", "split_checksum"]

_HASHES = ("md5", "sha256")


def split_checksum(checksum: str) -> tuple[str, str]:
    """``(algorithm, hex digest)`` of ``"<md5|sha256>:<hex>"``; a clear error otherwise."""
    algo, sep, digest = checksum.partition(":")
    algo = algo.strip().lower()
    digest = digest.strip().lower()
    if not sep or algo not in _HASHES or not re.fullmatch(r"[0-9a-f]+", digest):
        raise ValueError(f"checksum: expected '<md5|sha256>:<hex digest>', got {checksum!r}")
    return algo, digest


@dataclass(frozen=True)
class RemoteFile:
    """One published file of a dataset.

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
            split_checksum(self.checksum)


FNO_DRIVE = "https://drive.google.com/drive/folders/1UnbQh2WWc6knEHbLn-ZaXrKUZhp7pjt-"
GEOFNO_DRIVE = "https://drive.google.com/drive/folders/1YBuaoTdOSr_qzaow-G-iwvbUI7fiUzu8"
ZENODO_API = "https://zenodo.org/api/records/"
DARCY_RECORD = 12784353
NS_RECORD = 12825163
PDEBENCH_DOI = "https://doi.org/10.18419/darus-2986"
_PDEBENCH_DATAFILE = "https://darus.uni-stuttgart.de/api/access/datafile/<id>"
THE_WELL = "https://sdsc-users.flatironinstitute.org/~polymathic/data/the_well/datasets/"
SHAPENET_CAR = "http://www.nobuyuki-umetani.com/publication/mlcfd_data.zip"
AIRFRANS = "https://data.isir.upmc.fr/extrality/NeurIPS_2022/Dataset.zip"
#: neuraloperator's bundled example data, at one commit (the files' sha256 below are those of that commit)
NEURALOP_RAW = ("https://github.com/neuraloperator/neuraloperator/raw/93d3f0633e048c915004cd782cb339acf06e1157/"
                "neuralop/data/datasets/data/")
NEURALOP_SHA256 = {
    "darcy_train_16.pt": "0be662acdb1dab7dfd1a1da0b140e97f75cc94f98a14edcf768abe6968b3b418",
    "darcy_test_16.pt": "d2b19af9d4a6ae04ba2de54b8ecccc8b89766472faf6ce7f506c0b2a60f69a4c",
    "darcy_test_32.pt": "bcbd10622373e94df84a17fcdb72ac4317d76e024c2499d21fd1fd34d0742cfd",
    "burgers_train_16.pt": "d12335adc0d96357a893dc39d72957fa89fda852b00902d94da95aa06af23fa0",
    "burgers_test_16.pt": "70bb1591e31b254e74ac6097a5520de299da38115cb3f814e8d0f6f19057d201",
    "mini_car.pt": "cc4941066a1abe0d10461aec5069eea0f0e595248469e1522a4f873965f784f2",
}
#: the groups a bare ``sciattn data fetch`` downloads: small files (7.4 MB together), checksummed
SMALL = ("neuralop_darcy_16", "neuralop_darcy_32", "neuralop_burgers_16", "neuralop_mini_car")

_DRIVE_NOTE = "Google Drive: manual download (open the folder, download this file, save it at the target path)"
_PDEBENCH_NOTE = (
    "PDEBench on DaRUS (doi:10.18419/darus-2986): manual download; find this file's datafile id and md5 "
    "in pdebench/data_download/pdebench_data_urls.csv, download "
    f"{_PDEBENCH_DATAFILE} and check the md5 with sciattn.pde_data.fetch.verify"
)


def neuralop(*names: str) -> tuple[RemoteFile, ...]:
    """neuraloperator's bundled files ``names``, pinned, with their sha256."""
    return tuple(RemoteFile(n, NEURALOP_RAW + n, checksum="sha256:" + NEURALOP_SHA256[n],
                            notes="bundled with neuraloperator (MIT license)") for n in names)


def fno(*names: str) -> tuple[RemoteFile, ...]:
    return tuple(RemoteFile(n, FNO_DRIVE, notes=_DRIVE_NOTE, kind="manual") for n in names)


def geofno(*names: str, note: str = "") -> tuple[RemoteFile, ...]:
    extra = f"; {note}" if note else ""
    return tuple(RemoteFile(n, GEOFNO_DRIVE, notes=_DRIVE_NOTE + extra, kind="manual") for n in names)


def zenodo(record: int, name: str, note: str) -> tuple[RemoteFile, ...]:
    return (RemoteFile(name, f"{ZENODO_API}{record}", kind="zenodo",
                       notes=f"Zenodo record {record}: link, size and md5 are read from the record at download "
                             f"time; {note}"),)


def pdebench(name: str) -> tuple[RemoteFile, ...]:
    return (RemoteFile(name, PDEBENCH_DOI, notes=_PDEBENCH_NOTE, kind="manual"),)


def neuralop_archives(stem: str, name: str, resolutions: tuple[int, ...], group: str, record: int,
                      extra: str = "") -> dict[str, tuple[RemoteFile, ...]]:
    """The Zenodo archives ``{stem}_{res}.tgz`` of neuraloperator's ``{name}_{train,test}_{res}.pt`` files."""
    return {f"{group}_{res}": zenodo(record, f"{stem}_{res}.tgz",
                                     f"archive: extract with `tar -xzf {stem}_{res}.tgz -C <root>` to get "
                                     + (f"the {name}_{{train,test}}_{res}.pt files PTDataset reads" if not extra else
                                        f"{name}_train_{res}.pt and {name}_test_{res}.pt{extra}"))
            for res in resolutions}


def the_well_stats(dataset: str) -> tuple[RemoteFile, ...]:
    # only stats.yaml has a fully stated URL in formats.md; the per-split HDF5 file names are not listed there
    return (RemoteFile(f"datasets/{dataset}/stats.yaml", f"{THE_WELL}{dataset}/stats.yaml",
                       notes=("The Well normalization stats; the data files live under "
                              f"{THE_WELL}{dataset}/data/{{train,valid,test}}/*.hdf5 (use `the-well-download "
                              f"--base-path <root> --dataset {dataset} --split train`)")),)
