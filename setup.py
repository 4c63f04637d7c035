"""Maps the repository's folders onto the `treespec.*` import names (see DESIGN.md, Layout)."""

from setuptools import find_packages, setup

FOLDERS = {
    "treespec.shared": "shared",
    "treespec.kernels": "kernels",
    "treespec.verifier": "services/verifier",
    "treespec.drafter": "services/drafter",
    "treespec.bench": "bench",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for name, folder in FOLDERS.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(folder):
            packages.append(f"{name}.{sub}")
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
