"""The Spark driver's Kerberos login, before a job's first Metastore call.

A SASL (Kerberos) Metastore answers only a client whose Hadoop user holds Kerberos credentials:
Spark's Hive 2.3 client opens its connection as ``UserGroupInformation.getCurrentUser()``. Where
the cluster's ``core-site.xml`` (``HADOOP_CONF_DIR``) sets ``hadoop.security.authentication`` to
``kerberos``, spark-submit has logged the driver in already (``--principal``/``--keytab``, else
the ticket cache). Where that is set only in Spark's settings
(``spark.hadoop.hadoop.security.authentication``), spark-submit has not: it reads those after its
login. The driver then logs in here, from ``spark.kerberos.principal`` and
``spark.kerberos.keytab`` (what spark-submit's ``--principal`` and ``--keytab`` set), else from
the ticket cache (``KRB5CCNAME``). A failed login stops the job before it touches anything, with
a message naming the principal and keytab (or the cache) instead of the Metastore client's
``TTransportException: GSS initiate failed``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

# Hadoop's own words for the usual causes, and what to do about each.
_HINTS = (
    (
        "Unable to obtain password from user",
        "the keytab holds no key for this principal (another principal's keytab?): list it with `klist -kt KEYTAB`",
    ),
    (
        "Checksum failed",
        "the keytab's key is not the KDC's (exported before the principal's key changed?): "
        "export it again (kadmin ktadd)",
    ),
    ("Client not found in Kerberos database", "the KDC does not know this principal"),
    ("Cannot locate KDC", "no KDC for the principal's realm in krb5.conf (java.security.krb5.conf)"),
    ("Cannot contact any KDC", "the KDC does not answer"),
    ("Clock skew too great", "this host's clock differs from the KDC's"),
)


class KerberosLoginFailed(RuntimeError):
    """The driver could not log in to Kerberos; the message says with what and why."""


def login(spark: Any) -> str | None:
    """Log the driver in where its Metastore wants SASL (``hive.metastore.sasl.enabled``) and
    it holds no Kerberos credentials yet; the user it is logged in as (None: no SASL needed).
    KerberosLoginFailed when it cannot."""
    jvm = spark._jvm
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf
    conf = hive_conf(spark._jsc.hadoopConfiguration(), hive_conf._java_lang_class)  # hive-site.xml too
    if not conf.getBoolean("hive.metastore.sasl.enabled", False):
        return None
    ugi = jvm.org.apache.hadoop.security.UserGroupInformation
    if ugi.getCurrentUser().hasKerberosCredentials() or _metastore_token(jvm, conf):
        return str(ugi.getCurrentUser().getUserName())  # spark-submit logged in, or the cluster's AM
    principal = spark.sparkContext.getConf().get("spark.kerberos.principal", None)
    keytab = spark.sparkContext.getConf().get("spark.kerberos.keytab", None)
    source = (
        f"principal {principal} with keytab {keytab} (spark-submit --principal/--keytab: the "
        "operator's principal and keytab)"
        if principal and keytab
        else f"the ticket cache {os.environ.get('KRB5CCNAME') or '(the default: no KRB5CCNAME)'}"
    )
    if not ugi.isSecurityEnabled():
        raise KerberosLoginFailed(
            f"Kerberos login failed for {source}: the Metastore wants SASL (hive.metastore.sasl.enabled=true) "
            "but Hadoop's hadoop.security.authentication is not kerberos: set it in the cluster's core-site.xml "
            "or as spark.hadoop.hadoop.security.authentication=kerberos in spark_conf"
        )
    if keytab and not os.path.isfile(keytab):
        raise KerberosLoginFailed(f"Kerberos login failed for {source}: no such keytab file on the driver")
    try:
        if principal and keytab:
            ugi.loginUserFromKeytab(principal, keytab)
        else:
            ugi.loginUserFromSubject(None)  # Hadoop's Kerberos login reads the ticket cache
    except Exception as e:  # noqa: BLE001 - py4j's error, whatever Hadoop raised
        raise KerberosLoginFailed(f"Kerberos login failed for {source}: {_reason(e)}") from None
    user = ugi.getCurrentUser()
    if not user.hasKerberosCredentials():
        raise KerberosLoginFailed(
            f"Kerberos login failed for {source}: no Kerberos ticket there; run kinit (or "
            "Airflow's `airflow kerberos`), or give the job a principal and keytab "
            "(spark_submit: principal, keytab)"
        )
    return str(user.getUserName())


def _metastore_token(jvm: Any, conf: Any) -> bool:
    """Whether the driver holds a Metastore delegation token that Hive's client picks (as its
    ``open`` does: by ``hive.metastore.token.signature``), e.g. one a YARN driver was given at
    submission: the client then authenticates with it (SASL DIGEST) and needs no login."""
    signature = conf.get("hive.metastore.token.signature") or ""
    return jvm.org.apache.hadoop.hive.shims.Utils.getTokenStrForm(signature) is not None


def logged_in(spark: Any) -> bool:
    """``login`` for a job's entry point: the user logged in as, in the log; False when the login
    failed, said on stderr as ``error: ...`` (the job then stops before touching anything)."""
    try:
        user = login(spark)
    except KerberosLoginFailed as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return False
    if user:
        logging.getLogger("hive_compaction").info("logged in to Kerberos as %s for the SASL Metastore", user)
    return True


def _reason(error: Exception) -> str:
    """The Java exception's own message chain, with a hint where the cause is a known one."""
    java = getattr(error, "java_exception", None)
    parts, seen = [], 0
    while java is not None and seen < 5:
        parts.append(" ".join(str(java.toString()).split()))  # Hadoop's messages hold line breaks
        java, seen = java.getCause(), seen + 1
    text = " <- ".join(parts) if parts else f"{type(error).__name__}: {error}"
    hints = [hint for words, hint in _HINTS if words in text]
    return text + (f" ({'; '.join(hints)})" if hints else "")
