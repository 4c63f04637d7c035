"""Maps the repository's folders onto the `treespec.*` import names (see DESIGN.md, Layout), and
generates the gRPC stubs of protos/treespec/v1 at build time."""

import runpy
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

FOLDERS = {
    "treespec.shared": "shared",
    "treespec.kernels": "kernels",
    "treespec.verifier": "services/verifier",
    "treespec.drafter": "services/drafter",
    "treespec.gateway": "services/gateway",
    "treespec.bench": "bench",
    "treespec.v1": "protos/treespec/v1",
}


class BuildWithStubs(build_py):
    """Writes the *_pb2 stubs before the package's files are collected."""

    def run(self) -> None:
        codegen = runpy.run_path(str(Path(__file__).parent / "protos/treespec/v1/_codegen.py"))
        codegen["generate"](codegen["proto_files"]())
        super().run()


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
setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "treespec.v1": ["*.proto", "*.pyi"],
        # The panel matmul kernel's source, built on first use (kernels/panel_gemm.py).
        "treespec.kernels": ["cpu/*.cpp", "cpu/*.h"],
        # The EAGLE-3 head trained for the bundled model (services/drafter/eagle/heads/).
        "treespec.drafter.eagle": ["heads/*/*.json", "heads/*/*.safetensors"],
    },
    cmdclass={"build_py": BuildWithStubs},
)
