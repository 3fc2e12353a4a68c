"""Self-tests of the fault-injecting FUSE passthrough (faultfs.py and its
controller faultfs_fixture.py): what the reliability tests rely on. They do
not need gpufeed: /usr/bin/python3 -m pytest --noconftest tests/python/test_faultfs.py"""

import errno
import os
import threading
import time

import pytest

from faultfs_fixture import FaultMount, faultfs, is_mounted, require_fuse_or_skip  # noqa: F401 (a fixture)

SIZE = 1_380_000
PAGE = 4096


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "source"
    (folder / "sub").mkdir(parents=True)
    data = os.urandom(SIZE)
    (folder / "a.bin").write_bytes(data)
    (folder / "sub" / "b.bin").write_bytes(data[:10_000])
    return folder, data


def pread(path, size, offset, flags=0):
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def read_errno(path, size, offset):
    try:
        pread(path, size, offset)
    except OSError as error:
        return error.errno
    return None


@pytest.mark.parametrize("direct_io", [False, True])
def test_passthrough_bytes_equal_the_source(faultfs, source, direct_io):
    folder, data = source
    mount = faultfs(folder, direct_io=direct_io)
    assert open(os.path.join(mount.path, "a.bin"), "rb").read() == data
    assert open(os.path.join(mount.path, "sub", "b.bin"), "rb").read() == data[:10_000]
    assert sorted(os.listdir(mount.path)) == ["a.bin", "sub"]
    assert os.stat(os.path.join(mount.path, "a.bin")).st_size == SIZE
    with pytest.raises(OSError) as raised:
        open(os.path.join(mount.path, "a.bin"), "r+b")
    assert raised.value.errno in (errno.EROFS, errno.EACCES)
    assert {entry["path"] for entry in mount.reads()} == {"a.bin", "sub/b.bin"}


def test_eio_range_fails_exactly_the_overlapping_reads(faultfs, source):
    # direct_io: each read reaches the daemon as asked (no page rounding, no readahead).
    folder, data = source
    mount = faultfs(folder, direct_io=True)
    path = os.path.join(mount.path, "a.bin")
    mount.set_faults([{"path": "a.bin", "start": 500_000, "end": 600_000, "error": "EIO"}])
    assert read_errno(path, 1000, 499_000) is None          # ends at 500,000: no overlap
    assert read_errno(path, 1000, 499_001) == errno.EIO     # its last byte is 500,000
    assert read_errno(path, 10, 550_000) == errno.EIO
    assert read_errno(path, 1000, 599_999) == errno.EIO
    assert pread(path, 1000, 600_000) == data[600_000:601_000]
    assert pread(path, 1000, 0) == data[:1000]
    # Other files and errnos.
    mount.set_faults([{"path": "sub/*", "error": "ESTALE"}])
    assert read_errno(os.path.join(mount.path, "sub", "b.bin"), 100, 0) == errno.ESTALE
    assert pread(path, 100, 550_000) == data[550_000:550_100]
    results = [entry["result"] for entry in mount.reads("sub/b.bin")]
    assert results == ["ESTALE"]


def test_eio_through_the_page_cache(faultfs, source):
    # Without direct_io: a read starting in the faulty range fails, one far
    # from it does not, and pages cached before the fault do not hide it.
    folder, data = source
    mount = faultfs(folder)
    path = os.path.join(mount.path, "a.bin")
    with open(path, "rb") as held:
        assert held.read() == data  # every page cached
        mount.set_faults([{"path": "a.bin", "start": 40 * PAGE, "end": 50 * PAGE, "error": "EIO"}])
        with pytest.raises(OSError) as raised:
            os.pread(held.fileno(), 100, 45 * PAGE)
        assert raised.value.errno == errno.EIO
    assert pread(path, 100, 200 * PAGE) == data[200 * PAGE:200 * PAGE + 100]
    assert read_errno(path, 100, 41 * PAGE) == errno.EIO


def test_until_expires(faultfs, source):
    folder, data = source
    mount = faultfs(folder, direct_io=True)
    path = os.path.join(mount.path, "a.bin")
    mount.set_faults([{"path": "*", "error": "EIO", "for_ms": 300}])
    started = time.monotonic()
    assert read_errno(path, 100, 0) == errno.EIO
    while read_errno(path, 100, 0) == errno.EIO:
        assert time.monotonic() - started < 5, "the rule did not expire"
        time.sleep(0.02)
    assert time.monotonic() - started >= 0.25
    assert pread(path, 100, 0) == data[:100]


def test_count_applies_to_the_first_reads(faultfs, source):
    folder, data = source
    mount = faultfs(folder, direct_io=True)
    path = os.path.join(mount.path, "a.bin")
    mount.set_faults([{"path": "a.bin", "error": "ETIMEDOUT", "count": 2}])
    assert read_errno(path, 100, 0) == errno.ETIMEDOUT
    assert read_errno(path, 100, 0) == errno.ETIMEDOUT
    assert pread(path, 100, 0) == data[:100]
    assert [entry["result"] for entry in mount.reads("a.bin")] == ["ETIMEDOUT", "ETIMEDOUT", "ok"]


def test_delay(faultfs, source):
    folder, data = source
    mount = faultfs(folder, direct_io=True)
    path = os.path.join(mount.path, "a.bin")
    mount.set_faults([{"path": "a.bin", "delay_ms": 200}])
    started = time.monotonic()
    assert pread(path, 100, 0) == data[:100]
    assert time.monotonic() - started >= 0.19


@pytest.mark.parametrize("direct_io", [False, True])
def test_hang_until_the_rule_is_removed_and_other_reads_go_on(faultfs, source, direct_io):
    folder, data = source
    mount = faultfs(folder, direct_io=direct_io)
    mount.set_faults([{"path": "a.bin", "hang": True}])
    result = {}

    def hung_read():
        result["data"] = pread(os.path.join(mount.path, "a.bin"), 100, 0)

    reader = threading.Thread(target=hung_read, daemon=True)
    reader.start()
    reader.join(0.5)
    assert reader.is_alive(), "the read did not hang"
    # A hung read blocks only itself.
    assert pread(os.path.join(mount.path, "sub", "b.bin"), 100, 0) == data[:100]
    mount.clear_faults()
    reader.join(5)
    assert not reader.is_alive(), "removing the hang rule did not release the read"
    assert result["data"] == data[:100]


def test_killed_daemon_gives_enotconn(faultfs, source):
    folder, data = source
    mount = faultfs(folder, direct_io=True)
    path = os.path.join(mount.path, "a.bin")
    held = os.open(path, os.O_RDONLY)
    assert os.pread(held, 100, 0) == data[:100]
    mount.kill()
    with pytest.raises(OSError) as raised:
        os.pread(held, 100, 0)
    assert raised.value.errno == errno.ENOTCONN
    # close() of a file of a dead client fails too (its FLUSH is not answered);
    # the descriptor is released all the same.
    with pytest.raises(OSError) as raised:
        os.close(held)
    assert raised.value.errno == errno.ENOTCONN
    assert read_errno(path, 100, 0) == errno.ENOTCONN
    assert is_mounted(mount.path)  # stays until teardown unmounts it


def test_kill_releases_a_hung_read_with_enotconn(faultfs, source):
    folder, _ = source
    mount = faultfs(folder, direct_io=True)
    mount.set_faults([{"path": "a.bin", "hang": True}])
    result = {}

    def hung_read():
        result["errno"] = read_errno(os.path.join(mount.path, "a.bin"), 100, 0)

    reader = threading.Thread(target=hung_read, daemon=True)
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()
    mount.kill()
    reader.join(5)
    assert not reader.is_alive()
    assert result["errno"] == errno.ENOTCONN


def test_teardown_leaves_no_mount(faultfs, source):
    folder, _ = source
    mounts = [faultfs(folder), faultfs(folder, direct_io=True)]
    mounts[1].set_faults([{"path": "a.bin", "hang": True}])
    reader = threading.Thread(target=read_errno, args=(os.path.join(mounts[1].path, "a.bin"), 100, 0),
                              daemon=True)
    reader.start()
    reader.join(0.3)
    for mount in mounts:
        mount.close()  # what the fixture's teardown does
        assert not is_mounted(mount.path)
        assert mount.process.poll() is not None
    reader.join(5)
    assert not reader.is_alive()


def test_malformed_control_is_refused(tmp_path):
    from faultfs_fixture import FaultMount
    mount = FaultMount.__new__(FaultMount)  # only its control file is used
    mount.control = str(tmp_path / "faults.json")
    with pytest.raises(ValueError, match="EWHAT"):
        FaultMount.set_faults(mount, [{"error": "EWHAT"}])


def test_mount_point_inside_its_source_is_refused(faultfs, source):
    folder, _ = source
    with pytest.raises(ValueError, match="inside its source"):
        FaultMount(folder, folder / "inner")


def test_missing_fuse_skips_or_fails_when_required(monkeypatch):
    monkeypatch.delenv("GPUFEED_REQUIRE_FUSE", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no /dev/fuse here"):
        require_fuse_or_skip("no /dev/fuse here")
    monkeypatch.setenv("GPUFEED_REQUIRE_FUSE", "1")
    with pytest.raises(pytest.fail.Exception, match="GPUFEED_REQUIRE_FUSE=1.*no /dev/fuse here"):
        require_fuse_or_skip("no /dev/fuse here")
