"""The order of the gallery's scripts (sphinx-gallery's ``within_subsection_order``)."""


class GalleryOrder:
    """Gallery order: the families first (as in the README), then the workflows."""

    ORDER = ["plot_galerkin_darcy.py", "plot_mano_zero_shot.py", "plot_codano_add_variable.py",
             "plot_erwin_point_cloud.py", "plot_mspt_car.py", "plot_spherical_shallow_water.py",
             "plot_surrogate_in_solver.py"]

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        return (self.ORDER.index(filename) if filename in self.ORDER else len(self.ORDER), filename)

    def __repr__(self):
        return "GalleryOrder"
