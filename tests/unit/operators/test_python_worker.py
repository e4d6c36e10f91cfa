"""The zip importers a statestream task drops from the worker's import cache (no Spark)."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport

from statestream.operators.python_worker import forget_zip_importers, releasing_zip_importers


def _zip_package(tmp_path) -> str:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zpkg/__init__.py", "")
        z.writestr("zpkg/sub/__init__.py", "")
        z.writestr("zpkg/sub/first.py", "VALUE = 1\n")
        z.writestr("zpkg/sub/second.py", "VALUE = 2\n")
    return str(archive)


def _zip_entries() -> list[str]:
    return [p for p, f in sys.path_importer_cache.items() if isinstance(f, zipimport.zipimporter)]


def test_dropped_importers_leave_imports_working(tmp_path, monkeypatch):
    archive = _zip_package(tmp_path)
    monkeypatch.syspath_prepend(archive)
    for name in ("zpkg", "zpkg.sub", "zpkg.sub.first", "zpkg.sub.second"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    first = importlib.import_module("zpkg.sub.first")
    assert first.VALUE == 1
    mine = [p for p in _zip_entries() if p.startswith(archive)]
    assert len(mine) >= 2  # the archive and its packages' directories inside it

    assert forget_zip_importers() >= len(mine)
    assert not _zip_entries()
    # what PySpark's worker does at every task start is now cheap, and imports still work
    importlib.invalidate_caches()
    assert importlib.import_module("zpkg.sub.second").VALUE == 2


def test_a_udf_function_releases_them_after_it_ran(tmp_path, monkeypatch):
    archive = _zip_package(tmp_path)
    monkeypatch.syspath_prepend(archive)
    monkeypatch.delitem(sys.modules, "zpkg", raising=False)

    def finish(x: int) -> int:
        importlib.import_module("zpkg")
        assert _zip_entries()
        return x + 1

    wrapped = releasing_zip_importers(finish)
    assert wrapped.__name__ == "finish"
    assert wrapped(1) == 2
    assert not _zip_entries()


class _FakeFrame:
    def __init__(self, calls: list, fail: bool) -> None:
        self.calls = calls
        self.fail = fail

    def mapInArrow(self, func, schema):
        self.calls.append(("mapInArrow", func.__name__, schema))
        return self

    def collect(self) -> list:
        self.calls.append(("collect",))
        if self.fail:
            raise RuntimeError("cancelled")
        return []


class _FakeContext:
    def __init__(self, calls: list, parallelism: int, conf: dict) -> None:
        self.calls = calls
        self.defaultParallelism = parallelism
        self.conf = conf

    def getConf(self) -> dict:
        return self.conf

    def addJobTag(self, tag: str) -> None:
        self.calls.append(("tag", tag))

    def removeJobTag(self, tag: str) -> None:
        self.calls.append(("untag", tag))

    def setJobDescription(self, text) -> None:
        self.calls.append(("description", text))


class _FakeSession:
    def __init__(self, parallelism: int = 3, conf: dict | None = None) -> None:
        self.calls: list = []
        self.fail = False
        self.sparkContext = _FakeContext(self.calls, parallelism, conf or {})

    def range(self, start: int, end: int, step: int, partitions: int) -> _FakeFrame:
        self.calls.append(("range", start, end, step, partitions))
        return _FakeFrame(self.calls, self.fail)


def _warm(spark: _FakeSession, tag: str, partitions: int, stopped=None) -> bool:
    from statestream.runtime.worker_warmup import start_worker_warm_up

    thread = start_worker_warm_up(spark, tag, partitions, stopped)
    if thread is None:
        return False
    thread.join(10)
    return True


def test_worker_warm_up_with_the_query_tag_then_not_while_the_workers_are_warm():
    spark = _FakeSession(parallelism=6)
    assert _warm(spark, "query-tag", 4)
    assert spark.calls == [
        ("tag", "query-tag"),
        ("description", "statestream: start the Python workers"),
        ("range", 0, 3, 1, 3),  # half the task slots, at most one per state partition
        ("mapInArrow", "warm_up", "ok INT"),
        ("collect",),
        ("untag", "query-tag"),
        ("description", None),
    ]
    assert not _warm(spark, "another-query", 4)  # Spark keeps idle workers for a minute


def test_the_warm_up_leaves_half_the_task_slots_to_the_first_scan():
    from statestream.runtime.worker_warmup import warm_up_tasks

    assert warm_up_tasks(2, 4) == 1  # local[2]: the scan keeps a slot
    assert warm_up_tasks(1, 4) == 1  # one slot: still one worker
    assert warm_up_tasks(8, 4) == 4
    assert warm_up_tasks(200, 4) == 4  # never more than the state partitions
    assert warm_up_tasks(8, 1) == 1


def test_worker_warm_up_tasks_and_when_it_is_skipped_or_repeated(monkeypatch):
    import threading

    from statestream.runtime import worker_warmup

    wide = _FakeSession(parallelism=200)
    assert _warm(wide, "q", 4)
    assert ("range", 0, 4, 1, 4) in wide.calls  # never more tasks than state partitions

    assert not _warm(_FakeSession(conf={"spark.python.worker.reuse": "false"}), "q", 4)

    failing = _FakeSession()
    failing.fail = True
    assert _warm(failing, "q", 4)
    failing.fail = False
    assert _warm(failing, "q", 4)  # a failed warm-up warmed nothing

    stopped = threading.Event()
    stopped.set()
    early = _FakeSession()
    assert _warm(early, "q", 4, stopped)
    assert not any(c[0] == "collect" for c in early.calls)  # stopped before its job: none runs

    warm = _FakeSession()
    assert _warm(warm, "q", 4)
    monkeypatch.setattr(worker_warmup, "WARM_FOR_S", 0.0)
    assert _warm(warm, "q", 4)  # the workers Spark let go are started again


def test_a_batch_that_ran_state_tasks_counts_as_a_warm_up(monkeypatch):
    from statestream.runtime import worker_warmup

    busy = _FakeSession()
    worker_warmup.note_python_workers_used(busy.sparkContext)
    assert not _warm(busy, "next-query", 4)  # the last batch's workers are still up
    worker_warmup.note_python_workers_used(busy.sparkContext)
    monkeypatch.setattr(worker_warmup, "WARM_FOR_S", 0.0)  # as if that batch ran long ago
    assert _warm(busy, "later-query", 4)  # Spark has let them go by now


def test_a_failed_warm_up_keeps_a_batch_note_taken_meanwhile(monkeypatch):
    import threading

    from statestream.runtime import worker_warmup

    spark = _FakeSession()
    spark.fail = True
    in_job = threading.Event()
    proceed = threading.Event()
    real_range = spark.range

    def slow_range(*args):
        in_job.set()
        proceed.wait(10)
        return real_range(*args)

    spark.range = slow_range  # type: ignore[method-assign]
    thread = worker_warmup.start_worker_warm_up(spark, "q", 4)
    assert thread is not None and in_job.wait(10)
    worker_warmup.note_python_workers_used(spark.sparkContext)  # a batch ran state tasks meanwhile
    proceed.set()
    thread.join(10)
    assert getattr(spark.sparkContext, worker_warmup._WARMED_ATTR) is not None
    assert not _warm(spark, "next-query", 4)


def test_warm_up_function_imports_the_state_modules_and_emits_nothing():
    import os
    import subprocess

    code = (
        "import sys\n"
        "import pyarrow as pa\n"
        "from statestream.runtime.worker_warmup import warm_up\n"
        "before = 'statestream.state.provider' in sys.modules\n"
        "out = list(warm_up(iter([pa.record_batch({'id': pa.array([0], pa.int64())})])))\n"
        "print(before, out, 'statestream.state.provider' in sys.modules, 'pandas' in sys.modules)\n"
    )
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "[]", "True", "True"]


class _Conf(dict):
    """A SparkConf's get/set over a dict."""

    def get(self, key, default=None):  # type: ignore[override]
        return super().get(key, default)

    def set(self, key, value):
        self[key] = value
        return self


class _SocketSession:
    """What ``use_unix_domain_sockets`` reads: the context's SparkConf, its master, the JVM's
    temporary directory and the session's conf."""

    def __init__(self, master: str = "local[2]", conf: dict | None = None, session_conf: dict | None = None, tmpdir: str = "/tmp"):
        from types import SimpleNamespace

        system = SimpleNamespace(getProperty=lambda key: tmpdir if key == "java.io.tmpdir" else None)
        self.sparkContext = SimpleNamespace(
            _conf=_Conf(conf or {}), master=master, _jvm=SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(System=system)))
        )
        self.conf = _Conf(session_conf or {})


def test_local_mode_python_workers_use_unix_domain_sockets():
    from statestream.runtime.worker_warmup import SPARK_UNIX_SOCKET_CONF, UNIX_SOCKETS_CONF, use_unix_domain_sockets

    for master in ("local", "local[2]", "local[*]", "local[2,3]"):
        spark = _SocketSession(master)
        assert use_unix_domain_sockets(spark), master
        assert spark.sparkContext._conf[SPARK_UNIX_SOCKET_CONF] == "true"
    # a cluster's executors took their conf when they started: left alone
    for master in ("local-cluster[2,1,1024]", "spark://127.0.0.1:7077", "yarn"):
        spark = _SocketSession(master)
        assert not use_unix_domain_sockets(spark), master
        assert SPARK_UNIX_SOCKET_CONF not in spark.sparkContext._conf
    # the user's own choice is kept, either way
    spark = _SocketSession(conf={SPARK_UNIX_SOCKET_CONF: "false"})
    assert not use_unix_domain_sockets(spark) and spark.sparkContext._conf[SPARK_UNIX_SOCKET_CONF] == "false"
    assert use_unix_domain_sockets(_SocketSession(conf={SPARK_UNIX_SOCKET_CONF: "true"}))
    # statestream's opt-out
    spark = _SocketSession(session_conf={UNIX_SOCKETS_CONF: "false"})
    assert not use_unix_domain_sockets(spark) and SPARK_UNIX_SOCKET_CONF not in spark.sparkContext._conf
    # a socket path Spark would make too long for the system (its directory + "/.<uuid>.sock")
    assert not use_unix_domain_sockets(_SocketSession(tmpdir="/tmp/" + "d" * 60))
    assert use_unix_domain_sockets(_SocketSession(tmpdir="/tmp/" + "d" * 50))
    assert not use_unix_domain_sockets(_SocketSession(conf={"spark.python.unix.domain.socket.dir": "/x" * 40}))


class _DaemonSession(_SocketSession):
    """What ``use_preloading_daemon`` reads besides: the workers' Python, the JVM's working
    directory and Spark's Python path."""

    def __init__(self, master: str = "local[2]", conf: dict | None = None, session_conf: dict | None = None,
                 python: str = sys.executable, cwd: str | None = None, spark_path: str = ""):
        from pathlib import Path
        from types import SimpleNamespace

        super().__init__(master, conf, session_conf)
        cwd = cwd or str(Path(__file__).resolve().parents[3])
        system = SimpleNamespace(getProperty=lambda key: cwd if key == "user.dir" else None)
        utils = SimpleNamespace(sparkPythonPath=lambda: spark_path)
        self.sparkContext._jvm = SimpleNamespace(
            java=SimpleNamespace(lang=SimpleNamespace(System=system)),
            org=SimpleNamespace(apache=SimpleNamespace(spark=SimpleNamespace(api=SimpleNamespace(python=SimpleNamespace(PythonUtils=utils))))),
        )
        self.sparkContext.pythonExec = python


def test_a_local_context_starts_its_python_workers_from_the_preloading_daemon(monkeypatch):
    from statestream.runtime import worker_warmup
    from statestream.runtime.python_daemon import MODULE
    from statestream.runtime.worker_warmup import PRELOAD_CONF, SPARK_DAEMON_MODULE_CONF, use_preloading_daemon

    spark = _DaemonSession()
    assert use_preloading_daemon(spark)
    assert spark.sparkContext._conf[SPARK_DAEMON_MODULE_CONF] == MODULE
    assert use_preloading_daemon(spark)  # the next query of the context finds it set
    # the opt-out turned on later puts PySpark's daemon back, for good
    spark.conf[PRELOAD_CONF] = "false"
    assert not use_preloading_daemon(spark) and spark.sparkContext._conf[SPARK_DAEMON_MODULE_CONF] == "pyspark.daemon"
    spark.conf[PRELOAD_CONF] = "true"
    assert not use_preloading_daemon(spark) and spark.sparkContext._conf[SPARK_DAEMON_MODULE_CONF] == "pyspark.daemon"
    # a cluster's executors took their conf when they started: left alone, without a probe
    probes = []
    real_probe = worker_warmup._workers_import_this_daemon
    monkeypatch.setattr(worker_warmup, "_workers_import_this_daemon", lambda sc: probes.append(sc) or real_probe(sc))
    for master in ("local-cluster[2,1,1024]", "spark://127.0.0.1:7077", "yarn"):
        spark = _DaemonSession(master)
        assert not use_preloading_daemon(spark), master
        assert SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    assert probes == []
    # the user's own daemon is kept
    spark = _DaemonSession(conf={SPARK_DAEMON_MODULE_CONF: "my.daemon"})
    assert not use_preloading_daemon(spark) and spark.sparkContext._conf[SPARK_DAEMON_MODULE_CONF] == "my.daemon"
    # statestream's opt-out, and a per-worker memory limit (an address-space limit)
    spark = _DaemonSession(session_conf={PRELOAD_CONF: "false"})
    assert not use_preloading_daemon(spark) and SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    spark = _DaemonSession(conf={"spark.executor.pyspark.memory": "512m"})
    assert not use_preloading_daemon(spark) and SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    assert probes == []


def test_the_daemon_stays_pyspark_s_when_the_workers_python_would_not_import_this_one(tmp_path, monkeypatch):
    import os

    from statestream.runtime import worker_warmup
    from statestream.runtime.worker_warmup import SPARK_DAEMON_MODULE_CONF, use_preloading_daemon

    probes = []
    real_probe = worker_warmup._workers_import_this_daemon
    monkeypatch.setattr(worker_warmup, "_workers_import_this_daemon", lambda sc: probes.append(sc) or real_probe(sc))
    # a Python that finds no statestream at all: no site-packages (so no editable install), no
    # PYTHONPATH, and a working directory without it
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare.chmod(0o755)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    spark = _DaemonSession(python=str(bare), cwd=str(elsewhere))
    assert not use_preloading_daemon(spark)
    assert SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    spark.sparkContext.pythonExec = sys.executable  # decided once per context: no second probe
    assert not use_preloading_daemon(spark) and len(probes) == 1
    # one that imports another statestream's daemon module first (the JVM's working directory
    # comes first for -m)
    fake = elsewhere / "statestream" / "runtime"
    fake.mkdir(parents=True)
    for f in (fake.parent / "__init__.py", fake / "__init__.py", fake / "python_daemon.py"):
        f.write_text("")
    spark = _DaemonSession(cwd=str(elsewhere))
    assert not use_preloading_daemon(spark) and SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    # one that finds it but fails importing it
    (fake / "python_daemon.py").write_text("raise ImportError('broken')\n")
    spark = _DaemonSession(cwd=str(elsewhere))
    assert not use_preloading_daemon(spark) and SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    # an interpreter that cannot be run
    spark = _DaemonSession(python=os.path.join(str(tmp_path), "no-such-python"))
    assert not use_preloading_daemon(spark) and SPARK_DAEMON_MODULE_CONF not in spark.sparkContext._conf
    assert len(probes) == 4


def _spark_zips() -> list[str]:
    from pathlib import Path

    import pyspark
    import pytest

    zips = sorted(str(p) for p in (Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))
    if not any(p.endswith("pyspark.zip") for p in zips):
        pytest.skip("this PySpark ships no pyspark.zip")
    return zips


def test_the_preloading_daemon_started_as_spark_starts_it_answers_with_its_port(tmp_path):
    """``python -m`` the module, PySpark's zips first on the path and the worker module as its
    argument, from another directory: its first four bytes on stdout are the port it listens on
    (PySpark's daemon protocol), and it ends when its stdin closes, as PySpark's does."""
    import os
    import subprocess
    import struct
    from pathlib import Path

    from statestream.runtime.python_daemon import MODULE

    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*_spark_zips(), root])}
    daemon = subprocess.Popen([sys.executable, "-m", MODULE, "pyspark.worker"], cwd=tmp_path, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        head = daemon.stdout.read(4)
        assert len(head) == 4, daemon.stderr.read()
        assert 0 < struct.unpack("!i", head)[0] < 65536
        daemon.stdin.close()
        assert daemon.wait(30) == 1
        assert daemon.stderr.read() == b""
    finally:
        daemon.kill()


def test_the_preloading_daemon_imports_the_state_modules_and_forks_with_no_zip_importer():
    """Run the daemon's ``main`` as Spark starts it (PySpark from ``pyspark.zip`` first on the
    path, the worker module in ``sys.argv``), with PySpark's ``manager`` replaced by a report of
    what a forked worker would inherit."""
    import os
    import subprocess
    from pathlib import Path

    zips = _spark_zips()
    code = (
        "import sys, zipimport\n"
        "sys.argv = ['daemon', 'pyspark.worker']\n"
        "import pyspark.daemon as d\n"
        "def report():\n"
        "    zips = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]\n"
        "    mods = ['pandas', 'pyarrow.compute', 'statestream.operators.state_step', 'statestream.state.provider']\n"
        "    print(d.__file__.find('pyspark.zip') >= 0, all(m in sys.modules for m in mods), zips)\n"
        "d.manager = report\n"
        "from statestream.runtime import python_daemon\n"
        "python_daemon.main()\n"
    )
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, root])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "[]"]


def _package_files(package: str, version: str) -> dict[str, str]:
    from statestream.runtime.python_daemon import _COMPARED

    return {name: f"# {package} {name}\n__version__ = {version!r}\n" for name in _COMPARED[package]}


def _package_dir(root, package: str, version: str) -> str:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    for name, text in _package_files(package, version).items():
        (root / package / name).write_text(text)
    return str(root)


def _package_zip(path, package: str, version: str) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        for name, text in _package_files(package, version).items():
            z.writestr(f"{package}/{name}", text)
    return str(path)


def test_spark_zips_go_behind_the_installed_packages_with_their_files(tmp_path):
    """The daemon's path: Spark's zips first (as Spark builds it), the installed PySpark and
    py4j later; each zip whose package, as the rest of the path would import it, has the same
    files goes to the end; entries that are not text stay where they are."""
    from statestream.runtime.python_daemon import installed_packages_first

    site = tmp_path / "site"
    _package_dir(site, "pyspark", "4.1.4")
    _package_dir(site, "py4j", "0.10.9.9")
    pyspark_zip = _package_zip(tmp_path / "pyspark.zip", "pyspark", "4.1.4")
    py4j_zip = _package_zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    path = [py4j_zip, pyspark_zip, b"bytes", "/project", str(site)]
    assert installed_packages_first(path) == [b"bytes", "/project", str(site), py4j_zip, pyspark_zip]


def test_spark_zips_stay_first_unless_the_package_imported_instead_is_the_same(tmp_path):
    from statestream.runtime.python_daemon import installed_packages_first

    site = tmp_path / "site"
    _package_dir(site, "pyspark", "4.1.3")  # another Spark than the zip's
    pyspark_zip = _package_zip(tmp_path / "pyspark.zip", "pyspark", "4.1.4")
    py4j_zip = _package_zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")  # py4j not installed
    path = [py4j_zip, pyspark_zip, str(site)]
    assert installed_packages_first(path) == path
    # the same version further on, but another archive comes first and would be imported
    egg = _package_zip(tmp_path / "other.egg", "pyspark", "4.1.2")
    same = tmp_path / "same"
    _package_dir(same, "pyspark", "4.1.4")
    assert installed_packages_first([pyspark_zip, egg, str(same)]) == [pyspark_zip, egg, str(same)]
    assert installed_packages_first([pyspark_zip, str(same), egg]) == [str(same), egg, pyspark_zip]
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    assert installed_packages_first([str(broken), str(same)]) == [str(broken), str(same)]
    assert installed_packages_first(["/project"]) == ["/project"]


def _run_daemon_import(tmp_path, extra_path: list[str]) -> list[str]:
    """Run ``python_daemon._pyspark_daemon`` in a new Python whose path is Spark's (its zips
    first), then ``extra_path``: where pyspark and py4j came from, and whether importing the
    daemon module had imported PySpark already."""
    import os
    import subprocess
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[3])
    code = (
        "import sys\n"
        "sys.argv = ['daemon', 'pyspark.worker']\n"
        "from statestream.runtime import python_daemon\n"
        "before = 'pyspark' in sys.modules\n"
        "d = python_daemon._pyspark_daemon()\n"
        "import py4j\n"
        "print(before, d.__file__, py4j.__file__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*_spark_zips(), root, *extra_path])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_daemon_imports_the_installed_pyspark_behind_spark_s_zips(tmp_path):
    """As Spark starts it (its zips first on the path), the daemon imports PySpark and py4j from
    this Python's installed packages, which have the zips' files; importing statestream's
    daemon module imported no PySpark before that choice."""
    import py4j
    import pyspark

    before, daemon_file, py4j_file = _run_daemon_import(tmp_path, [])
    assert before == "False"
    assert ".zip" not in daemon_file and daemon_file.startswith(os.path.dirname(pyspark.__file__)), daemon_file
    assert py4j_file == py4j.__file__


def test_the_daemon_falls_back_to_spark_s_zips_when_the_installed_pyspark_does_not_import(tmp_path):
    """An installed PySpark with the zip's compared files that fails to import (a broken
    install): the daemon imports Spark's zip as Spark would have, rather than fail to start."""
    broken = tmp_path / "broken"
    (broken / "pyspark").mkdir(parents=True)
    zips = _spark_zips()
    spark_zip = next(z for z in zips if z.endswith("pyspark.zip"))
    from statestream.runtime.python_daemon import _COMPARED

    with zipfile.ZipFile(spark_zip) as z:
        for name in _COMPARED["pyspark"]:
            (broken / "pyspark" / name).write_bytes(z.read(f"pyspark/{name}"))
    (broken / "pyspark" / "__init__.py").write_text("raise ImportError('a broken install')\n")
    before, daemon_file, _ = _run_daemon_import(tmp_path, [str(broken)])
    assert before == "False" and daemon_file.startswith(spark_zip), daemon_file
