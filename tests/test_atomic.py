"""stages/io/atomic.py: umask permissions on the result, a recognisable temporary name, and removal of
stale temporaries a hard kill left behind."""
import os
import stat
import time

import pytest

from stages.io import atomic
from stages.io.atomic import STALE_SECONDS, TMP_PREFIX, TMP_SUFFIX, atomic_path, write_text


@pytest.fixture
def umask():
    """Set a umask for the test and restore the previous one."""
    saved = os.umask(0o022)
    os.umask(saved)

    def use(mask):
        os.umask(mask)
        return mask

    yield use
    os.umask(saved)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_files_get_umask_permissions(tmp_path, umask, mask):
    umask(mask)
    assert atomic.current_umask() == mask
    write_text(tmp_path / "a.txt", "x")
    assert mode(tmp_path / "a.txt") == 0o666 & ~mask
    with atomic_path(tmp_path / "d", directory=True) as tmp:
        (tmp / "f").write_text("y")
    assert mode(tmp_path / "d") == 0o777 & ~mask
    with atomic_path(tmp_path / "b.bin") as tmp:  # a writer that replaces the temporary file
        tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    assert mode(tmp_path / "b.bin") == 0o666 & ~mask


def test_temporary_names_are_recognisable_and_cleaned_on_failure(tmp_path):
    with atomic_path(tmp_path / "out.csv") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(f"{TMP_PREFIX}out.csv.") and tmp.name.endswith(TMP_SUFFIX)
        assert f"-{os.getpid()}." in tmp.name
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "fail.csv") as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def _age(path, seconds):
    then = time.time() - seconds
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (then, then))
    os.utime(path, (then, then))


def test_stale_temporaries_are_removed_on_the_next_write(tmp_path):
    host = atomic._host()
    old_file = tmp_path / f"{TMP_PREFIX}x.csv.{host}-999999999.abc123.tmp"   # dead writer, 2 h old
    old_dir = tmp_path / f"{TMP_PREFIX}hub.otherhost-12.zz_9.tmp"           # another machine, 2 h old
    fresh = tmp_path / f"{TMP_PREFIX}y.csv.{host}-999999999.def456.tmp"     # dead writer here, recent: removed
    live = tmp_path / f"{TMP_PREFIX}z.csv.{host}-{os.getpid()}.ghi789.tmp"  # 2 h old, writer alive
    busy = tmp_path / f"{TMP_PREFIX}w.otherhost-9.jkl.tmp"                  # old dir, a file inside written now
    recent = tmp_path / f"{TMP_PREFIX}v.otherhost-9.mno.tmp"                 # another machine, recent: kept
    mine = tmp_path / ".notes.tmp"                                          # not ours: never touched
    old_file.write_text("junk")
    old_dir.mkdir()
    (old_dir / "weights").write_text("junk")
    fresh.write_text("junk")
    live.write_text("junk")
    busy.mkdir()
    (busy / "part").write_text("junk")
    mine.write_text("keep")
    recent.write_text("junk")
    for path in (old_file, old_dir, live, mine):
        _age(path, 2 * STALE_SECONDS)
    _age(busy, 2 * STALE_SECONDS)
    os.utime(busy / "part")

    write_text(tmp_path / "result.txt", "ok")
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"result.txt", live.name, busy.name, recent.name, mine.name}

    other = tmp_path / "sub"
    other.mkdir()
    stale_elsewhere = other / f"{TMP_PREFIX}q.{host}-999999999.x.tmp"
    stale_elsewhere.write_text("junk")
    write_text(tmp_path / "again.txt", "ok")
    assert stale_elsewhere.exists()  # only the target's own directory is cleaned


def test_output_set_is_all_or_nothing(tmp_path):
    from stages.io.atomic import output_set, write_text

    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError):
        with output_set():
            write_text(tmp_path / "a.txt", "new a")
            write_text(tmp_path / "b.txt", "new b")
            assert (tmp_path / "a.txt").read_text() == "old a"  # held back until the set is complete
            raise RuntimeError("a later input fails")
    assert (tmp_path / "a.txt").read_text() == "old a" and not (tmp_path / "b.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temporary file left
    with output_set():
        write_text(tmp_path / "a.txt", "new a")
        write_text(tmp_path / "b.txt", "new b")
    assert (tmp_path / "a.txt").read_text() == "new a" and (tmp_path / "b.txt").read_text() == "new b"


def test_events_stage_writes_nothing_when_a_later_input_fails(measured_workdir):
    """Issue: events left half an output folder when a later run's table was corrupt."""
    import yaml

    from stages import paths

    from stages.pipeline import events, extract, measure, train

    workdir = measured_workdir  # seed 0 trained and measured (tests/conftest.py); seed 1 here
    run = ["--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "1"]
    train.main(run)
    extract.main(run)
    measure.main(run)
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["grid"]["seeds"] = [0, 1]
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    bad = paths.measures_file("copy-easy-p405k-s1")
    bad.write_text(bad.read_text()[:500])  # cut: the second run's table is corrupt
    with pytest.raises(SystemExit):
        events.main([])
    assert not (paths.DATA / "events").exists() and not paths.METRICS.exists()
    assert not (paths.PLOTS / "runs").exists() and not (paths.PLOTS / "figures").exists()
