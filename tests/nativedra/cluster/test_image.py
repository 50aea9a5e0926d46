"""The image is rebuilt exactly when a source copied into it changes."""

from __future__ import annotations

from pathlib import Path

from nativedra.cluster.image import source_digest


def test_the_image_digest_follows_the_copied_sources_only(tmp_path: Path) -> None:
    (tmp_path / "extender").mkdir()
    (tmp_path / "extender" / "app.py").write_text("one")
    (tmp_path / "Dockerfile").write_text("FROM x")
    first = source_digest(tmp_path)
    (tmp_path / "extender" / "__pycache__").mkdir()
    (tmp_path / "extender" / "__pycache__" / "app.pyc").write_bytes(b"\0")
    (tmp_path / "notes.txt").write_text("not copied into the image")
    assert source_digest(tmp_path) == first
    (tmp_path / "extender" / "app.py").write_text("two")
    assert source_digest(tmp_path) != first
