"""A runner's signing key on disk, for fixed worker ids: the next process with those ids holds the same key."""

from __future__ import annotations

import os
from pathlib import Path

from voltbus.services.lifecycle.authority import Holder


def load_holder(path: Path) -> Holder:
    """The key kept at ``path``, or a new one written there first (mode 0600, its folder 0700)."""
    if path.is_file():
        return Holder(path.read_bytes())
    holder = Holder()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(holder.private_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return holder
