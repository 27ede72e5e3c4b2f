"""The package's build backend (PEP 517, with PEP 660 editable installs),
standard library only, so that

    pip install --no-build-isolation --no-index ./clients/python

works in any virtual environment, without setuptools or wheel and without
reaching a package index. It reads [project] of pyproject.toml (name,
version, description, requires-python, optional dependencies) and packs
the tenure/ directory into a pure-Python wheel, or with the README and
the generator into an sdist."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "tenure"
TAG = "py3-none-any"


def _project() -> Dict[str, Any]:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return _parse_toml(raw.decode("utf-8"))
    return tomllib.loads(raw.decode("utf-8"))["project"]  # type: ignore[no-any-return]


def _parse_toml(text: str) -> Dict[str, Any]:
    """The [project] table of this package's pyproject.toml, for Pythons
    without tomllib: its string keys and its optional-dependencies."""
    out: Dict[str, Any] = {}
    table = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[(.+)\]$", line)
        if m:
            table = m.group(1).strip()
            continue
        m = re.match(r'^([\w-]+)\s*=\s*(.+)$', line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        strings = re.findall(r'"([^"]*)"', value)
        if table == "project" and value.startswith('"'):
            out[key] = strings[0]
        elif table == "project" and value.startswith("["):
            out[key] = strings
        elif table == "project.optional-dependencies":
            out.setdefault("optional-dependencies", {})[key] = strings
        elif table == "project.urls":
            out.setdefault("urls", {})[key] = strings[0] if strings else ""
    return out


def _metadata() -> Tuple[str, str, str]:
    """The distribution's name, version and METADATA."""
    p = _project()
    name, version = p["name"], p["version"]
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for label, url in (p.get("urls") or {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    for extra, reqs in (p.get("optional-dependencies") or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for r in reqs:
            lines.append(f'Requires-Dist: {r}; extra == "{extra}"')
    for c in p.get("classifiers") or ():
        lines.append(f"Classifier: {c}")
    readme = os.path.join(HERE, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return name, version, "\n".join(lines) + "\n\n" + body


def _files() -> List[str]:
    """The package's files, relative to HERE: tenure/**/*.py and py.typed."""
    out = []
    for root, dirs, names in os.walk(os.path.join(HERE, PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith(".py") or n == "py.typed":
                out.append(os.path.relpath(os.path.join(root, n), HERE))
    return out


def _dist_info(name: str, version: str) -> str:
    return f"{name.replace('-', '_')}-{version}.dist-info"


def _write_wheel(wheel_directory: str, entries: List[Tuple[str, bytes]]) -> str:
    name, version, metadata = _metadata()
    di = _dist_info(name, version)
    entries = entries + [
        (f"{di}/METADATA", metadata.encode("utf-8")),
        (f"{di}/WHEEL", f"Wheel-Version: 1.0\nGenerator: tenure build_backend\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
        (f"{di}/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{di}/RECORD,,")
    entries.append((f"{di}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{name.replace('-', '_')}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


# PEP 517 ---------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version, metadata = _metadata()
    di = _dist_info(name, version)
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    with open(os.path.join(metadata_directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata)
    return di


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    entries = []
    for rel in _files():
        with open(os.path.join(HERE, rel), "rb") as f:
            entries.append((rel.replace(os.sep, "/"), f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel whose .pth file puts this directory on sys.path: the checkout's
    tenure/ is imported as it is edited."""
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version, metadata = _metadata()
    base = f"{name}-{version}"
    filename = base + ".tar.gz"
    rels = ["pyproject.toml", "build_backend.py", "README.md", "generate.py"] + _files()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in rels:
            path = os.path.join(HERE, rel)
            if os.path.exists(path):
                t.add(path, arcname=f"{base}/{rel}", filter=_clean)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = metadata.encode("utf-8")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return filename


def _clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mtime = 0
    return ti
