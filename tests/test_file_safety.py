"""Outputs never replace what they should not (issue 28, items 1-4 and the wrong exits of 14).

- every input is resolved to the file it reads before it is compared with an output
  (``--model-config DIR`` reads ``DIR/config.json``);
- a regular file or a new name is replaced atomically, keeping the file's permissions; a
  link is written through (the link stays); a device or a FIFO is written into, never
  replaced; a directory or a socket is refused in one line naming the option;
- temporary files have random names and never follow a planted link;
- ``simulate --out`` swaps a whole new set in: an interruption leaves the old set whole.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from chainpipe.cli import main
from chainpipe.io import atomic_write
from helpers import without_warnings

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
WORKED = DATA / "valid" / "worked_example.json"
WORKED_PLAN = DATA / "valid" / "worked_example.plan.json"
CLUSTER = ROOT / "examples" / "metro-cluster.toml"
SIMULATE = ["simulate", "--preset", "tiny", "--jobs", "4", "-q"]


def call(capsys, *args) -> tuple[int, str, str]:
    """Run the CLI in-process: exit status, stdout, stderr (without plausibility warnings)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, without_warnings(err)


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry below ``directory``: file bytes, a link's target, or its kind."""
    def entry(p: Path):
        if p.is_symlink():
            return os.readlink(p)
        mode = p.lstat().st_mode
        return p.read_bytes() if stat.S_ISREG(mode) else stat.filemode(mode)[0]

    return {str(p.relative_to(directory)): entry(p) for p in sorted(directory.rglob("*"))}


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A directory (the current one) with ``inst.json`` and ``plan.json``."""
    (tmp_path / "inst.json").write_bytes(WORKED.read_bytes())
    (tmp_path / "plan.json").write_bytes(WORKED_PLAN.read_bytes())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def export(capsys, output) -> tuple[int, str]:
    """``export inst.json plan.json --to ranks -o OUTPUT``: exit status and stderr."""
    code, _, err = call(capsys, "export", "inst.json", "plan.json", "--to", "ranks", "-o", output)
    return code, err


def ranks_text(capsys) -> str:
    """What ``export --to ranks`` prints on stdout."""
    code, out, _ = call(capsys, "export", "inst.json", "plan.json", "--to", "ranks")
    assert code == 0
    return out


# --------------------------------------------------------------------------- 1. inputs resolved
@pytest.mark.parametrize("source", [["--cluster", CLUSTER], ["--preset", "hybrid-small"]],
                         ids=["cluster", "preset"])
@pytest.mark.parametrize("output", ["mcopy/config.json", "mcopy/./config.json", "link.json"])
def test_generate_never_writes_over_the_config_of_a_model_config_directory(
        capsys, work, source, output):
    (work / "mcopy").mkdir()
    (work / "mcopy" / "config.json").write_bytes((DATA / "models" / "gpt2" / "config.json")
                                                 .read_bytes())
    (work / "link.json").symlink_to("mcopy/config.json")
    before = snapshot(work)
    code, out, err = call(capsys, "generate", *source, "--model-config", "mcopy", "-o", output)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"-o/--output: {output} is an input of this command; refusing to write over it"]
    assert snapshot(work) == before


def test_tls_files_are_inputs_of_solve(capsys, work):
    (work / "agents.json").write_text("{}")
    (work / "key.pem").write_text("secret")
    code, _, err = call(capsys, "solve", "inst.json", "--solver", "cdynp", "--agents",
                        "agents.json", "--tls-ca", "key.pem", "--tls-cert", "key.pem",
                        "--tls-key", "key.pem", "--plan-out", "key.pem")
    assert code == 2
    assert err.splitlines() == [
        "--plan-out: key.pem is an input of this command; refusing to write over it"]
    assert (work / "key.pem").read_text() == "secret"


# --------------------------------------------------------------------------- 2. what a target is
def test_an_output_link_is_written_through_and_stays_a_link(capsys, work):
    (work / "target.txt").write_text("old")
    (work / "link.txt").symlink_to("target.txt")
    assert export(capsys, "link.txt")[0] == 0
    assert os.readlink(work / "link.txt") == "target.txt"
    assert (work / "target.txt").read_text() == ranks_text(capsys)


def test_a_dangling_link_is_written_through(capsys, work):
    (work / "link.txt").symlink_to("new.txt")
    assert export(capsys, "link.txt")[0] == 0
    assert os.readlink(work / "link.txt") == "new.txt"
    assert (work / "new.txt").read_text() == ranks_text(capsys)


def read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A thread reading the FIFO ``path`` to its end; what it read goes into the list."""
    got: list[bytes] = []

    def drain():
        with open(path, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return reader, got


@pytest.mark.parametrize("name", ["fifo", "link-to-fifo"])
def test_a_fifo_is_written_into_and_never_replaced(capsys, work, name):
    os.mkfifo(work / "fifo")
    if name != "fifo":
        (work / name).symlink_to("fifo")
    reader, got = read_fifo(work / "fifo")
    assert export(capsys, name)[0] == 0
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(work / "fifo").st_mode)
    assert name == "fifo" or os.readlink(work / name) == "fifo"
    assert got == [ranks_text(capsys).encode()]
    assert sorted(p.name for p in work.iterdir()) == sorted({"fifo", name, "inst.json",
                                                             "plan.json"})


def test_a_link_to_a_character_device_stays_and_the_device_is_written_into(capsys, work):
    """``-o LINK`` with ``LINK -> /dev/null``: old code replaced the link, never the device."""
    (work / "null").symlink_to(os.devnull)
    assert export(capsys, "null")[0] == 0
    assert os.readlink(work / "null") == os.devnull
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_an_existing_file_keeps_its_permissions_and_a_new_one_follows_the_umask(capsys, work):
    (work / "kept.txt").write_text("old")
    os.chmod(work / "kept.txt", 0o604)  # neither mkstemp's 0600 nor what the umask gives
    old = os.umask(0o027)
    try:
        assert export(capsys, "kept.txt")[0] == 0
        assert export(capsys, "new.txt")[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(work / "kept.txt").st_mode) == 0o604
    assert stat.S_IMODE(os.stat(work / "new.txt").st_mode) == 0o640
    assert (work / "kept.txt").read_text() == ranks_text(capsys)


def test_a_socket_is_refused_in_one_line(capsys, work):
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind("sock")
        code, err = export(capsys, "sock")
    finally:
        sock.close()
    assert code == 2
    assert err.splitlines() == ["-o/--output: sock is a socket; give a file name"]
    assert stat.S_ISSOCK(os.lstat(work / "sock").st_mode)


# --------------------------------------------------------------------------- 14. wrong exits
def plain(capsys, work, argv, message):
    """``argv`` exits 2 with the one line ``message`` and changes nothing in ``work``."""
    before = snapshot(work)
    code, out, err = call(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines() == [message]
    assert snapshot(work) == before


@pytest.mark.parametrize("argv, message", [
    (["export", "inst.json", "plan.json", "--to", "ranks", "-o", "d"],
     "-o/--output: d is a directory; give a file name"),
    (["export", "inst.json", "plan.json", "--to", "megatron", "--nearest-out", "d"],
     "--nearest-out: d is a directory; give a file name"),
    (["plot", "inst.json", "plan.json", "-o", "d"], "--output: d is a directory; give a file name"),
    (["plot", "inst.json", "plan.json", "-o", "g.png", "--data", "d"],
     "--data: d is a directory; give a file name"),
    (["solve", "inst.json", "--plan-out", "d"], "--plan-out: d is a directory; give a file name"),
    (["solve", "inst.json", "-O", "write_model=d", "--solver", "cpsat"],
     "-O write_model: d is a directory; give a file name"),
    ([*SIMULATE, "--out", "f"], "--out: f is a file; give a directory"),
    (["compare", "inst.json", "--solvers", "dp", "--out", "f"],
     "--out: f is a file; give a directory"),
    (["split", "inst.json", "f"], "OUTDIR: f is a file; give a directory"),
    (["export", "inst.json", "plan.json", "--to", "ranks", "-o", "loop"],
     "-o/--output: loop: Too many levels of symbolic links"),
    (["solve", "inst.json", "--plan-out", "f/plan.json"],
     "--plan-out: f/plan.json: Not a directory"),
], ids=["export-dir", "nearest-out-dir", "plot-dir", "plot-data-dir", "plan-out-dir",
        "write-model-dir", "simulate-file", "compare-file", "split-file", "export-loop",
        "plan-out-below-a-file"])
def test_an_output_of_the_wrong_kind_exits_2_with_one_line(capsys, work, argv, message):
    (work / "d").mkdir()
    (work / "f").write_text("mine")
    (work / "loop").symlink_to("loop")
    plain(capsys, work, argv, message)


# --------------------------------------------------------------------------- 3. temporaries
def test_a_planted_link_at_the_old_temporary_name_is_never_followed(capsys, work):
    (work / "victim.txt").write_text("victim")
    (work / f".out.json.tmp{os.getpid()}").symlink_to("victim.txt")
    assert export(capsys, "out.json")[0] == 0
    assert (work / "victim.txt").read_text() == "victim"
    assert (work / "out.json").read_text() == ranks_text(capsys)


def test_temporary_names_are_random_new_files_and_removed_on_failure(tmp_path):
    seen = []

    def fail(tmp: Path):
        seen.append((tmp, tmp.is_file(), stat.S_IMODE(tmp.stat().st_mode)))
        raise OSError("disk full")

    for _ in range(2):
        with pytest.raises(OSError, match="disk full"):
            atomic_write(tmp_path / "out.json", fail)
    (a, a_new, _), (b, _, _) = seen
    assert a != b and a.parent == tmp_path and a.name.startswith(".out.json.")
    assert a_new and a.name.endswith(".tmp")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- 4. simulate
def test_simulate_replaces_a_set_it_wrote_whole_and_follows_a_link(capsys, tmp_path):
    out = tmp_path / "sim"
    assert call(capsys, *SIMULATE, "--seed", "7", "--out", out)[0] == 0
    (tmp_path / "link").symlink_to("sim")
    os.chmod(out, 0o750)
    assert call(capsys, *SIMULATE, "--seed", "8", "--out", tmp_path / "link")[0] == 0
    assert os.readlink(tmp_path / "link") == "sim"
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert ",tiny,8" in (out / "summary.csv").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "sim"]


def test_simulate_never_replaces_a_directory_holding_other_files(capsys, tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    plain(capsys, tmp_path, [*SIMULATE, "--out", out],
          f"--out: {out} holds notes.txt, which simulate does not write; give a new "
          "directory or one simulate wrote (it is replaced whole)")


def test_a_failure_while_simulate_writes_leaves_the_old_set(capsys, tmp_path, monkeypatch):
    from chainpipe.online import report

    out = tmp_path / "sim"
    assert call(capsys, *SIMULATE, "--seed", "7", "--out", out)[0] == 0
    before = snapshot(tmp_path)

    def broken(runs, path):
        raise OSError("disk full")

    monkeypatch.setattr(report, "plot_iteration_times", broken)
    assert call(capsys, *SIMULATE, "--seed", "8", "--out", out)[0] == 1
    assert snapshot(tmp_path) == before  # the old set whole, no temporary directory left


def test_sigterm_while_simulate_writes_never_leaves_a_mixed_set(capsys, tmp_path):
    """SIGTERM after ``jobs.csv`` and ``summary.csv`` of seed 8 are written, before the
    figures: ``--out`` still holds seed 7's set, byte for byte."""
    out = tmp_path / "sim"
    assert call(capsys, *SIMULATE, "--seed", "7", "--out", out)[0] == 0
    before = snapshot(out)
    script = textwrap.dedent(f"""
        import os, signal, sys
        from chainpipe.online import report
        report.plot_utilisation = lambda *a: os.kill(os.getpid(), signal.SIGTERM)
        from chainpipe.cli import main
        sys.exit(main({[*SIMULATE, "--seed", "8", "--out", str(out)]!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          timeout=120)
    assert proc.returncode == -15, proc.stderr.decode()
    assert snapshot(out) == before


def test_simulate_never_replaces_the_current_directory(capsys, tmp_path, monkeypatch):
    out = tmp_path / "sim"
    assert call(capsys, *SIMULATE, "--out", out)[0] == 0
    monkeypatch.chdir(out)
    plain(capsys, tmp_path, [*SIMULATE, "--out", "."],
          "--out: . holds the current directory; give another directory (it is replaced whole)")
