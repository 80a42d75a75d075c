"""One long-lived Airflow process that runs ``airflow dags test`` for the tests, run after run.

Each ``airflow dags test`` command spends about 7 s of CPU before its first task does anything:
importing Airflow and building the in-process execution API (FastAPI/Cadwyn routes). The tests
run the DAG some fifty times, so the harness (``harness.Stack.run_dag``) keeps this process
instead: Airflow is imported once, and every request runs the same CLI code path
(``airflow dags test`` parsed by Airflow's own parser, the DAG file parsed again from the dags
folder, ``dag.test()``), with the request's environment (config path, connections, fault
hooks) and its output in the request's log file. Requests that change Airflow's own settings
(``AIRFLOW__*``), which Airflow reads only at import, are left to the plain command by the
harness.

Protocol: ``{"ready": true}`` once Airflow is imported; then one JSON object per line on
stdin, ``{"env": {...}, "args": [...], "log": path}``, and one JSON line back on the original
stdout, ``{"returncode": n}``. ``Client`` is the harness's side.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from pathlib import Path


def run(request: dict) -> int:
    from airflow.cli import cli_parser

    os.environ.clear()
    os.environ.update(request["env"])
    # The request's PYTHONPATH, as a new process would have it (a notifier module of the tests).
    added = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = added
    args = cli_parser.get_parser().parse_args(["dags", "test", *request["args"]])
    try:
        args.func(args)
        return 0
    except SystemExit as e:  # "DagRun failed", as the command exits with it
        print(e, file=sys.stderr)
        return e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the command would die with this traceback
        traceback.print_exc()
        return 1
    finally:
        for p in added:
            sys.path.remove(p)


def main() -> int:
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what is printed outside a request goes to this process's log, not the answers
    import airflow.cli.commands.dag_command  # noqa: F401 - the import the requests share

    answer.write(json.dumps({"ready": True}) + "\n")
    answer.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        try:
            code = run(request)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, log):
                os.close(fd)
        answer.write(json.dumps({"returncode": code}) + "\n")
        answer.flush()
    return 0


class Client:
    """The harness's side: starts the process on first use, sends runs, stops it."""

    def __init__(self, env: dict[str, str], cwd: Path):
        self.env, self.cwd = env, cwd
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def airflow_settings(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k.startswith("AIRFLOW__")}

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with ``env`` can go to this process (Airflow's settings are read once)."""
        return self.airflow_settings(env) == self.airflow_settings(self.env)

    def _read(self, timeout: float) -> dict:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.stop()
            raise TimeoutError(f"the Airflow process for dags test did not answer within {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            raise RuntimeError(
                f"the Airflow process for dags test exited with {code}; see {self.cwd / 'dag_runner.log'}"
            )
        return json.loads(line)

    def start(self) -> float:
        """Start the process; the seconds until Airflow was imported."""
        t0 = time.monotonic()
        with open(self.cwd / "dag_runner.log", "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                env=self.env,
                cwd=self.cwd,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._read(300)
        return time.monotonic() - t0

    def run(self, env: dict[str, str], args: list[str], log: Path, timeout: float = 900) -> tuple[int, str]:
        """(return code, output) of ``airflow dags test <args>`` with ``env``."""
        self.proc.stdin.write(json.dumps({"env": env, "args": args, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        code = self._read(timeout)["returncode"]
        return code, log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


if __name__ == "__main__":
    sys.exit(main())
