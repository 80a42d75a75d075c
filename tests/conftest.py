"""The real local stack for integration tests: a Hive Metastore service, Spark and Airflow.

One Metastore (on a free loopback port, state in a temporary folder), one Spark session, one
Airflow home and one long-lived Airflow process for ``airflow dags test`` serve each test process
(``make test`` runs two: pytest-xdist), started by the first test that needs them; each test makes
its own database and tables. The suite's budget (``scripts/suite_budget.py``) is registered here.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "scripts")]

import postgres
from build_engine import JAR as ENGINE_JAR
from harness import Stack, quick_submit_opts
from matrix_sampling import deselect_undrawn
from suite_budget import SuiteBudget, started

# pytest-xdist hands out whole modules (--dist loadfile: module fixtures are made once) in
# collection order (--no-loadscope-reorder): the longest first, so that no long one starts last.
LONGEST_FIRST = (
    "test_safety_kills",
    "test_safety_actors",
    "test_yarn_cluster",
    "test_hive_metastores",
    "test_hdfs",
    "test_s3a",
    "test_location_switch",
    "test_benchmark_merge_smoke",
    "test_safety",
    "test_end_to_end",
    "test_commit_false_success",
    "test_as_a_user",
    "test_memory",
    "test_commit_protocol",
    "test_celery_queues",
    "test_merge_modes",
    "test_spark35",
    "test_rollback_and_cleanup",
    "test_standalone_cluster",
    "test_viewfs",
    "test_layouts",
    "test_install",
    "test_rollback_dag",
    "test_metastore_lock",
    "test_operations",
    "test_stale_statistics",
    "test_kerberos_job",
    "test_benchmark_smoke",
    "test_metastore_client",
    "test_object_store",
)


def pytest_collection_modifyitems(config, items):
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.module.__name__, len(rank)))
    deselect_undrawn(config, items)


# Every Spark JVM the tests start (the stacks' sessions in the test processes, the table scripts,
# the benchmarks' smokes) starts as the stacks' jobs do: C1, one GC thread and, once it is made,
# the class archive (scripts/harness.py). A SPARK_SUBMIT_OPTS of the caller's is kept.
_CALLERS_SUBMIT_OPTS = os.environ.get("SPARK_SUBMIT_OPTS")


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start anything
def pytest_runtest_setup(item):
    if _CALLERS_SUBMIT_OPTS is None:
        os.environ["SPARK_SUBMIT_OPTS"] = quick_submit_opts()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controlling process (or the only one)
        config.pluginmanager.register(SuiteBudget(config, ROOT / ".test-report"), "suite_budget")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# A run stopped with SIGTERM (a CI timeout, kill) still tears its stack down (PostgreSQL, the
# Metastore): pytest finishes the fixtures of an interrupted session.
signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """PostgreSQL behind the Metastore and Airflow where Debian's packages are installed (CI
    installs them), else Derby and SQLite; tests that need PostgreSQL skip then, saying why."""
    why = postgres.missing()
    if why:
        print(f"\nnote: the stack runs on Derby and SQLite: {why}")
    s = Stack(
        tmp_path_factory.mktemp("stack"),
        use_postgres=why is None,
        quick_jvm_start=True,
        object_store=True,
        persistent_airflow=True,
    )
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def kerberos(tmp_path_factory):
    """A real MIT KDC (realm EXAMPLE.COM), a Hive Metastore 2.3 that wants SASL (Kerberos), a user
    with a ticket and a job principal with a keytab (``scripts/kerberos_stack.py``), started once
    per test process for the Airflow side's client (test_metastore_client) and the Spark jobs
    (tests/stacks/test_kerberos_job). A Metastore of its own: SASL is a setting of the whole
    server. Skipped, saying why, without Debian's krb5-kdc, krb5-admin-server and krb5-user and
    the ``kerberos`` module (pip; builds against libkrb5-dev)."""
    from kerberos_stack import KerberosStack, missing

    why = missing()
    if why:
        if os.environ.get("SUITE_REQUIRE_STACKS"):  # CI (.ci/run): the real stacks may not skip
            pytest.fail(f"no Kerberos test: {why} (SUITE_REQUIRE_STACKS is set)", pytrace=False)
        pytest.skip(f"no Kerberos test: {why}")
    k = KerberosStack(tmp_path_factory.mktemp("kerberos"))
    k.start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture
def fault_injection():
    """The tests' fault injector (``scripts/fault_hooks.py``) around the storage and Metastore
    classes in this process, for a test that runs commit code here; the variables it reads are
    set with ``monkeypatch.setenv``."""
    import fault_hooks

    fault_hooks.install()
    yield fault_hooks
    fault_hooks.uninstall()


@pytest.fixture
def matrix_rng():
    """(seed, random.Random) for a safety matrix's sample: a new seed each run, printed in the
    suite's summary; ``SUITE_MATRIX_SEED=<seed>`` replays it (``matrix_sampling.note_sample``)."""
    import random

    from reliability import matrix_seed

    seed = matrix_seed()
    return seed, random.Random(seed)


@pytest.fixture(scope="module")
def spark(request):
    """A local Spark session for tests of the JVM-side pieces: the integration stack's session
    when this run uses the stack at all (shared, left running), else one of its own for the
    module. Deciding by the whole run, not by what is running now, keeps the order of modules
    from mattering: a plain session made first would be the one the stack's ``getOrCreate``
    returned later (without Hive support), and be stopped under it."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    if any("stack" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield request.getfixturevalue("stack").spark
        return
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    with started("Spark session without Hive (in the test process)"):
        s = (
            SparkSession.builder.master("local[2]")
            .appName("hive-compaction-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.jars", str(ENGINE_JAR) if ENGINE_JAR.exists() else "")
            .getOrCreate()
        )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
