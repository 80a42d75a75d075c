"""The Spark jobs against a Kerberos (SASL) Hive Metastore (issue 28: Kerberos on the Spark side).

A real MIT KDC and the pyspark wheel's Hive Metastore 2.3 with ``hive.metastore.sasl.enabled``
(conftest ``kerberos``, ``scripts/kerberos_stack.py``, shared with test_metastore_client). The
Airflow side reaches it as a worker with a ticket does (``alice``, GSSAPI); the merge tasks get
the job principal's keytab the way users give it (``spark_submit: principal, keytab``; the SASL
settings in ``spark_conf``); the rollback DAG's job runs from the worker's ticket cache
(``use_krb5ccache``). One DAG run with the
wrong keytab (the merge task fails saying so, nothing changes), one with the right one (rows
exact, statistics the disk's), then the rollback job. The Metastore's own audit log names the
Kerberos user of every call: the jobs' calls are the job principal's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hmsclient import hmsclient

import thrift_tables
from hive_compaction.jobs import ROLLBACK_JOB

pytestmark = pytest.mark.integration

DB, TABLE = "kerberized", "events"
DATES = ["2026-07-01", "2026-07-02"]
FILES, ROWS = 4, 300


@pytest.fixture
def as_airflow_worker(kerberos, monkeypatch):
    """This process as an Airflow worker with a ticket: the realm and alice's cache."""
    for k, v in kerberos.env.items():
        monkeypatch.setenv(k, v)


def hook(kerberos):
    from hive_compaction.airflow.metastore_hook import Metastore

    return Metastore("localhost", kerberos.port, timeout_seconds=30, auth_mechanism="GSSAPI")


def job_spark_conf(kerberos) -> dict[str, str]:
    """What a user puts in spark_conf for a Kerberos Metastore when the cluster's core-site.xml
    does not already say Kerberos (spark-submit then logs in from the keytab itself)."""
    return {
        "spark.hadoop.hadoop.security.authentication": "kerberos",
        "spark.hadoop.hive.metastore.sasl.enabled": "true",
        "spark.hadoop.hive.metastore.kerberos.principal": "hive/_HOST@EXAMPLE.COM",
        "spark.driver.extraJavaOptions": kerberos.realm.java_options,
    }  # else /etc/krb5.conf


@contextlib.contextmanager
def gssapi_client(kerberos):
    """The Airflow side's Thrift client, authenticated as the worker (alice's ticket)."""
    with hook(kerberos) as h:
        yield h.get_conn()


def make_table(kerberos, spark) -> None:
    """An external ORC table made through Thrift (GSSAPI), each partition's files written by Spark."""
    thrift_tables.make_table(
        lambda: gssapi_client(kerberos), kerberos.metastore.warehouse, spark, DB, TABLE, "ORC", DATES, FILES, ROWS
    )


def partitions(kerberos) -> dict[str, tuple[str, dict]]:
    """Partition name -> (location, parameters), as the Metastore has them."""
    with hook(kerberos) as h:
        t = h.table(DB, TABLE)
        return {p.name: (p.location, dict(p.parameters)) for p in h.partitions(t)}


def files_of(location: str) -> dict[str, int]:
    folder = Path(urlsplit(location).path)
    return {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file() and not f.name.startswith((".", "_"))}


def state(kerberos, spark) -> dict[str, tuple]:
    """Per partition: (rows, a digest of every row sorted, its data files), read from the
    folder the Metastore names: a lost, changed or doubled row changes the digest."""
    out = {}
    for name, (location, _) in partitions(kerberos).items():
        rows = sorted(repr(tuple(r)) for r in spark.read.orc(location).collect())
        out[name] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest(), files_of(location))
    return out


def audit(kerberos, since: int) -> list[str]:
    """The Metastore's audit lines written after byte ``since`` of its log: ``ugi=<user> ... cmd=``."""
    with open(kerberos.metastore.audit_log, "rb") as f:
        f.seek(since)
        return [line for line in f.read().decode(errors="replace").splitlines() if "HiveMetaStore.audit" in line]


def test_the_metastore_wants_sasl(kerberos, as_airflow_worker):
    """The real thing: a plain Thrift client is refused; a GSSAPI one (alice's ticket) answered,
    and the Metastore's log names alice as the caller."""
    with pytest.raises(Exception):  # noqa: B017 - the server closes a connection that does not start with SASL
        with hmsclient.HMSClient(host="localhost", port=kerberos.port) as c:
            c.get_all_databases()
    mark = kerberos.metastore.audit_log.stat().st_size
    with hook(kerberos) as h:
        assert "default" in h.get_conn().get_all_databases()
    assert any(f"ugi={kerberos.user}" in line and "get_all_databases" in line for line in audit(kerberos, mark))


def test_kerberos_job(kerberos, as_airflow_worker, stack, spark, tmp_path):
    """The merge job with a wrong keytab fails saying so and changes nothing; with the job
    principal's keytab the DAG merges (rows exact, statistics refreshed) and every call of the
    job reaches the Metastore as that principal; the rollback job, from a ticket cache, puts the
    original files back."""
    began = time.monotonic()
    make_table(kerberos, spark)
    before = state(kerberos, spark)
    assert all(len(files) == FILES for _, _, files in before.values()) and len(before) == len(DATES)
    conn = json.dumps(
        {"conn_type": "generic", "host": "localhost", "port": kerberos.port, "extra": {"auth_mechanism": "GSSAPI"}}
    )
    env = {"AIRFLOW_CONN_HIVE_METASTORE": conn, **kerberos.env}

    def config(keytab: Path, name: str) -> Path:
        return stack.write_config(
            tmp_path / name,
            [{"name": f"{DB}.{TABLE}"}],
            spark_submit={"principal": kerberos.job_principal, "keytab": str(keytab)},
            spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **job_spark_conf(kerberos)},
        )

    t0 = time.monotonic()
    wrong = stack.run_dag(config(kerberos.other_keytab, "wrong.yaml"), **env)
    assert wrong.state == "failed", wrong.log[-6000:]
    said = f"Kerberos login failed for principal {kerberos.job_principal} with keytab {kerberos.other_keytab}"
    assert said in wrong.log and "the keytab holds no key for this principal" in wrong.log, wrong.log[-6000:]
    assert "TTransportException" not in wrong.log and "GSS initiate failed" not in wrong.log
    assert "Reason: the Spark driver's Kerberos login failed" in wrong.log  # the failure alert
    assert state(kerberos, spark) == before  # the job stopped before touching anything
    print(f"\nwrong keytab: the DAG run failed in {time.monotonic() - t0:.1f}s")

    mark = kerberos.metastore.audit_log.stat().st_size
    t0 = time.monotonic()
    cfg = config(kerberos.job_keytab, "c.yaml")
    run = stack.run_dag(cfg, **env)
    assert run.state == "success", run.log[-6000:]
    print(f"keytab: the DAG run succeeded in {time.monotonic() - t0:.1f}s")
    assert f"logged in to Kerberos as {kerberos.job_principal} for the SASL Metastore" in run.log
    after = state(kerberos, spark)
    for name, (rows, digest, files) in after.items():
        assert (rows, digest) == before[name][:2], name
        assert len(files) == 1, (name, files)
        params = partitions(kerberos)[name][1]
        assert (params.get("numFiles"), params.get("totalSize")) == ("1", str(sum(files.values()))), (name, params)
    calls = audit(kerberos, mark)
    by_job = [line for line in calls if f"ugi={kerberos.job_principal}" in line]
    # The job's own calls (partition reads, the commit's lock, the results table) as the job
    # principal; the plan and refresh as the worker's user.
    assert any("cmd=get_partition" in line for line in by_job), calls[-40:]
    assert any(f"ugi={kerberos.user}" in line for line in calls)

    rollback_from_the_ticket_cache(kerberos, stack, spark, env, run.run_id, before, tmp_path)
    print(f"kerberos_job: {time.monotonic() - began:.1f}s in the test body (three DAG runs; its stacks started before)")


def rollback_from_the_ticket_cache(kerberos, stack, spark, env: dict, run_id: str, before: dict, tmp_path) -> None:
    """The rollback DAG with ``use_krb5ccache`` and no keytab: its job logs in from the worker's
    ticket cache (KRB5CCNAME, what ``airflow kerberos`` keeps fresh) and puts the original files
    and statistics back."""
    cfg = stack.write_config(
        tmp_path / "ccache.yaml",
        [{"name": f"{DB}.{TABLE}"}],
        spark_submit={"use_krb5ccache": True},
        spark_conf={"spark.ui.enabled": "false", **job_spark_conf(kerberos)},
    )
    mark = kerberos.metastore.audit_log.stat().st_size
    t0 = time.monotonic()
    out = stack.run_dag(cfg, {"table": f"{DB}.{TABLE}", "run": run_id}, dag_id="hive_compaction_rollback", **env)
    assert out.state == "success", out.log[-6000:]
    print(f"ticket cache: the rollback DAG ran in {time.monotonic() - t0:.1f}s")
    assert "spark.kerberos.renewal.credentials=ccache" in out.log
    assert "--keytab" not in out.log and "--principal" not in out.log
    assert f"logged in to Kerberos as {kerberos.user} for the SASL Metastore" in out.log, out.log[-6000:]
    assert state(kerberos, spark) == before
    for name, (_, params) in partitions(kerberos).items():
        assert params.get("numFiles") == str(FILES), (name, params)
    assert any(f"ugi={kerberos.user}" in line and "alter_partition" in line for line in audit(kerberos, mark)), audit(
        kerberos, mark
    )[-40:]


@pytest.mark.stacks_only
def test_with_kerberos_in_core_site_spark_submit_logs_in_itself(kerberos, stack, tmp_path):
    """The cluster's way: ``hadoop.security.authentication=kerberos`` in ``core-site.xml``
    (HADOOP_CONF_DIR), only the Metastore's SASL settings in Spark's. spark-submit logs in from
    the keytab itself and the job goes on as that principal; a wrong keytab is refused by
    spark-submit, naming principal and keytab, before the job runs. (The rollback job, asked for
    a table that is not there: one Metastore call, the table's lookup.)"""
    conf_dir = tmp_path / "hadoop-conf"
    conf_dir.mkdir()
    (conf_dir / "core-site.xml").write_text(
        '<?xml version="1.0"?>\n<configuration><property><name>hadoop.security.authentication</name>'
        "<value>kerberos</value></property></configuration>\n"
    )
    spark_conf = {k: v for k, v in job_spark_conf(kerberos).items() if "security.authentication" not in k}

    def rollback(keytab: Path) -> subprocess.CompletedProcess:
        cmd = [
            "spark-submit",
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            "--principal",
            kerberos.job_principal,
            "--keytab",
            str(keytab),
            *[a for k, v in spark_conf.items() for a in ("--conf", f"{k}={v}")],
            str(ROLLBACK_JOB),
            "--table",
            "kerberized.not_there",
            "--run",
            "r",
            "--metastore",
            kerberos.metastore.uri,
        ]
        return subprocess.run(
            cmd,
            env=stack.env(HADOOP_CONF_DIR=str(conf_dir), **kerberos.env),
            capture_output=True,
            text=True,
            timeout=600,
        )

    mark = kerberos.metastore.audit_log.stat().st_size
    p = rollback(kerberos.job_keytab)
    out = p.stdout + p.stderr
    assert p.returncode == 1 and "the Metastore has no table kerberized.not_there" in out, out[-3000:]
    assert f"logged in to Kerberos as {kerberos.job_principal} for the SASL Metastore" in out
    assert any(f"ugi={kerberos.job_principal}" in line and "get_table" in line for line in audit(kerberos, mark))

    p = rollback(kerberos.other_keytab)
    assert p.returncode == 1
    assert (
        f"failure to login: for principal: {kerberos.job_principal} from keytab {kerberos.other_keytab}" in p.stderr
    ), p.stderr[-3000:]
    assert "logged in to Kerberos" not in p.stdout + p.stderr
