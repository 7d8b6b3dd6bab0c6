"""A sharded version's index names its shards: a name that reaches outside the version's directory (a path, ``..``)
or a shard that is missing is refused with a precise error, and no file outside the directory is read or served."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir
from voltbus.services.clients.model import shards
from voltbus.services.inference.swap import WeightsError, read_weights


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model_dir(build_tiny_model(0), build_tokenizer(), tmp_path_factory.mktemp("s") / "m", 1 << 20)


def tampered(sharded: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "version"
    shutil.copytree(sharded, folder)
    index = json.loads((folder / shards.INDEX).read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = name
    (folder / shards.INDEX).write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "/etc/passwd", "sub/model.safetensors", "missing.safetensors"]
)
def test_an_index_naming_a_shard_outside_its_directory_is_refused(sharded: Path, tmp_path: Path, name: str) -> None:
    (tmp_path / "outside.safetensors").write_bytes((sharded / shards.shard_files(sharded)[1].name).read_bytes())
    folder = tampered(sharded, tmp_path, name)
    with pytest.raises(WeightsError, match="shard"):
        read_weights(folder / shards.INDEX)


def test_the_digest_names_every_shard(sharded: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(sharded, folder)
    before = shards.weights_sha256(folder)
    assert read_weights(folder, before)[1] == before
    last = shards.shard_files(folder)[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 1  # one bit of the last shard
    last.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="sha256"):
        read_weights(folder, before)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink"])
def test_a_packed_set_whose_members_leave_its_folder_is_refused(tmp_path: Path, kind: str) -> None:
    """A ``.tar`` version from the bus (its digest matched) is extracted as plain files inside the scratch folder
    only: a member named ``../x`` or a link to outside fails, ``/x`` lands inside; nothing is written outside."""
    import io
    import tarfile

    archive, outside = tmp_path / "version.tar", tmp_path / "outside"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo({"dotdot": "../outside", "absolute": str(outside)}.get(kind, "link"))
        if kind in ("symlink", "hardlink"):
            info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
            info.linkname = str(outside)
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    if kind == "absolute":  # the leading "/" is dropped: the file lands inside the scratch folder
        shards.unpack(archive, tmp_path / "scratch")
        assert (tmp_path / "scratch" / str(outside).lstrip("/")).read_bytes() == b"evil"
    else:
        with pytest.raises(tarfile.TarError):
            shards.unpack(archive, tmp_path / "scratch")
    assert not outside.exists()
