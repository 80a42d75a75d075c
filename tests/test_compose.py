"""docker-compose.yaml (and docker/airflow.Dockerfile) checked without Docker.

Each test reads the files as they are and checks one property that, when broken, makes the
stack fail to start or the DAG fail at run time: services that name each other, connections
that point at real services and ports, one warehouse path everywhere, pinned images, host paths
that exist, who may write the warehouse, the pool and the Spark limits of the merge jobs. Only the
last test runs Compose itself (`docker-compose config`: Debian's docker-compose 1.29, or Compose v2),
where it is installed; the file must stay valid for both.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"

EXPECTED_SERVICES = {
    "postgres",
    "metastore-db",
    "hive-metastore",
    "spark-master",
    "spark-worker",
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
AIRFLOW_SERVICES = sorted(s for s in EXPECTED_SERVICES if s.startswith("airflow-"))
# Where the Airflow image keeps its folders unless the environment moves them.
AIRFLOW_HOME = PurePosixPath("/opt/airflow")
# Containers that open table files by the paths the Metastore records: the Metastore (creates and
# drops folders), the Spark drivers (the scheduler runs the merge tasks) and executors (the worker).
# The Airflow tasks themselves only talk to the Metastore and XCom.
WAREHOUSE_USERS = {"hive-metastore", "spark-worker", "airflow-scheduler"}
# How the Airflow containers (and the Spark ones, same image) run: Airflow's own compose file's user.
AIRFLOW_UID = "${AIRFLOW_UID:-50000}"
AIRFLOW_USER = f"{AIRFLOW_UID}:0"
# Top-level keys docker-compose 1.29 accepts (besides x-*); Compose v2 accepts them too.
COMPOSE_129_TOP_LEVEL = {"version", "services", "volumes", "networks", "secrets", "configs"}
DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


# --- reading the compose file -------------------------------------------------------------------


@functools.cache
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def services() -> dict[str, dict]:
    return compose()["services"]


def service(name: str) -> dict:
    assert name in services(), f"docker-compose.yaml has no service {name!r}"
    return services()[name]


def env(name: str) -> dict[str, str | None]:
    raw = service(name).get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in raw)
        return {k: v for k, v in pairs}
    return {k: (None if v is None else str(v)) for k, v in raw.items()}


def mounts(name: str) -> list[dict]:
    """Each volume entry as {"source", "target", "read_only", "type"} (short or long syntax)."""
    out = []
    for entry in service(name).get("volumes") or []:
        if isinstance(entry, dict):
            source, target = entry.get("source"), entry["target"]
            read_only = bool(entry.get("read_only"))
            kind = entry.get("type") or ("bind" if _is_host_path(source) else "volume")
        else:
            parts = entry.split(":")
            if len(parts) == 1:
                source, target, mode = None, parts[0], ""
            else:
                source, target, mode = parts[0], parts[1], (parts[2] if len(parts) > 2 else "")
            read_only = "ro" in mode.split(",")
            kind = "bind" if _is_host_path(source) else "volume"
        out.append({"source": source, "target": target, "read_only": read_only, "type": kind})
    return out


def _is_host_path(source: str | None) -> bool:
    return bool(source) and source.startswith((".", "/", "~"))


def host_path(source: str) -> Path:
    return (ROOT / source).resolve()


def depends_on(name: str) -> dict[str, str]:
    raw = service(name).get("depends_on") or {}
    if isinstance(raw, list):
        return {dep: "service_started" for dep in raw}
    return {dep: (spec or {}).get("condition", "service_started") for dep, spec in raw.items()}


def command_text(name: str, key: str = "command") -> str:
    raw = service(name).get(key) or ""
    return " ".join(raw) if isinstance(raw, list) else str(raw)


def listening_ports(name: str) -> set[int]:
    """Container ports a service exposes, publishes, or is told to listen on (--port N)."""
    svc = service(name)
    ports = {int(str(p).split("/")[0]) for p in svc.get("expose") or []}
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            ports.add(int(p["target"]))
        else:
            ports.add(int(str(p).split("/")[0].rsplit(":", 1)[-1]))
    for key in ("command", "entrypoint"):
        ports |= {int(m) for m in re.findall(r"--port[ =](\d+)", command_text(name, key))}
    return ports


def user_parts(name: str) -> tuple[str, str | None] | None:
    """(uid, gid) as written, gid None when not given; a ${VAR:-default} counts as one part."""
    user = service(name).get("user")
    if user is None:
        return None
    m = re.fullmatch(r"(\$\{[^}]*\}|[^:]+)(?::(\$\{[^}]*\}|[^:]+))?", str(user))
    assert m, f"{name}: cannot read user {user!r}"
    return m.group(1), m.group(2)


def user_uid(name: str) -> str | None:
    parts = user_parts(name)
    return None if parts is None else parts[0]


def is_root(uid: str | None) -> bool:
    return uid in ("0", "root")


def project_image_services() -> list[str]:
    """Services running the image built from docker/airflow.Dockerfile."""
    built = {svc["image"] for svc in services().values() if svc.get("build") and svc.get("image")}
    return sorted(n for n, svc in services().items() if svc.get("build") or svc.get("image") in built)


def java_properties(path: Path) -> dict[str, str]:
    """A Java properties file such as spark-defaults.conf (key and value split by blanks, = or :)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        m = re.match(r"([^\s=:]+)\s*[\s=:]\s*(.*)", line)
        out[m.group(1) if m else line] = m.group(2).strip() if m else ""
    return out


def hadoop_xml(path: Path) -> dict[str, str]:
    """A Hadoop configuration file (core-site.xml, ...): name -> value."""
    root = ET.parse(path).getroot()
    return {p.findtext("name").strip(): (p.findtext("value") or "").strip() for p in root.iter("property")}


def mounted_folder(name: str, target: str) -> Path | None:
    """The repository folder bind-mounted at target in a service, if any."""
    for m in mounts(name):
        if m["type"] == "bind" and m["target"].rstrip("/") == target.rstrip("/"):
            return host_path(m["source"])
    return None


def spark_defaults(name: str) -> dict[str, str]:
    """spark-defaults.conf of the spark-submits in a service: $SPARK_CONF_DIR, mounted from the repo."""
    conf_dir = env(name).get("SPARK_CONF_DIR")
    assert conf_dir, f"{name}: no SPARK_CONF_DIR, so its spark-submits get no spark-defaults.conf from the repository"
    folder = mounted_folder(name, conf_dir)
    assert folder, f"{name}: SPARK_CONF_DIR={conf_dir}, but no repository folder is mounted there"
    path = folder / "spark-defaults.conf"
    assert path.is_file(), f"{name}: {path} does not exist"
    return java_properties(path)


def umask_keeps_group_write(value: str | None) -> bool:
    return value is not None and re.fullmatch(r"[0-7]{3,4}", value) is not None and not int(value, 8) & 0o020


def worker_resources() -> tuple[int, int]:
    """The Spark worker's --cores and --memory (MiB)."""
    text = command_text("spark-worker")
    cores, memory = re.search(r"--cores[ =](\d+)", text), re.search(r"--memory[ =](\S+)", text)
    assert cores and memory, f"spark-worker: give --cores and --memory explicitly: {text}"
    return int(cores.group(1)), mebibytes(memory.group(1))


def mebibytes(size: str) -> int:
    m = re.fullmatch(r"(\d+)([kmgt]?)b?", size.strip().lower())
    assert m, f"not a Spark size: {size!r}"
    return int(m.group(1)) * {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024**2}[m.group(2)]


def created_pools() -> dict[str, int]:
    """Pools airflow-init creates (`airflow pools set NAME SLOTS DESCRIPTION`), with their slots."""
    return {
        name: int(slots)
        for name, slots in re.findall(
            r"airflow\s+pools\s+set\s+['\"]?([\w.-]+)['\"]?\s+(\d+)\s", command_text("airflow-init") + " "
        )
    }


def header() -> str:
    return "".join(line for line in COMPOSE_FILE.read_text().splitlines(keepends=True) if line.startswith("#"))


def java_options(text: str) -> dict[str, str]:
    return dict(re.findall(r"-D([^\s=]+)=(\S+)", text))


def metastore_options() -> dict[str, str]:
    return java_options(env("hive-metastore").get("SERVICE_OPTS") or "")


def warehouse_path() -> str:
    opts = metastore_options()
    uri = opts.get("metastore.warehouse.dir") or opts.get("hive.metastore.warehouse.dir")
    assert uri, "hive-metastore: SERVICE_OPTS sets no -Dmetastore.warehouse.dir"
    parts = urlsplit(uri)
    assert parts.scheme in ("", "file"), f"the warehouse {uri!r} must be on the shared volume (file://)"
    return parts.path.rstrip("/")


def warehouse_volume() -> str:
    path = warehouse_path()
    found = [m for m in mounts("hive-metastore") if m["target"].rstrip("/") == path]
    assert found, f"hive-metastore does not mount anything at its warehouse dir {path}"
    return found[0]["source"]


def image_tag(ref: str) -> str | None:
    if "@sha256:" in ref:
        return ref.split("@", 1)[1]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+(?:\.\d+)*)", text)
    assert m, f"no version number in {text!r}"
    return tuple(int(x) for x in m.group(1).split("."))


def dockerfiles() -> dict[str, Path]:
    out = {}
    for name, svc in services().items():
        build = svc.get("build")
        if build is None:
            continue
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        out[name] = host_path(context) / dockerfile
    return out


def dockerfile_text(path: Path) -> str:
    """The Dockerfile without comment lines (a comment naming Java installs none)."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def dockerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))


def pinned_requirement(package: str) -> str:
    text = (ROOT / "requirements.txt").read_text()
    m = re.search(rf"^{re.escape(package)}==(\S+)", text, flags=re.M | re.I)
    assert m, f"requirements.txt does not pin {package}"
    return m.group(1)


# --- services and images ------------------------------------------------------------------------


def test_expected_services_exist():
    missing = EXPECTED_SERVICES - set(services())
    assert not missing, f"docker-compose.yaml lacks services: {sorted(missing)}"
    for name, svc in services().items():
        assert svc.get("image") or svc.get("build"), f"{name}: neither image nor build"


def test_images_are_pinned():
    assert services(), "docker-compose.yaml defines no services"
    for name, svc in services().items():
        ref = svc.get("image")
        if ref is None:
            continue
        tag = image_tag(ref)
        assert tag, f"{name}: image {ref!r} has no tag"
        assert tag != "latest", f"{name}: image {ref!r} is not pinned"


def test_dockerfile_base_images_are_pinned_and_airflow_matches_requirements():
    assert dockerfiles(), "no service builds the project image"
    airflow_pin = pinned_requirement("apache-airflow")
    for name, path in dockerfiles().items():
        assert path.is_file(), f"{name}: Dockerfile {path} does not exist"
        text = dockerfile_text(path)
        args = dockerfile_args(text)
        bases = re.findall(r"^FROM\s+(\S+)", text, flags=re.M)
        assert bases, f"{path}: no FROM"
        for base in bases:
            resolved = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), base)  # noqa: B023 - run here
            assert "$" not in resolved, f"{path}: FROM {base} uses an ARG without a default"
            tag = image_tag(resolved)
            assert tag and tag != "latest", f"{path}: base image {resolved!r} is not pinned"
            if resolved.startswith("apache/airflow:"):
                assert tag.split("-")[0] == airflow_pin, (
                    f"{path}: base image {resolved} but requirements.txt pins apache-airflow=={airflow_pin}"
                )


def test_dockerfile_installs_java_and_the_pinned_requirements():
    assert dockerfiles(), "no service builds the project image"
    for _name, path in dockerfiles().items():
        text = dockerfile_text(path)
        assert re.search(r"apt-get install[^\n]*(jre|jdk)", text, flags=re.S | re.I) or re.search(
            r"(openjdk|default-jre|temurin)", text, flags=re.I
        ), f"{path}: installs no Java runtime"
        assert re.search(r"^COPY\s+requirements\.txt\s+(\S+)", text, flags=re.M), f"{path}: requirements.txt not copied"
        target = re.search(r"^COPY\s+requirements\.txt\s+(\S+)", text, flags=re.M).group(1)
        assert re.search(rf"pip install[^\n]*-r\s+{re.escape(target)}", text), f"{path}: no pip install -r {target}"


def test_hive_image_serves_the_thrift_calls_the_package_makes():
    """Hive 4.0.1 removed `get_table` (HIVE-26537); while the package calls it, stay below 4.0.1."""
    ref = service("hive-metastore")["image"]
    assert ref.startswith("apache/hive:"), f"hive-metastore: unexpected image {ref}"
    version = version_tuple(image_tag(ref))
    sources = "\n".join(p.read_text() for p in (ROOT / "plugins" / "hive_compaction").rglob("*.py"))
    calls_get_table = re.search(r"""["']get_table["']|\.get_table\(""", sources)
    if calls_get_table:
        assert version < (4, 0, 1), (
            f"hive-metastore runs {ref}, which has no get_table Thrift call, but plugins/hive_compaction "
            "still calls it (use get_table_req, or keep the image below 4.0.1)"
        )


# --- the warehouse ------------------------------------------------------------------------------


def test_metastore_warehouse_dir_options_agree():
    opts = metastore_options()
    given = {
        k: urlsplit(v).path.rstrip("/")
        for k, v in opts.items()
        if k in ("metastore.warehouse.dir", "hive.metastore.warehouse.dir")
    }
    assert given, "hive-metastore: SERVICE_OPTS sets no warehouse dir"
    assert len(set(given.values())) == 1, f"hive-metastore: warehouse dir options disagree: {given}"


def test_warehouse_is_mounted_at_one_path_everywhere():
    volume, path = warehouse_volume(), warehouse_path()
    targets = {name: m["target"].rstrip("/") for name in services() for m in mounts(name) if m["source"] == volume}
    wrong = {name: t for name, t in targets.items() if t != path}
    assert not wrong, f"the warehouse volume {volume!r} must be at {path} (the Metastore's warehouse dir): {wrong}"
    missing = WAREHOUSE_USERS - set(targets)
    assert not missing, f"these services open table files but do not mount the warehouse: {sorted(missing)}"
    assert volume in (compose().get("volumes") or {}), f"the warehouse volume {volume!r} is not declared"


def test_warehouse_writers_share_group_0_and_create_group_writable_entries():
    """The writers run as different uids (the Metastore's image needs its own), so each must be able to
    write what the others create: all run with group 0 and create group-writable folders and files."""
    volume = warehouse_volume()
    writers = {
        name: user_parts(name)
        for name in services()
        if any(m["source"] == volume and not m["read_only"] for m in mounts(name))
    }
    assert writers, f"no service writes the warehouse volume {volume!r}"
    undeclared = sorted(n for n, user in writers.items() if user is None)
    assert not undeclared, f"services writing the warehouse must state their user: {undeclared}"
    project = set(project_image_services())
    for name, (uid, gid) in writers.items():
        target = next(m["target"] for m in mounts(name) if m["source"] == volume)
        if is_root(uid):  # an init service: it must open the volume to group 0
            script = command_text(name) + " " + command_text(name, "entrypoint")
            assert re.search(rf"(chgrp\s+-R\s+0|chown\s+-R\s+\S*:0)\s+{re.escape(target)}(\s|$)", script), (
                f"{name} runs as root with the warehouse but does not give {target} and its contents to group 0"
            )
            assert re.search(rf"chmod\s+-R\s+g\+rwX?\s+{re.escape(target)}(\s|$)", script), (
                f"{name} does not make what is in {target} group-writable"
            )
            assert re.search(rf"chmod\s+[0-7]?[2367]7[0-7]\s+{re.escape(target)}(\s|$)", script) or re.search(
                rf"chmod\s+g\+[rwxs]*w[rwxs]*\s+{re.escape(target)}(\s|$)", script
            ), f"{name} does not make {target} itself group-writable"
            continue
        assert gid == "0", f"{name} writes the warehouse with group {gid!r}: every writer must run with group 0"
        if name in project:
            # The Airflow image's entrypoint sets umask 0002: keep it in the path.
            assert not service(name).get("entrypoint"), (
                f"{name}: the Airflow image's entrypoint (umask 0002) is bypassed"
            )
        else:
            script = command_text(name, "entrypoint") + " " + command_text(name)
            assert re.search(r"\bumask\s+0{0,2}002\b", script), f"{name}: its entrypoint does not set umask 0002"
    # Hadoop masks the permissions it sets itself with fs.permissions.umask-mode (default 022), not
    # with the process umask: the Spark drivers (executors get their conf) and the Metastore set it.
    for name in sorted(WAREHOUSE_USERS & set(AIRFLOW_SERVICES)):
        value = spark_defaults(name).get("spark.hadoop.fs.permissions.umask-mode")
        assert umask_keeps_group_write(value), (
            f"{name}: spark-defaults.conf must set spark.hadoop.fs.permissions.umask-mode to keep group write "
            f"(002), not {value}"
        )
    conf_dir = env("hive-metastore").get("HIVE_CUSTOM_CONF_DIR")
    folder = conf_dir and mounted_folder("hive-metastore", conf_dir)
    assert folder, "hive-metastore: no HIVE_CUSTOM_CONF_DIR mounted from the repository (for core-site.xml)"
    value = hadoop_xml(folder / "core-site.xml").get("fs.permissions.umask-mode")
    assert umask_keeps_group_write(value), (
        f"{folder}/core-site.xml: fs.permissions.umask-mode must keep group write, not {value}"
    )


def test_only_the_services_that_open_table_files_mount_the_warehouse():
    volume = warehouse_volume()
    mounting = {name for name in services() if any(m["source"] == volume for m in mounts(name))}
    extra = {n for n in mounting - WAREHOUSE_USERS if not is_root(user_uid(n))}
    assert not extra, f"these services never open table files, yet mount the warehouse: {sorted(extra)}"


# --- Airflow ------------------------------------------------------------------------------------


def test_airflow_services_mount_only_the_dags_folder_and_import_the_package_from_the_image():
    """As the README's install: the DAG file and its YAML in the dags folder, the package from
    its wheel (installed in the image), no checkout folder on the path."""
    for name in AIRFLOW_SERVICES:
        by_source = {
            host_path(m["source"]).relative_to(ROOT).as_posix(): PurePosixPath(m["target"])
            for m in mounts(name)
            if m["type"] == "bind"
        }
        assert "dags" in by_source, f"{name}: ./dags is not mounted"
        e = env(name)
        assert str(by_source["dags"]) == e.get("AIRFLOW__CORE__DAGS_FOLDER", str(AIRFLOW_HOME / "dags")), (
            f"{name}: ./dags is mounted at {by_source['dags']}, not at Airflow's dags folder"
        )
        for folder in ("plugins", "spark_jobs"):
            assert folder not in by_source, (
                f"{name}: ./{folder} is mounted: the package must come from the image's wheel"
            )
        assert "plugins" not in (e.get("PYTHONPATH") or ""), f"{name}: PYTHONPATH names the checkout's plugins/"


def test_the_image_installs_the_package_from_a_wheel_of_this_checkout():
    for _name, path in dockerfiles().items():
        text = dockerfile_text(path)
        copied = re.findall(r"^COPY\s+(?:--\S+\s+)*(.+?)\s+(\S+)$", text, flags=re.M)
        sources = {src for srcs, _ in copied for src in srcs.split()}
        assert {"pyproject.toml", "plugins"} <= sources, f"{path}: the package's sources are not copied: {copied}"
        wheel = re.search(r"pip wheel[^\n]*--no-deps[^\n]*-w\s+(\S+)", text)
        assert wheel, f"{path}: builds no wheel of the package"
        install = re.search(rf"pip install[^\n]*\s{re.escape(wheel.group(1))}/hive_compaction-\*\.whl", text)
        assert install, f"{path}: does not install the wheel it built"
        assert not re.search(r"pip install[^\n]*\s-e\s", text), f"{path}: an editable install is not what users run"


def test_airflow_runs_local_executor_without_examples():
    for name in AIRFLOW_SERVICES:
        e = env(name)
        assert e.get("AIRFLOW__CORE__EXECUTOR") == "LocalExecutor", f"{name}: executor is not LocalExecutor"
        assert (e.get("AIRFLOW__CORE__LOAD_EXAMPLES") or "").lower() == "false", f"{name}: examples are loaded"


def test_airflow_metadata_database_points_at_its_postgres():
    for name in AIRFLOW_SERVICES:
        url = urlsplit(env(name)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert url.scheme.startswith("postgresql"), f"{name}: metadata database is not PostgreSQL"
        db = env(url.hostname)
        assert (url.username, url.password, url.path.lstrip("/")) == (
            db.get("POSTGRES_USER"),
            db.get("POSTGRES_PASSWORD"),
            db.get("POSTGRES_DB"),
        ), f"{name}: SQL_ALCHEMY_CONN does not match {url.hostname}'s POSTGRES_* settings"
        assert (url.port or 5432) in (listening_ports(url.hostname) or {5432})


def test_airflow_shares_secrets_and_reaches_the_execution_api():
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        values = {name: env(name).get(key) for name in AIRFLOW_SERVICES}
        assert None not in values.values() and len(set(values.values())) == 1, (
            f"{key} differs between services: {values}"
        )
    api_servers = [n for n in AIRFLOW_SERVICES if command_text(n).strip() in ("api-server", "airflow api-server")]
    assert len(api_servers) == 1, f"expected one api-server service, found {api_servers}"
    for name in AIRFLOW_SERVICES:
        url = urlsplit(env(name).get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") or "")
        assert url.hostname == api_servers[0], f"{name}: the execution API URL does not name {api_servers[0]}"
        assert url.port in listening_ports(api_servers[0]), f"{name}: the execution API port is not served"


def test_connections_parse_and_point_at_services_and_ports():
    assert services(), "docker-compose.yaml defines no services"
    seen = set()
    for name in services():
        for key, value in env(name).items():
            if not key.startswith("AIRFLOW_CONN_"):
                continue
            conn = json.loads(value)
            seen.add(key)
            host = conn["host"].split("://", 1)[-1]
            assert host in services(), f"{name}: {key} names host {host!r}, which is no service"
            assert conn.get("port") in listening_ports(host), (
                f"{name}: {key} uses port {conn.get('port')}, {host} listens on {sorted(listening_ports(host))}"
            )
    assert {"AIRFLOW_CONN_HIVE_METASTORE", "AIRFLOW_CONN_SPARK_DEFAULT"} <= seen


def test_spark_connection_is_a_standalone_master_url():
    conn = json.loads(env("airflow-scheduler")["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["conn_type"] == "spark" and conn["host"].startswith("spark://"), conn
    master = conn["host"].split("://", 1)[1]
    assert "org.apache.spark.deploy.master.Master" in command_text(master), f"{master} does not run a Spark master"


def test_the_dag_config_connections_are_defined_where_tasks_run():
    """LocalExecutor: tasks run in the scheduler; it needs the connections the DAG config names."""
    cfg = yaml.safe_load((ROOT / "dags" / "hive_compaction.yaml").read_text()) or {}
    e = env("airflow-scheduler")
    for key, default in (("metastore_conn_id", "hive_metastore"), ("spark_conn_id", "spark_default")):
        conn_id = cfg.get(key, default)
        assert f"AIRFLOW_CONN_{conn_id.upper()}" in e, (
            f"dags/hive_compaction.yaml uses {key}: {conn_id}, the scheduler has no AIRFLOW_CONN_{conn_id.upper()}"
        )


def test_spark_driver_host_resolves_from_the_worker():
    """Executors connect back to the driver (in the scheduler) by the name it advertises."""
    svc = service("airflow-scheduler")
    assert svc.get("hostname") in services(), "airflow-scheduler: hostname must be a service name the network resolves"
    advertised = env("airflow-scheduler").get("SPARK_LOCAL_HOSTNAME")
    assert advertised in (None, svc["hostname"]), f"SPARK_LOCAL_HOSTNAME {advertised} is not the scheduler's hostname"


def test_spark_worker_registers_with_the_master_the_connection_uses():
    conn = json.loads(env("airflow-scheduler")["AIRFLOW_CONN_SPARK_DEFAULT"])
    url = f"{conn['host']}:{conn['port']}"
    worker = command_text("spark-worker")
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert re.search(rf"{re.escape(url)}(\s|$)", worker), f"spark-worker does not register with {url}: {worker}"


def test_airflow_and_spark_services_run_as_airflow_uid_with_group_0():
    """Like Airflow's own compose file: ${AIRFLOW_UID:-50000} (the image's airflow user by default), group 0."""
    names = sorted(set(AIRFLOW_SERVICES) | {n for n in project_image_services() if not is_root(user_uid(n))})
    assert {"spark-master", "spark-worker"} <= set(names), "the Spark services should run the project image"
    wrong = {n: service(n).get("user") for n in names if str(service(n).get("user")) != AIRFLOW_USER}
    assert not wrong, f"these services must run as {AIRFLOW_USER!r}: {wrong}"
    # The volumes the Airflow containers write belong to that uid (a root init service hands them over).
    logs = {
        m["source"]
        for m in mounts("airflow-scheduler")
        if m["type"] == "volume" and m["target"].rstrip("/") == str(AIRFLOW_HOME / "logs")
    }
    assert logs, "airflow-scheduler: no logs volume"
    for name in services():
        for m in mounts(name):
            if m["source"] in logs and is_root(user_uid(name)):
                assert re.search(
                    rf"chown\s+(-R\s+)?{re.escape(AIRFLOW_UID)}(:0)?\s+{re.escape(m['target'])}", command_text(name)
                ), f"{name} does not give {m['target']} to {AIRFLOW_USER}"


def test_airflow_init_creates_the_pool_the_header_tells_the_config_to_use():
    script = command_text("airflow-init")
    pools = created_pools()
    assert pools, f"airflow-init creates no pool (`airflow pools set NAME SLOTS DESCRIPTION`): {script}"
    migrate = re.search(r"airflow\s+db\s+migrate", script)
    assert migrate and migrate.start() < script.index("pools set"), (
        "airflow-init must create the pool after `airflow db migrate`"
    )
    assert not re.search(r"\|\|\s*true|;\s*airflow\s+pools", script), (
        "a failed migration or pool set must fail airflow-init"
    )
    cores, _ = worker_resources()
    cores_max = int(spark_defaults("airflow-scheduler")["spark.cores.max"])
    for name, slots in pools.items():
        assert f"pool: {name}" in header(), f"the header must say how to use the pool: `pool: {name}` in the config"
        assert 1 <= slots and slots * cores_max <= cores, (
            f"pool {name}: {slots} slots x spark.cores.max {cores_max} exceed the worker's {cores} cores"
        )
    cfg = yaml.safe_load((ROOT / "dags" / "hive_compaction.yaml").read_text()) or {}
    pool = cfg.get("pool", "default_pool")
    assert pool == "default_pool" or pool in pools, (
        f"dags/hive_compaction.yaml uses pool {pool!r}, which nothing creates"
    )


def test_merge_jobs_leave_room_on_the_worker():
    """spark.cores.max (and executor memory) in the spark-defaults.conf of the Airflow containers let
    two merges run side by side on the standalone worker instead of the first taking every core."""
    cores, memory = worker_resources()
    for name in AIRFLOW_SERVICES:
        if "SPARK_CONF_DIR" in env(name) or name in WAREHOUSE_USERS:  # where Spark drivers may run
            defaults = spark_defaults(name)
            assert "spark.cores.max" in defaults, f"{name}: spark-defaults.conf sets no spark.cores.max"
            cores_max = int(defaults["spark.cores.max"])
            assert 1 <= cores_max and 2 * cores_max <= cores, (
                f"{name}: spark.cores.max {cores_max} does not let two merges share the worker's {cores} cores"
            )
            executor_memory = mebibytes(defaults.get("spark.executor.memory", "1g"))  # Spark's default: 1g
            assert 2 * executor_memory <= memory, (
                f"{name}: two executors of {defaults.get('spark.executor.memory', '1g')} do not fit the worker's memory"
            )
    master_opts = java_options(env("spark-master").get("SPARK_MASTER_OPTS") or "")
    if "spark.deploy.defaultCores" in master_opts:
        assert int(master_opts["spark.deploy.defaultCores"]) < cores, "spark.deploy.defaultCores takes the whole worker"


# --- the Metastore ------------------------------------------------------------------------------


def test_metastore_uses_its_postgres():
    e, opts = env("hive-metastore"), metastore_options()
    assert e.get("SERVICE_NAME") == "metastore" and e.get("DB_DRIVER") == "postgres"
    assert opts.get("javax.jdo.option.ConnectionDriverName") == "org.postgresql.Driver"
    url = urlsplit(opts["javax.jdo.option.ConnectionURL"].removeprefix("jdbc:"))
    assert url.scheme == "postgresql" and url.hostname in services(), f"JDBC URL names no service: {url.geturl()}"
    db = env(url.hostname)
    assert url.path.lstrip("/") == db.get("POSTGRES_DB")
    assert opts.get("javax.jdo.option.ConnectionUserName") == db.get("POSTGRES_USER")
    assert opts.get("javax.jdo.option.ConnectionPassword") == db.get("POSTGRES_PASSWORD")
    assert (url.port or 5432) in (listening_ports(url.hostname) or {5432})
    assert depends_on("hive-metastore").get(url.hostname) == "service_healthy"


def test_metastore_gets_a_jdbc_driver_before_it_starts():
    jar_mounts = [
        m
        for m in mounts("hive-metastore")
        if m["target"].rstrip("/") == "/opt/hive/auxlib"
        or (m["target"].startswith("/opt/hive/lib/") and m["target"].endswith(".jar"))
    ]
    assert jar_mounts, "hive-metastore: no JDBC driver mounted (/opt/hive/auxlib or /opt/hive/lib/*.jar)"
    for m in jar_mounts:
        if m["type"] == "bind":
            assert host_path(m["source"]).exists(), f"the JDBC driver {m['source']} does not exist"
            continue
        providers = [
            n
            for n in services()
            if n != "hive-metastore" and any(o["source"] == m["source"] and not o["read_only"] for o in mounts(n))
        ]
        assert providers, f"nothing writes the JDBC driver into volume {m['source']!r}"
        for provider in providers:
            assert depends_on("hive-metastore").get(provider) == "service_completed_successfully", (
                f"hive-metastore must wait for {provider} to fill {m['source']!r}"
            )
            target = next(o["target"] for o in mounts(provider) if o["source"] == m["source"])
            assert re.search(
                rf"\b(cp|install|mv|curl|wget)\b[^\n]*{re.escape(target.rstrip('/'))}/\S+\.jar", command_text(provider)
            ), f"{provider} does not put a jar into {target}"


# --- the file as a whole ------------------------------------------------------------------------


def test_depends_on_names_existing_services_with_valid_conditions():
    assert services(), "docker-compose.yaml defines no services"
    for name in services():
        for dep, condition in depends_on(name).items():
            assert dep in services(), f"{name} depends on {dep!r}, which is no service"
            assert condition in DEPENDS_ON_CONDITIONS, f"{name} -> {dep}: unknown condition {condition!r}"
            if condition == "service_healthy":
                check = service(dep).get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), (
                    f"{name} waits for {dep} to be healthy: no healthcheck"
                )
            if condition == "service_completed_successfully":
                assert service(dep).get("restart", "no") in ("no", "on-failure"), (
                    f"{name} waits for {dep} to complete, but {dep} restarts forever"
                )


def test_depends_on_has_no_cycle():
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "active", f"depends_on cycle: {' -> '.join(path + [name])}"
        state[name] = "active"
        for dep in depends_on(name):
            if dep in services():
                visit(dep, path + [name])
        state[name] = "done"

    for name in services():
        visit(name, [])


def test_host_paths_exist():
    assert services(), "docker-compose.yaml defines no services"
    for name in services():
        for m in mounts(name):
            if m["type"] != "bind":
                continue
            assert not m["source"].startswith(("/", "~")), f"{name}: {m['source']} is not inside the repository"
            assert host_path(m["source"]).exists(), f"{name}: host path {m['source']} does not exist"
        build = service(name).get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            assert host_path(context).is_dir(), f"{name}: build context {context} does not exist"
    for name, path in dockerfiles().items():
        assert path.is_file(), f"{name}: {path} does not exist"


def test_named_volumes_are_declared():
    assert services(), "docker-compose.yaml defines no services"
    declared = set(compose().get("volumes") or {})
    for name in services():
        for m in mounts(name):
            if m["type"] == "volume" and m["source"]:
                assert m["source"] in declared, f"{name}: volume {m['source']!r} is not declared"


def test_variable_interpolations_have_defaults():
    """`docker compose up` must work without an .env file; `$$` is a literal dollar."""
    text = COMPOSE_FILE.read_text().replace("$$", "")
    found = list(re.finditer(r"\$(\{[^}]*\}|\w+)", text))
    assert found, "docker-compose.yaml: no ${...} interpolation found (it sets ${AIRFLOW_UID:-50000})"
    for m in found:
        assert re.fullmatch(r"\{\w+:?-[^}]*\}", m.group(1)), (
            f"docker-compose.yaml: ${m.group(1)} is interpolated by Compose without a default (write $$ for the shell)"
        )


def test_top_level_keys_are_known_to_compose_1_29():
    """docker-compose 1.29 (Debian's) rejects top-level keys it does not know, e.g. `name`."""
    unknown = {k for k in compose() if k not in COMPOSE_129_TOP_LEVEL and not k.startswith("x-")}
    assert not unknown, f"docker-compose 1.29 does not accept the top-level keys {sorted(unknown)}"
    if "name" not in compose():
        assert "COMPOSE_PROJECT_NAME" in header(), "the header must say how to name the project without `name:`"


def test_header_tells_how_to_start_and_where_the_ui_is():
    header_text = header()
    assert "docker compose up -d" in header_text
    ui_ports = {
        str(p).split("/")[0].split(":")[-2] for p in service("airflow-apiserver").get("ports") or [] if ":" in str(p)
    }
    assert ui_ports and all(f"localhost:{p}" in header_text for p in ui_ports), "the header must give the UI's address"
    assert warehouse_path() in header_text and "identical" in header_text


def compose_command() -> list[str] | None:
    """Debian's docker-compose (1.29) or Compose v2, whichever answers; no Docker engine needed."""
    for cmd in (["docker-compose"], ["docker", "compose"]):
        if shutil.which(cmd[0]) and subprocess.run(cmd + ["version"], capture_output=True).returncode == 0:
            return cmd
    return None


def run_compose_config(cmd: list[str], env_file: Path, *args: str, **environ: str) -> subprocess.CompletedProcess:
    """`config` with a clean environment: env_file instead of a .env, no AIRFLOW_UID or COMPOSE_* of the caller."""
    base = {k: v for k, v in os.environ.items() if k != "AIRFLOW_UID" and not k.startswith("COMPOSE_")}
    return subprocess.run(
        cmd + ["--env-file", str(env_file), "-f", str(COMPOSE_FILE), "config", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**base, **environ},
    )


def test_compose_accepts_the_file(tmp_path):
    """Compose's own parser and validation (no daemon needed); interpolation of ${AIRFLOW_UID:-50000}."""
    cmd = compose_command()
    if cmd is None:
        pytest.skip("no Docker Compose here (Debian: apt-get install docker-compose)")
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    run = run_compose_config(cmd, env_file, "--quiet")
    assert run.returncode == 0, f"{' '.join(cmd)} config: {run.stderr}"
    for uid in (None, "1234"):
        run = run_compose_config(cmd, env_file, **({"AIRFLOW_UID": uid} if uid else {}))
        assert run.returncode == 0, run.stderr
        resolved = yaml.safe_load(run.stdout)["services"]
        expected = f"{uid or 50000}:0"
        for name in AIRFLOW_SERVICES:
            assert str(resolved[name].get("user")) == expected, (
                f"AIRFLOW_UID={uid}: {name} runs as {resolved[name].get('user')!r}, not {expected}"
            )
        init_script = json.dumps(resolved["volume-init"].get("command"))
        assert f"chown -R {expected} /opt/airflow/logs" in init_script, init_script
