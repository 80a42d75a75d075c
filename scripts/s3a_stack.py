"""A real S3 endpoint for the tests, reached through Hadoop's real S3A connector.

The endpoint is moto's S3 server (PyPI, ``requirements-s3.txt``, in a virtualenv of its own that
``make jars`` makes in .state/s3-server/), on 127.0.0.1 at a free port, path-style buckets, any
credentials. The connector is ``hadoop-aws`` 3.5.0 and the AWS SDK v2 modules it is built
against (``scripts/maven/s3a/pom.xml``, copied into .state/jars/s3a/ by ``make jars``), on the
classpath of every JVM that reaches ``s3a://`` paths: the Metastore's, the merge jobs' drivers.

The tests look at the bucket over plain HTTP (ListObjectsV2, GetObject, PutObject: moto does not
check signatures), so a check never goes through the code it checks.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from local_stack import await_start, free_port, spark_jars, stop_group
from suite_budget import record

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".state" / "jars" / "s3a"
SERVER = ROOT / ".state" / "s3-server"
ACCESS_KEY, SECRET_KEY, REGION = "hctest", "hctest-secret", "us-east-1"
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(RuntimeError):
    pass


def connector_jars() -> list[Path]:
    """hadoop-aws and the SDK modules, without the libraries the pyspark wheel has already (netty,
    httpclient, commons-*, slf4j: Spark's own versions are kept, two copies would clash)."""
    jars = sorted(JARS.glob("*.jar"))
    if not jars:
        raise S3Error(f"no jars in {JARS}: run `make jars` (it fetches scripts/maven/s3a/pom.xml's from Maven Central)")
    have = {_artifact(j.name) for j in spark_jars().glob("*.jar")}
    return [j for j in jars if _artifact(j.name) not in have]


def _artifact(jar_name: str) -> str:
    """``netty-codec-http-4.1.126.Final.jar`` -> ``netty-codec-http``."""
    parts = jar_name[: -len(".jar")].split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


class S3Server:
    def __init__(self, state: Path):
        self.state = Path(state).resolve()
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        exe = SERVER / "bin" / "moto_server"
        if not exe.exists():
            raise S3Error(f"{exe} is missing: run `make jars` (it installs requirements-s3.txt there from PyPI)")
        self.state.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.state / "s3.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            )
        await_start(
            self.proc, self._answers, t0, timeout, "S3 server (moto)", self.state / "s3.log", S3Error, self.stop
        )
        self.started_seconds = time.monotonic() - t0
        record("S3 endpoint (moto server)", self.started_seconds)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        stop_group(self.proc)

    # --- what a client of the bucket sees (plain HTTP) ---------------------------------------
    def _request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
        # moto does not check signatures, but treats a request without credentials as anonymous
        # (refused by the bucket's private ACL): name the test's access key.
        auth = {
            "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/{REGION}/s3/aws4_request, "
            "SignedHeaders=host, Signature=0"
        }
        req = urllib.request.Request(
            f"{self.endpoint}/{path}", data=body, method=method, headers={**auth, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise S3Error(f"S3 {method} /{path}: {e.code} {e.read()[:300]!r}") from None

    def make_bucket(self, bucket: str) -> None:
        self._request("PUT", bucket)

    def list(self, bucket: str, prefix: str = "") -> dict[str, dict]:
        """Every object under ``prefix``: key -> {size, etag, modified}."""
        out, token = {}, None
        while True:
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            root = ET.fromstring(self._request("GET", f"{bucket}?{urllib.parse.urlencode(query)}"))
            for c in root.iter(f"{_NS}Contents"):
                out[c.findtext(f"{_NS}Key")] = {
                    "size": int(c.findtext(f"{_NS}Size")),
                    "etag": c.findtext(f"{_NS}ETag"),
                    "modified": c.findtext(f"{_NS}LastModified"),
                }
            token = root.findtext(f"{_NS}NextContinuationToken")
            if not token:
                return out

    def get(self, bucket: str, key: str) -> bytes:
        return self._request("GET", f"{bucket}/{urllib.parse.quote(key)}")

    def put(self, bucket: str, key: str, body: bytes, headers: dict | None = None) -> None:
        # (urllib's default type for a body is a form's, which the server would parse away)
        self._request(
            "PUT",
            f"{bucket}/{urllib.parse.quote(key)}",
            body,
            {"Content-Type": "application/octet-stream", **(headers or {})},
        )

    # --- what a Hadoop client needs -----------------------------------------------------------
    @property
    def hadoop_conf(self) -> dict[str, str]:
        """The S3A settings a user would set for an on-premise S3 endpoint."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.attempts.maximum": "2",
            "fs.s3a.retry.limit": "2",
        }

    @property
    def spark_conf(self) -> dict[str, str]:
        """The Spark settings a merge job needs: the connector on the driver's classpath (in local
        mode the executors run in the driver's JVM) and the S3A settings."""
        return {
            "spark.driver.extraClassPath": ":".join(map(str, connector_jars())),
            **{f"spark.hadoop.{k}": v for k, v in self.hadoop_conf.items()},
        }
