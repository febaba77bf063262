"""A checkpoint's sha256 without reading it again (sweep/checkpoints/hashes.py): the Hugging Face
cache's blob names, the cache keyed by (path, size, mtime_ns, ctime_ns, inode) in the user's
cache directory, and what that key still catches: an edit that keeps the size and puts the
mtime back, refused on resume as a new store records its true hash."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from sweep.config.load import config_from_dict
from sweep.errors import CheckpointChanged
from sweep.checkpoints import hashes
from sweep.plan.make import make_plan
from sweep.checkpoints.formats import open_checkpoint
from sweep.plan.provenance import checkpoint_record
from sweep.store.writer import open_store


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def xdg_cache(tmp_path, monkeypatch) -> Path:
    """The cache where a user without TDOS_CACHE has it: $XDG_CACHE_HOME/tdos/sha256.json."""
    monkeypatch.delenv("TDOS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "tdos" / hashes.CACHE_FILE


def _plant(cache_file: Path, path: Path, sha256: str, after_ctime_ns: int) -> None:
    """Set the cache entry of `path` (in its present state) to `sha256`, hashed at ctime + after."""
    raw = json.loads(cache_file.read_text())
    s = os.stat(path)
    raw["files"][os.path.abspath(path)] = {
        "size": s.st_size, "mtime_ns": s.st_mtime_ns, "ctime_ns": s.st_ctime_ns, "inode": s.st_ino,
        "sha256": sha256, "hashed_ns": s.st_ctime_ns + after_ctime_ns}
    cache_file.write_text(json.dumps(raw))


def test_the_cache_lives_where_the_user_keeps_caches(tmp_path, monkeypatch):
    monkeypatch.delenv("TDOS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hashes.cache_dir() == tmp_path / "home" / ".cache" / "tdos"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hashes.cache_dir() == tmp_path / "xdg" / "tdos"
    monkeypatch.setenv("TDOS_CACHE", str(tmp_path / "mine"))
    assert hashes.cache_dir() == tmp_path / "mine"


def test_a_cached_hash_is_trusted_only_for_the_files_present_state(tiny_checkpoints, tmp_path,
                                                                   xdg_cache):
    ckpt = tmp_path / "gpt2"
    shutil.copytree(tiny_checkpoints["gpt2"], ckpt)
    weights = ckpt / "model.safetensors"
    cfg = config_from_dict({"model": {"path": str(ckpt)}, "layers": [0],
                            "store": str(tmp_path / "r.zarr"), "inputs": {"sequences": 1, "length": 4}})
    open_store(make_plan(cfg))                       # the store records the true hashes
    entries = json.loads(xdg_cache.read_text())["files"]
    assert {Path(p).name: e["sha256"] for p, e in entries.items()} == {
        "config.json": _sha256(ckpt / "config.json"), "model.safetensors": _sha256(weights)}

    # an entry for the file's present state is used without reading the file
    _plant(xdg_cache, weights, "f" * 64, after_ctime_ns=10**10)
    assert checkpoint_record(open_checkpoint(ckpt))["files"]["model.safetensors"]["sha256"] == "f" * 64
    # unless it was hashed within 2 s of the file's ctime: a write in that tick could hide
    _plant(xdg_cache, weights, "f" * 64, after_ctime_ns=0)
    assert checkpoint_record(open_checkpoint(ckpt))["files"]["model.safetensors"]["sha256"] == _sha256(weights)

    # one bit of one weight, same size, mtime put back: only the ctime says it was written
    _plant(xdg_cache, weights, _sha256(weights), after_ctime_ns=10**10)
    before = os.stat(weights)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(weights)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns,
                                                                before.st_ino)
    assert checkpoint_record(open_checkpoint(ckpt))["files"]["model.safetensors"]["sha256"] == _sha256(weights)
    with pytest.raises(CheckpointChanged, match="model.safetensors changed since the store was made"):
        open_store(make_plan(cfg))                   # the resume refuses it


def _hub_cache(src: Path, hub: Path, repo: str, rev: str) -> None:
    """`src`'s files laid out as huggingface_hub caches a download of `repo` at `rev`: blobs
    named by their etag (LFS: sha256 of the content; git: git's sha1 of the blob), snapshot
    files as relative links to them, refs/main naming the revision."""
    root = hub / ("models--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(rev)
    snap = root / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in src.iterdir():
        data = f.read_bytes()
        etag = (hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors" else
                hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        (root / "blobs" / etag).write_bytes(data)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", etag))


def test_hub_cache_blobs_named_by_sha256_are_not_read(tiny_checkpoints, tmp_path, xdg_cache):
    from huggingface_hub import scan_cache_dir, snapshot_download

    rev = "0123456789abcdef0123456789abcdef01234567"
    _hub_cache(tiny_checkpoints["gpt2"], tmp_path / "hub", "org/tiny", rev)
    info = scan_cache_dir(tmp_path / "hub")            # huggingface_hub reads it as its own
    assert not info.warnings and [r.repo_id for r in info.repos] == ["org/tiny"]
    snap = Path(snapshot_download("org/tiny", cache_dir=tmp_path / "hub", local_files_only=True))
    assert snap.name == rev

    got = {h.path.name: h for h in hashes.sha256_files([snap / "config.json",
                                                        snap / "model.safetensors"])}
    assert got["model.safetensors"].source == "hub blob"        # its name: 64 hex digits
    assert got["config.json"].source == "read"                  # a git sha1 (40) is no sha256
    for name, h in got.items():
        assert h.sha256 == _sha256(tiny_checkpoints["gpt2"] / name)
    plan = make_plan(config_from_dict({"model": {"path": str(snap)}, "layers": [0],
                                       "store": str(tmp_path / "r.zarr"),
                                       "inputs": {"sequences": 1, "length": 4}}))
    assert plan.models[0].checkpoint["files"]["model.safetensors"]["sha256"] == \
        os.path.basename(os.readlink(snap / "model.safetensors"))

    copy = tmp_path / "copy"                                    # the same files, no blob links
    shutil.copytree(snap, copy, symlinks=False)
    assert hashes.sha256_files([copy / "model.safetensors"])[0].source == "read"


def test_a_damaged_or_unwritable_cache_costs_a_read_never_a_wrong_hash(tmp_path, xdg_cache,
                                                                         monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(1000))
    for junk in (b"\x00\xff not json", b"[1, 2]", json.dumps({"version": 1, "files": {
            str(f): {"size": 1000, "sha256": "nope"}}}).encode()):
        xdg_cache.parent.mkdir(parents=True, exist_ok=True)
        xdg_cache.write_bytes(junk)
        assert hashes.sha256_files([f])[0].sha256 == _sha256(f)
        assert set(json.loads(xdg_cache.read_text())["files"]) == {str(f)}     # rewritten whole

    monkeypatch.setenv("TDOS_CACHE", str(f))       # a file where the directory should be
    with pytest.warns(UserWarning, match="hash cache .* not written .* set TDOS_CACHE"):
        assert hashes.sha256_files([f])[0].sha256 == _sha256(f)


def test_concurrent_writers_merge_and_readers_never_see_half_a_file(tmp_path, xdg_cache):
    files = [tmp_path / f"{i}.bin" for i in range(8)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * 100)
    a, b = hashes.HashCache(), hashes.HashCache()         # both read the cache before either writes
    a.put(files[0], os.stat(files[0]), _sha256(files[0]), 0)
    b.put(files[1], os.stat(files[1]), _sha256(files[1]), 0)
    a.save()
    b.save()
    assert {Path(p).name for p in json.loads(xdg_cache.read_text())["files"]} == {"0.bin", "1.bin"}

    def write(f):
        for _ in range(20):
            c = hashes.HashCache()
            c.put(f, os.stat(f), _sha256(f), 0)
            c.save()

    threads = [threading.Thread(target=write, args=(f,)) for f in files[2:]]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        entries = json.loads(xdg_cache.read_text())["files"]      # whole at every moment
        assert all(e["sha256"] == _sha256(p) for p, e in entries.items())
    for t in threads:
        t.join()
    assert not list(xdg_cache.parent.glob(".sha256-*"))           # no temporary file left


def test_hashing_shows_bytes_and_stays_quiet_off_a_terminal(tmp_path, xdg_cache, capsys):
    f = tmp_path / "w.bin"
    f.write_bytes(b"\0" * 3 * 2**20)
    hashes.sha256_files([f])                     # stderr captured: not a terminal
    assert capsys.readouterr().err == ""
    os.utime(f)                                  # a new ctime: read again
    hashes.sha256_files([f], progress=True)
    err = capsys.readouterr().err
    assert "sha256 of 1 file(s)" in err and "3.00M/3.00M" in err and "B/s" in err
