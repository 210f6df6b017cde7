"""Readers: one file format or published benchmark layout per file.

:mod:`.fno_mat` (FNO ``.mat``), :mod:`.neuralop_pt` (neuraloperator ``.pt``), :mod:`.pdebench`, :mod:`.the_well`,
:mod:`.geofno` (Geo-FNO ``.npy``/``.mat`` point sets), :mod:`.shapenet_car`, :mod:`.xarray_data` (NetCDF / Zarr).
Each takes a path and never downloads. The catalogue (:mod:`sciattn.pde_data.formats`,
:mod:`sciattn.pde_data.benchmarks`) names them by record; nothing is imported here, so each reader's optional
library (h5py, xarray, scipy) is imported only when that reader is.
"""

__all__: list[str] = []
