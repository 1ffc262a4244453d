"""Uploads as Streamlit hands them over (a named binary stream) and archives built in memory,
for the upload tests and the bad-input tests."""

from __future__ import annotations

import io
import tarfile
import zipfile


class Upload(io.BytesIO):
    """Like Streamlit's UploadedFile: a named binary stream; records every read size."""

    def __init__(self, name: str, data: bytes) -> None:
        super().__init__(data)
        self.name = name
        self.reads: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        self.reads.append(-1 if size is None else size)
        return super().read(size)


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return buf.getvalue()


def tar_of(members: dict[str, bytes], mode: str = "w:gz", extra=()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
        for info in extra:
            tf.addfile(info)
    return buf.getvalue()
