"""A real Kerberos realm and a SASL (Kerberos) Hive Metastore 2.3, for the tests.

``KerberosRealm``: an MIT KDC (Debian's krb5-kdc) for EXAMPLE.COM on a loopback port, its
``krb5.conf``, principals with passwords or keytabs, and ticket caches (``kinit``).
``KerberosMetastore``: the pyspark wheel's Hive Metastore 2.3 (``local_stack.Metastore``) with
``hive.metastore.sasl.enabled=true`` as ``hive/localhost@EXAMPLE.COM``; it refuses any client
that does not authenticate by SASL GSSAPI. ``missing()`` says what this machine lacks for them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

from local_stack import Metastore, StackError, free_port, port_in_use, stop_group
from suite_budget import record

REALM = "EXAMPLE.COM"
KDC_TOOLS = ("kdb5_util", "kadmin.local", "krb5kdc", "kinit")
SERVICE = f"hive/localhost@{REALM}"  # the Metastore's; clients reach it as "localhost"

KRB5_CONF = """[libdefaults]
  default_realm = {realm}
  dns_lookup_kdc = false
  dns_lookup_realm = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
[realms]
  {realm} = {{
    kdc = 127.0.0.1:{port}
  }}
"""
KDC_CONF = """[kdcdefaults]
  kdc_ports = {port}
  kdc_tcp_ports = {port}
[realms]
  {realm} = {{
    database_name = {state}/principal
    key_stash_file = {state}/stash
    acl_file = {state}/kadm5.acl
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
  }}
"""


def missing() -> str | None:
    """What this machine lacks for a realm and a SASL Metastore (None: nothing)."""
    absent = [t for t in KDC_TOOLS + ("java",) if shutil.which(t) is None]
    if importlib.util.find_spec("kerberos") is None:
        absent.append("the kerberos Python module")
    if not absent:
        return None
    return (
        f"missing {', '.join(absent)} (apt-get install krb5-kdc krb5-admin-server krb5-user libkrb5-dev; "
        "pip install kerberos)"
    )


class KerberosRealm:
    """An MIT KDC for ``REALM`` with its database, configuration and log in ``state``."""

    def __init__(self, state: Path):
        self.state = Path(state).resolve()
        self.port = free_port()
        self.krb5_conf = self.state / "krb5.conf"
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment that points MIT's tools and libraries (not Java) at this realm."""
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.state / "kdc.conf")}

    @property
    def java_options(self) -> str:
        """What points a JVM at this realm (Java reads no KRB5_CONFIG)."""
        return f"-Djava.security.krb5.conf={self.krb5_conf}"

    def _run(self, *cmd: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=env or self.env, check=True, capture_output=True, timeout=60, **kw)

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(KRB5_CONF.format(realm=REALM, port=self.port))
        (self.state / "kdc.conf").write_text(KDC_CONF.format(realm=REALM, port=self.port, state=self.state))
        self._run("kdb5_util", "create", "-s", "-r", REALM, "-P", "master-password")
        t0 = time.monotonic()
        with open(self.state / "kdc.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["krb5kdc", "-n", "-P", str(self.state / "kdc.pid")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.state,
                start_new_session=True,
            )
        while not port_in_use(self.port):
            if self.proc.poll() is not None or time.monotonic() - t0 > 20:
                self.stop()
                raise StackError(f"the MIT KDC did not start; see {self.state / 'kdc.log'}")
            time.sleep(0.1)
        record("MIT KDC (krb5kdc)", time.monotonic() - t0)

    def stop(self) -> None:
        stop_group(self.proc)

    def add_principal(self, name: str, password: str | None = None, keytab: Path | None = None) -> str:
        """Add ``name@REALM`` with a password (else a random key), exported to ``keytab`` if given."""
        principal = name if "@" in name else f"{name}@{REALM}"
        self._run(
            "kadmin.local",
            "-q",
            f"addprinc -pw {password} {principal}" if password else f"addprinc -randkey {principal}",
        )
        if keytab is not None:
            self._run("kadmin.local", "-q", f"ktadd -k {keytab} {principal}")
        return principal

    def kinit(self, principal: str, cache: Path, password: str | None = None, keytab: Path | None = None) -> str:
        """A ticket for ``principal`` in the cache file ``cache``; its KRB5CCNAME value."""
        ccname = f"FILE:{cache}"
        env = {**self.env, "KRB5CCNAME": ccname}
        if keytab is not None:
            self._run("kinit", "-k", "-t", str(keytab), principal, env=env)
        else:
            self._run("kinit", principal, env=env, input=f"{password}\n".encode())
        return ccname


class KerberosMetastore(Metastore):
    """The wheel's Hive Metastore 2.3, SASL only, as ``SERVICE`` (its keytab made in ``realm``)."""

    def __init__(self, realm: KerberosRealm, state: Path, **db):
        super().__init__(state, None, **db)
        keytab = self.state / "hive.keytab"
        self.state.mkdir(parents=True, exist_ok=True)
        realm.add_principal(SERVICE, keytab=keytab)
        self.hive_conf.update(
            {
                "hive.metastore.sasl.enabled": "true",
                "hive.metastore.kerberos.principal": SERVICE,
                "hive.metastore.kerberos.keytab.file": str(keytab),
            }
        )
        self.hadoop_conf["hadoop.security.authentication"] = "kerberos"
        # Its log (and the audit lines naming each call's Kerberos user) in its own folder, not
        # in the machine's shared /tmp/<user>/hive.log.
        self.jvm_options += [realm.java_options, f"-Dhive.log.dir={self.state}"]
        self.describe = "Hive Metastore 2.3 with Kerberos (SASL)"

    @property
    def uri(self) -> str:
        return f"thrift://localhost:{self.port}"  # the host its service principal names

    @property
    def audit_log(self) -> Path:
        """Its log: ``HiveMetaStore.audit: ugi=<user>@REALM ... cmd=<call>`` per call."""
        return self.state / "hive.log"

    def ready(self) -> bool:
        # A Thrift call without SASL is refused by design: listening is the sign here.
        return port_in_use(self.port)


class KerberosStack:
    """A realm, a SASL Metastore, a user with a ticket (``user``: what an Airflow worker's
    ``airflow kerberos`` or kinit gives it) and a job principal with a keytab (``job_principal``,
    ``job_keytab``: what the merge tasks' spark-submit gets), all under ``state``."""

    def __init__(self, state: Path):
        self.state = Path(state).resolve()
        self.realm = KerberosRealm(self.state / "realm")
        self.metastore: KerberosMetastore | None = None
        self.user = f"alice@{REALM}"
        self.user_cache = f"FILE:{self.state}/alice.cc"
        self.job_principal = f"compaction@{REALM}"
        self.job_keytab = self.state / "compaction.keytab"
        self.other_keytab = self.state / "other.keytab"  # another principal's: a wrong keytab for the job

    @property
    def port(self) -> int:
        return self.metastore.port

    @property
    def env(self) -> dict[str, str]:
        """The realm's configuration and the user's ticket cache, for MIT's libraries."""
        return {"KRB5_CONFIG": str(self.realm.krb5_conf), "KRB5CCNAME": self.user_cache}

    def start(self) -> None:
        self.realm.start()
        try:
            self.realm.add_principal(self.user, password="alice-password")
            self.realm.kinit(self.user, Path(self.user_cache[len("FILE:") :]), password="alice-password")
            self.realm.add_principal(self.job_principal, keytab=self.job_keytab)
            self.realm.add_principal(f"other@{REALM}", keytab=self.other_keytab)
            self.metastore = KerberosMetastore(self.realm, self.state / "hms")
            self.metastore.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.metastore is not None:
            self.metastore.stop()
        self.realm.stop()
