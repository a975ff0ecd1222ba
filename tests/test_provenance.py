"""The fingerprint of a saved model folder: content, not path or sampled bytes."""

import shutil

import torch
from safetensors.torch import load_file, save_file

from prmkit.scoring.provenance import folder_fingerprint


def _folder(path, tensors):
    path.mkdir()
    (path / "config.json").write_text('{"model_type": "llama"}')
    save_file(tensors, str(path / "model.safetensors"))
    return path


def test_models_differing_only_in_middle_layers_have_different_fingerprints(tmp_path,
                                                                            monkeypatch):
    # LoRA on a few layers leaves the first and last MiB of the weight file unchanged
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PRMKIT_CACHE", raising=False)
    tensors = {f"layer.{i:02d}": torch.zeros(256, 1024) for i in range(8)}  # 8 MiB
    a = _folder(tmp_path / "a", tensors)
    changed = dict(tensors, **{"layer.04": torch.full((256, 1024), 0.5)})
    b = _folder(tmp_path / "b", changed)
    with open(a / "model.safetensors", "rb") as fa, open(b / "model.safetensors", "rb") as fb:
        assert fa.read(1 << 20) == fb.read(1 << 20)  # same first MiB
    assert folder_fingerprint(a) != folder_fingerprint(b)
    moved = shutil.move(str(a), tmp_path / "moved")
    assert folder_fingerprint(moved) == folder_fingerprint(_folder(tmp_path / "a2", tensors))


def test_rewritten_weights_are_hashed_again_not_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PRMKIT_CACHE", raising=False)
    folder = _folder(tmp_path / "m", {"w": torch.zeros(64, 64)})
    before = folder_fingerprint(folder)
    assert (tmp_path / "cache" / "prmkit" / "sha256.json").is_file()
    assert folder_fingerprint(folder) == before  # from the cache
    weights = load_file(str(folder / "model.safetensors"))
    weights["w"][0, 0] = 1.0
    save_file(weights, str(folder / "model.safetensors"))
    assert folder_fingerprint(folder) != before
