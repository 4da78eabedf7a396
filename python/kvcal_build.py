"""A PEP 517 build backend for the kvcal package, standard library only, so
that `pip install ./python` needs no download (build isolation installs
nothing: requires = []). It packs kvcal/*.py into a pure-Python wheel; an
editable install (pip install -e) puts the source folder on sys.path."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "kvcal"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: FP8 KV-cache scales and "
            "online quantization for Python engines (ctypes binding of libkvcal)\n"
            "Requires-Python: >=3.8\n" % (NAME, _version()))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _write_wheel(wheel_directory, files):
    name = "%s-%s-py3-none-any.whl" % (NAME, _version())
    di = _dist_info()
    files = list(files) + [
        (di + "/METADATA", _metadata().encode()),
        (di + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: kvcal_build\nRoot-Is-Purelib: true\n"
                        b"Tag: py3-none-any\n"),
    ]
    record = [_record_line(a, d) for a, d in files] + [di + "/RECORD,,"]
    files.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            z.writestr(arcname, data)
    return name


def _package_files():
    out = []
    pkg = os.path.join(HERE, NAME)
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                out.append(("%s/%s" % (NAME, fn), f.read()))
    return out


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("%s_editable.pth" % NAME, (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "kvcal_build.py"] + [a for a, _ in _package_files()]:
            t.add(os.path.join(HERE, rel), arcname="%s/%s" % (base, rel))
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
