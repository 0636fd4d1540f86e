"""PEP 517 build backend for the fedrouter SDK, so that ``pip install
./sdk/python`` works offline everywhere.

It is setuptools' own backend (``setuptools.build_meta``) when setuptools
and, for setuptools older than 70.1, ``wheel`` are importable (Debian's
python3-setuptools + python3-wheel, with ``--no-build-isolation``).
Otherwise -- pip's isolated build environment on a machine without an
index, or a Python whose setuptools cannot make wheels -- it builds this
pure-Python wheel itself with the standard library (zipfile): the package
has no compiled code and no dependencies, so the wheel is just its files
plus metadata.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))


def _setuptools_backend():
    try:
        import setuptools
        import setuptools.build_meta as st
    except ImportError:
        return None
    try:
        major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    if (major, minor) < (70, 1):
        try:
            import wheel  # noqa: F401  (bdist_wheel lives there before 70.1)
        except ImportError:
            return None
    return st


_ST = _setuptools_backend()
NAME = "fedrouter"


def _version():
    with open(os.path.join(_HERE, NAME, "__init__.py")) as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def _metadata():
    readme = ""
    p = os.path.join(_HERE, "README.md")
    if os.path.exists(p):
        with open(p) as f:
            readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: Python SDK for fedrouter, the multi-cluster code-execution sandbox router\n"
            "License: Apache-2.0\nRequires-Python: >=3.8\nClassifier: Typing :: Typed\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


def _files():
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(_HERE, NAME)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed")):
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, _HERE).replace(os.sep, "/"), full))
    return sorted(out)


def _dist_info(dirname):
    return {f"{dirname}/METADATA": _metadata().encode(),
            f"{dirname}/WHEEL": b"Wheel-Version: 1.0\nGenerator: fedrouter _build_backend\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n",
            f"{dirname}/top_level.txt": f"{NAME}\n".encode()}


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _build_wheel(wheel_directory):
    version = _version()
    dist = f"{NAME}-{version}.dist-info"
    whl = f"{NAME}-{version}-py3-none-any.whl"
    entries = []
    for arc, full in _files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    entries += sorted(_dist_info(dist).items())
    record = [_record_line(a, d) for a, d in entries] + [f"{dist}/RECORD,,"]
    entries.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, whl), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
    return whl


def get_requires_for_build_wheel(config_settings=None):
    return _ST.get_requires_for_build_wheel(config_settings) if _ST else []


def get_requires_for_build_sdist(config_settings=None):
    return _ST.get_requires_for_build_sdist(config_settings) if _ST else []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    if _ST:
        return _ST.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    dist = f"{NAME}-{_version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist), exist_ok=True)
    for arc, data in _dist_info(dist).items():
        with open(os.path.join(metadata_directory, arc), "wb") as f:
            f.write(data)
    return dist


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _ST:
        return _ST.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _build_wheel(wheel_directory)


def build_sdist(sdist_directory, config_settings=None):
    if _ST:
        return _ST.build_sdist(sdist_directory, config_settings)
    base = f"{NAME}-{_version()}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build_backend.py"] + [a for a, _ in _files()]:
            t.add(os.path.join(_HERE, rel), arcname=f"{base}/{rel}")
        data = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    return name
