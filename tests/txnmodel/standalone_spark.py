"""A real standalone Spark cluster for tests: one master and some workers on 127.0.0.1, started from
the launcher that ships with the installed PySpark (``pyspark/bin/spark-class``), every port chosen
by the operating system (``--port 0``, ``--webui-port 0``, the REST submission server off), logs
and work folders in a private temporary folder.  The processes are this test's own: stopped by
their process ids when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["standalone_cluster"]

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = re.compile(r"Successfully registered with master")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wait_for(log: Path, pattern: re.Pattern[str], process: subprocess.Popen[bytes], seconds: float) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = pattern.search(text)
        if found:
            return found
        if process.poll() is not None:
            raise RuntimeError(f"{log.name}: the process exited ({process.returncode}):\n{text[-3000:]}")
        time.sleep(0.25)
    raise TimeoutError(f"{log.name}: no {pattern.pattern!r} within {seconds:.0f} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory`` each); yield the
    master's ``spark://127.0.0.1:PORT``; stop them all at the end."""
    home = _spark_home()
    launcher = home / "bin" / "spark-class"
    folder = Path(tempfile.mkdtemp(prefix="txnmodel-cluster-"))
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(folder),
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
    )
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = folder / f"{name}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen([str(launcher), *args], stdout=handle, stderr=subprocess.STDOUT, env=env)
        processes.append(process)
        return process, log

    try:
        master, log = start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"
        )
        url = _wait_for(log, _MASTER_URL, master, 180).group(1)
        for number in range(workers):
            work = folder / f"work-{number}"
            work.mkdir()
            worker, log = start(
                f"worker-{number}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(work),
            )
            _wait_for(log, _REGISTERED, worker, 180)
        yield url
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)
