"""A wheelhouse for air-gapped GPU nodes: manifest, verification, split into parts, reassembly, install plan.

Called by ``tools/wheelhouse.sh`` (which downloads the wheels) and ``tools/setup_gpu_env.sh --offline``
(which installs them); docs/cluster.md, section 1b. Standard library + ``packaging`` only, so it runs
with a bare node's Python.

    python tools/wheelhouse.py manifest DIR --python 3.12 [--missing NAME==VERSION=REASON ...]
    python tools/wheelhouse.py verify DIR
    python tools/wheelhouse.py split DIR --out PARTS [--part-mib 60]
    python tools/wheelhouse.py check-parts PARTS [--this-python]
    python tools/wheelhouse.py join PARTS --out DIR
    python tools/wheelhouse.py plan DIR [--keep-node torch,triton,nvidia-*,cuda-*]
    python tools/wheelhouse.py pins requirements-gpu.lock [--skip vllm,...]

Files: ``DIR/wheelhouse.json`` (schema ``rlec-wheelhouse/1``: the Python ``X.Y`` and platform the wheels are
for, every wheel's file, name, version, sha256 and size, and the packages with no wheel and why);
``PARTS/parts.json`` (schema ``rlec-wheelhouse-parts/1``: each part's file, size and sha256, the whole
archive's size and sha256) and ``PARTS/parts.sha256`` (the same checksums for ``sha256sum -c``).
Every refusal is one line naming the file or part and the rule, before anything is written or installed;
exit status 1 (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

MANIFEST = "wheelhouse.json"
PARTS = "parts.json"
PART_PREFIX = "wheelhouse.tar.part"
SCHEMA = "rlec-wheelhouse/1"
PARTS_SCHEMA = "rlec-wheelhouse-parts/1"
# what the node's own torch brings: never replaced from the wheelhouse when the node has it (any version)
KEEP_NODE = ("torch", "triton", "nvidia-*", "cuda-*")
CHUNK = 1 << 20


class Refused(Exception):
    """Bad input: a missing or damaged file or part, a Python or platform mismatch."""


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def normalize(name: str) -> str:
    """PEP 503 project name: lower case, runs of ``-_.`` as one ``-``."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(file: str) -> tuple[str, str]:
    """``(normalized name, version)`` of a wheel file name (PEP 427).

    Raises:
        Refused: not a wheel file name.
    """
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        name, version, _, _ = parse_wheel_filename(file)
    except InvalidWheelFilename as exc:
        raise Refused(f"{file}: not a wheel file name ({exc})") from None
    return normalize(name), str(version)


def lock_pins(lock_text: str, skip: Iterable[str] = ()) -> list[str]:
    """The ``name==version`` pins of a ``uv pip compile`` lock, less ``skip`` and what only they need.

    A pin is left out when its name matches a ``skip`` glob, or when every package its ``# via`` lines name is left
    out (and no ``-r`` requirement file asks for it): e.g. skipping ``vllm`` also drops ``xgrammar``, which only vLLM
    needs, but keeps ``fastapi``, which verl needs too.

    Args:
        lock_text: the lock file's text (pins at column 0, ``# via`` annotations indented below each).
        skip: globs of normalized names.

    Returns:
        The kept pins, in the lock's order.
    """
    pins: list[tuple[str, str]] = []
    parents: dict[str, set[str]] = {}
    current = None
    for raw in lock_text.splitlines():
        line = raw.strip()
        if raw[:1].isalnum() and "==" in raw:
            spec = raw.split()[0]
            current = normalize(spec.split("==")[0])
            pins.append((current, spec))
            parents[current] = set()
        elif current and line.startswith("#"):
            body = line.lstrip("#").strip()
            if body.startswith("via"):
                body = body[3:].strip()
            if body:
                parents[current].add("-r" if body.startswith("-r") else normalize(body))
    globs = [g for g in skip if g]
    dropped = {name for name, _ in pins if any(fnmatch.fnmatch(name, g) for g in globs)}
    changed = True
    while changed:
        changed = False
        for name, _ in pins:
            via = parents[name]
            if name not in dropped and via and "-r" not in via and via <= dropped:
                dropped.add(name)
                changed = True
    return [spec for name, spec in pins if name not in dropped]


def write_manifest(folder: Path, python: str, platform_tag: str, missing: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    """Write ``folder/wheelhouse.json`` listing every ``*.whl`` in ``folder`` (sorted by file name).

    Args:
        folder: the wheelhouse.
        python: the ``X.Y`` the wheels are for (e.g. ``3.12``).
        platform_tag: the platform they were downloaded for (e.g. ``manylinux_2_28_x86_64``).
        missing: packages without a wheel, ``{"name", "version", "reason"}`` each.

    Raises:
        Refused: no wheels, ``python`` is not ``X.Y``, or two wheels of one project.
    """
    parts = python.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise Refused(f"--python {python!r}: expected MAJOR.MINOR, e.g. 3.12")
    files = sorted(p for p in folder.glob("*.whl") if p.is_file())
    if not files:
        raise Refused(f"{folder}: no *.whl files")
    wheels, seen = [], {}
    for path in files:
        name, version = wheel_name_version(path.name)
        if name in seen:
            raise Refused(f"{folder}: two wheels of {name}: {seen[name]} and {path.name} (pip would refuse the install)")
        seen[name] = path.name
        wheels.append({"file": path.name, "name": name, "version": version, "sha256": sha256_of(path), "bytes": path.stat().st_size})
    manifest = {"schema": SCHEMA, "python": python, "platform": platform_tag, "wheels": wheels,
                "missing": [dict(m) for m in missing]}
    _write_json(folder / MANIFEST, manifest)
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """``folder/wheelhouse.json``, its schema checked.

    Raises:
        Refused: missing, not JSON, or another schema.
    """
    return _read_listing(folder / MANIFEST, SCHEMA, f"make it with `bash tools/wheelhouse.sh manifest {folder}`")


def _read_listing(path: Path, schema: str, how_made: str) -> dict[str, Any]:
    """A JSON listing this tool wrote (the manifest, the part list), its schema checked.

    Raises:
        Refused: ``path`` missing (``how_made`` says what writes it), not JSON, or of another schema.
    """
    if not path.is_file():
        raise Refused(f"{path}: missing ({how_made})")
    try:
        listing = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(listing, dict) or listing.get("schema") != schema:
        raise Refused(f"{path}: schema {listing.get('schema') if isinstance(listing, dict) else None!r}, expected {schema!r}")
    return listing


def verify(folder: Path) -> dict[str, Any]:
    """Check every wheel the manifest lists: present, same size and sha256; no wheel it does not list.

    Raises:
        Refused: the first wheel missing, damaged or unlisted (named).
    """
    manifest = read_manifest(folder)
    listed = {w["file"] for w in manifest["wheels"]}
    for wheel in manifest["wheels"]:
        path = folder / wheel["file"]
        if not path.is_file():
            raise Refused(f"{path}: listed in {MANIFEST} but missing")
        if path.stat().st_size != wheel["bytes"] or sha256_of(path) != wheel["sha256"]:
            raise Refused(f"{path}: damaged (sha256 {sha256_of(path)[:16]}..., {MANIFEST} says {wheel['sha256'][:16]}...)")
    extra = sorted(p.name for p in folder.glob("*.whl") if p.name not in listed)
    if extra:
        raise Refused(f"{folder}: {extra[0]} is not in {MANIFEST} ({len(extra)} unlisted wheel(s); rerun `wheelhouse.sh manifest`)")
    return manifest


def split(folder: Path, out: Path, part_mib: float) -> dict[str, Any]:
    """Pack ``folder`` (verified first) into one tar archive cut into parts of at most ``part_mib`` MiB.

    The archive is deterministic (sorted names, mtime 0, no owners), so the same folder gives the same parts.

    Raises:
        Refused: ``part_mib`` <= 0, ``out`` holds parts already, or the folder fails :func:`verify`.
    """
    if not part_mib > 0:
        raise Refused(f"--part-mib {part_mib}: must be > 0")
    manifest = verify(folder)
    part_bytes = int(part_mib * 1024 * 1024)
    if out.exists() and any(out.glob(PART_PREFIX + "*")):
        raise Refused(f"--out {out}: holds parts already (remove them or choose another folder)")
    out.mkdir(parents=True, exist_ok=True)
    writer = _PartWriter(out, part_bytes)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.name.startswith("."):  # not wheelhouse.sh's download log
                info = tar.gettarinfo(str(path), arcname=path.name)
                info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    writer.close()
    listing = {"schema": PARTS_SCHEMA, "python": manifest["python"], "part_bytes": part_bytes, "total_bytes": writer.total, "sha256": writer.digest.hexdigest(),
               "parts": writer.parts}
    _write_json(out / PARTS, listing)
    (out / "parts.sha256").write_text("".join(f"{p['sha256']}  {p['file']}\n" for p in writer.parts))
    return listing


class _PartWriter:
    """A write-only file object that cuts what it is given into numbered part files, hashing each."""

    def __init__(self, out: Path, part_bytes: int) -> None:
        self.out, self.part_bytes = out, part_bytes
        self.parts: list[dict[str, Any]] = []
        self.digest = hashlib.sha256()
        self.total = 0
        self._f: Any = None
        self._hash: Any = None
        self._size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self._f is None:
                self._open()
            n = min(len(view), self.part_bytes - self._size)
            self._f.write(view[:n])
            self._hash.update(view[:n])
            self.digest.update(view[:n])
            self._size += n
            self.total += n
            view = view[n:]
            if self._size == self.part_bytes:
                self._finish()
        return len(data)

    def _open(self) -> None:
        name = f"{PART_PREFIX}{len(self.parts):03d}"
        self._f, self._hash, self._size = open(self.out / name, "wb"), hashlib.sha256(), 0
        self.parts.append({"file": name})

    def _finish(self) -> None:
        self._f.close()
        self.parts[-1].update(bytes=self._size, sha256=self._hash.hexdigest())
        self._f = None

    def close(self) -> None:
        if self._f is not None:
            self._finish()


def check_parts(parts_dir: Path) -> dict[str, Any]:
    """Check ``parts.json`` and every part it lists (present, size, sha256) before anything is joined.

    Raises:
        Refused: ``parts.json`` missing or invalid, or the first part missing or damaged (named).
    """
    listing = _read_listing(parts_dir / PARTS, PARTS_SCHEMA, "the part list that `wheelhouse.sh split` writes beside the parts")
    missing = [p["file"] for p in listing["parts"] if not (parts_dir / p["file"]).is_file()]
    if missing:
        raise Refused(f"part {missing[0]} is missing from {parts_dir} ({len(missing)} of {len(listing['parts'])} parts missing: "
                      f"{', '.join(missing)})")
    for part in listing["parts"]:
        file = parts_dir / part["file"]
        size = file.stat().st_size
        if size != part["bytes"]:
            raise Refused(f"part {part['file']} is damaged: {size} bytes, {PARTS} says {part['bytes']}")
        got = sha256_of(file)
        if got != part["sha256"]:
            raise Refused(f"part {part['file']} is damaged: sha256 {got[:16]}..., {PARTS} says {part['sha256'][:16]}...")
    return listing


def check_python(python: str, source: Path) -> None:
    """Refuse a wheelhouse made for another Python ``X.Y`` than this interpreter's (named, with ``source``)."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python != here:
        raise Refused(f"{source}: the wheels are for Python {python}; this Python ({sys.executable}) is {here}: use the "
                      f"node's Python {python} or a wheelhouse made with --python {here}")


def join(parts_dir: Path, out: Path, this_python: bool = False) -> dict[str, Any]:
    """Check every part (:func:`check_parts`), then unpack the archive into ``out`` and verify the wheelhouse.

    Args:
        this_python: also refuse, before writing, parts made for another Python than this one.

    Raises:
        Refused: a part missing or damaged, another Python (``this_python``), ``out`` not empty, an unsafe
        member name, or the unpacked folder fails :func:`verify`.
    """
    listing = check_parts(parts_dir)
    if this_python:
        check_python(str(listing.get("python")), parts_dir / PARTS)
    if out.exists() and any(out.iterdir()):
        raise Refused(f"--out {out}: exists and is not empty")
    digest = hashlib.sha256()
    tmp = Path(tempfile.mkdtemp(prefix=".wheelhouse-join-", dir=out.parent if out.parent.exists() else None))
    try:
        with open(tmp / "wheelhouse.tar", "wb") as whole:
            for part in listing["parts"]:
                with open(parts_dir / part["file"], "rb") as f:
                    for block in iter(lambda: f.read(CHUNK), b""):
                        digest.update(block)
                        whole.write(block)
        if digest.hexdigest() != listing["sha256"]:
            raise Refused(f"{parts_dir}: the joined archive's sha256 differs from {PARTS} (parts out of order?)")
        unpacked = tmp / "unpacked"
        unpacked.mkdir()
        with tarfile.open(tmp / "wheelhouse.tar") as tar:
            for member in tar.getmembers():
                if not member.isfile() or "/" in member.name or member.name in ("", ".", ".."):
                    raise Refused(f"{parts_dir}: archive member {member.name!r} is not a plain file at the top level")
            tar.extractall(unpacked, filter="data")
        manifest = verify(unpacked)
        out.mkdir(parents=True, exist_ok=True)
        for path in unpacked.iterdir():
            os.replace(path, out / path.name)
        return manifest
    finally:
        for path in sorted(tmp.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        tmp.rmdir()


def install_plan(folder: Path, keep_node: Iterable[str] = KEEP_NODE, allow_unmet: bool = False) -> dict[str, list[str]]:
    """What an offline install from ``folder`` would do with this Python (the node's), before installing anything.

    Checks, in order: the wheelhouse (:func:`verify`), the Python ``X.Y`` it was made for against this one, every
    wheel's tags against this interpreter and platform (``packaging.tags.sys_tags``, pip's own rule), and that what the
    wheels to install require is carried or already here (:func:`unmet_requirements`).

    Returns:
        ``{"install": [files], "node_has": ["name version (node: v)"], "keep_node": [...], "missing": [...]}``:
        a wheel is skipped when this Python already has that version (local labels such as ``+cu130`` ignored),
        or when its name matches ``keep_node`` and this Python has it at any version (the node's torch and CUDA stack);
        ``"unmet"``: requirements neither carried nor here, listed instead of refused with ``allow_unmet``.

    Raises:
        Refused: the wheelhouse fails :func:`verify`, is for another Python, holds a wheel this node cannot install, or
        a wheel to install needs a package neither carried nor here (or at another version).
    """
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
    from packaging.version import Version

    manifest = verify(folder)
    check_python(manifest["python"], folder / MANIFEST)
    here = manifest["python"]
    supported = set(sys_tags())
    plan: dict[str, list[str]] = {"install": [], "node_has": [], "keep_node": [], "missing": []}
    patterns = [p for p in keep_node if p]
    for wheel in manifest["wheels"]:
        _, _, _, tags = parse_wheel_filename(wheel["file"])
        if not tags & supported:
            raise Refused(f"{wheel['file']}: none of its tags ({', '.join(sorted(map(str, tags)))}) fits this Python {here} "
                          f"on {platform.machine()} ({sys.executable})")
        try:
            have = importlib.metadata.version(wheel["name"])
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is not None and any(fnmatch.fnmatch(wheel["name"], p) for p in patterns):
            plan["keep_node"].append(f"{wheel['name']} {wheel['version']} (node: {have})")
        elif have is not None and Version(have).base_version == Version(wheel["version"]).base_version:
            plan["node_has"].append(f"{wheel['name']} {wheel['version']} (node: {have})")
        else:
            plan["install"].append(wheel["file"])
    plan["missing"] = [f"{m['name']} {m['version']}: {m['reason']}" for m in manifest.get("missing", [])]
    unmet = unmet_requirements(folder, plan["install"])
    plan["unmet"] = unmet
    if unmet and not allow_unmet:
        raise Refused(f"{folder}: {unmet[0]} ({len(unmet)} unmet requirement(s): "
                      f"{'; '.join(unmet[1:4])}{' ...' if len(unmet) > 4 else ''}); nothing installed")
    return plan


def wheel_requirements(path: Path) -> list[Any]:
    """The ``Requires-Dist`` entries of a wheel's ``METADATA`` that apply here (markers evaluated for this interpreter,
    no extras), as ``packaging.requirements.Requirement``.

    Raises:
        Refused: the file is not a wheel archive with a ``*.dist-info/METADATA``.
    """
    import zipfile

    from packaging.requirements import Requirement

    try:
        with zipfile.ZipFile(path) as archive:
            meta = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            text = archive.read(meta).decode("utf-8", "replace")
    except (zipfile.BadZipFile, StopIteration, OSError) as exc:
        raise Refused(f"{path}: not a wheel archive with a .dist-info/METADATA ({type(exc).__name__})") from None
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def unmet_requirements(folder: Path, install: Sequence[str]) -> list[str]:
    """What the wheels to install need that neither the wheelhouse (the wheels installed with them) nor this Python has,
    or has at a version outside the requirement: ``"<wheel> needs <requirement>: <what is there>"`` each.

    ``--no-deps`` installs resolve nothing, so this is the check that everything else is carried.
    """
    from packaging.version import Version

    carried = {}
    for file in install:
        name, version = wheel_name_version(file)
        carried[name] = version
    problems = []
    for file in install:
        for req in wheel_requirements(folder / file):
            name = normalize(req.name)
            version = carried.get(name)
            where = "the wheelhouse"
            if version is None:
                try:
                    version, where = importlib.metadata.version(name), "this Python"
                except importlib.metadata.PackageNotFoundError:
                    problems.append(f"{file} needs {req}: not in the wheelhouse and not installed here")
                    continue
            if req.specifier and not req.specifier.contains(Version(version), prereleases=True):
                problems.append(f"{file} needs {req}: {where} has {name} {version}")
    return problems


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _missing_arg(text: str) -> dict[str, str]:
    name, sep, rest = text.partition("==")
    version, sep2, reason = rest.partition("=")
    if not (sep and sep2 and name and version and reason):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME==VERSION=REASON")
    return {"name": normalize(name), "version": version, "reason": reason}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring). Exit 0, 1 on a refusal (one line on stderr), 2 on bad arguments."""
    parser = argparse.ArgumentParser(prog="tools/wheelhouse.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pins", help="the lock's pins less --skip globs and what only they need")
    p.add_argument("lock", type=Path)
    p.add_argument("--skip", default="", help="comma-separated globs of names")
    p = sub.add_parser("manifest", help="write DIR/wheelhouse.json")
    p.add_argument("folder", type=Path)
    p.add_argument("--python", required=True, help="the MAJOR.MINOR the wheels are for")
    p.add_argument("--platform", default="manylinux_2_28_x86_64")
    p.add_argument("--missing", type=_missing_arg, action="append", default=[], metavar="NAME==VERSION=REASON")
    p.add_argument("--keep-missing", action="store_true",
                   help="also keep the old manifest's no-wheel entries of projects that still have no wheel here")
    p = sub.add_parser("verify", help="check every wheel against wheelhouse.json")
    p.add_argument("folder", type=Path)
    p.add_argument("--this-python", action="store_true", help="also refuse wheels made for another Python")
    p = sub.add_parser("check-parts", help="check every part against parts.json; writes nothing")
    p.add_argument("parts", type=Path)
    p.add_argument("--this-python", action="store_true", help="also refuse parts made for another Python")
    p = sub.add_parser("split", help="cut the wheelhouse into parts with a checksummed part list")
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--part-mib", type=float, default=60.0, help="largest part in MiB (default %(default)s)")
    p = sub.add_parser("join", help="check every part, then reassemble and verify the wheelhouse")
    p.add_argument("parts", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--this-python", action="store_true", help="refuse parts made for another Python first")
    p = sub.add_parser("plan", help="what an offline install would do with this Python; installs nothing")
    p.add_argument("folder", type=Path)
    p.add_argument("--keep-node", default=",".join(KEEP_NODE), help="names (globs) the node's own versions are kept of")
    p.add_argument("--install-list", type=Path, help="also write the wheel files to install, one per line")
    p.add_argument("--allow-unmet", action="store_true", help="list unmet requirements instead of refusing (a node's own pins)")
    args = parser.parse_args(argv)
    try:
        if args.command == "pins":
            print("\n".join(lock_pins(args.lock.read_text(), args.skip.split(","))))
        elif args.command == "manifest":
            missing = list(args.missing)
            if args.keep_missing and (args.folder / MANIFEST).is_file():
                have = {wheel_name_version(p.name)[0] for p in args.folder.glob("*.whl")}
                missing += [m for m in read_manifest(args.folder).get("missing", []) if m["name"] not in have]
            m = write_manifest(args.folder, args.python, args.platform, missing)
            print(f"{args.folder / MANIFEST}: {len(m['wheels'])} wheels for Python {m['python']} / {m['platform']}, "
                  f"{sum(w['bytes'] for w in m['wheels']) / 2**20:.1f} MiB; no wheel: {len(m['missing'])}")
            for miss in m["missing"]:
                print(f"  no wheel: {miss['name']} {miss['version']}: {miss['reason']}")
        elif args.command == "verify":
            m = verify(args.folder)
            if args.this_python:
                check_python(m["python"], args.folder / MANIFEST)
            print(f"{args.folder}: {len(m['wheels'])} wheels match {MANIFEST} (Python {m['python']})")
        elif args.command == "check-parts":
            listing = check_parts(args.parts)
            if args.this_python:
                check_python(str(listing.get("python")), args.parts / PARTS)
            print(f"{args.parts}: {len(listing['parts'])} parts match {PARTS} (Python {listing.get('python')})")
        elif args.command == "split":
            listing = split(args.folder, args.out, args.part_mib)
            print(f"{args.out}: {len(listing['parts'])} parts of at most {args.part_mib:g} MiB, {listing['total_bytes']} bytes, "
                  f"sha256 {listing['sha256'][:16]}...; copy the whole folder (parts, {PARTS}, parts.sha256)")
        elif args.command == "join":
            m = join(args.parts, args.out, args.this_python)
            print(f"{args.out}: {len(m['wheels'])} wheels reassembled and verified (Python {m['python']})")
        else:
            plan = install_plan(args.folder, args.keep_node.split(","), args.allow_unmet)
            for key, what in (("install", "install"), ("node_has", "node has it"), ("keep_node", "the node's own kept"),
                              ("missing", "no wheel"), ("unmet", "unmet requirements (--allow-unmet)")):
                print(f"{what}: {len(plan[key])}")
                for item in plan[key]:
                    print(f"  {item}")
            if args.install_list:
                args.install_list.write_text("".join(f"{args.folder.resolve() / f}\n" for f in plan["install"]))
    except Refused as exc:
        print(f"wheelhouse: refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
