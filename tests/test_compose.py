"""docker-compose.yaml (and docker/airflow.Dockerfile) checked without Docker.

Each test reads the files as they are and checks one property that, when broken, makes the
stack fail to start or the DAG fail at run time: services that name each other, connections
that point at real services and ports, one warehouse path everywhere, pinned images, host paths
that exist. Only the last test runs `docker compose config`, and only where Compose is installed.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"

EXPECTED_SERVICES = {
    "postgres", "metastore-db", "hive-metastore", "spark-master", "spark-worker",
    "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
}
AIRFLOW_SERVICES = sorted(s for s in EXPECTED_SERVICES if s.startswith("airflow-"))
# Where the Airflow image keeps its folders unless the environment moves them.
AIRFLOW_HOME = PurePosixPath("/opt/airflow")
# Containers that open table files by the paths the Metastore records.
WAREHOUSE_USERS = {"hive-metastore", "spark-master", "spark-worker", "airflow-scheduler"}
DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


# --- reading the compose file -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
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


def user_uid(name: str) -> str | None:
    user = service(name).get("user")
    return None if user is None else str(user).split(":")[0]


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
            resolved = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), base)
            assert "$" not in resolved, f"{path}: FROM {base} uses an ARG without a default"
            tag = image_tag(resolved)
            assert tag and tag != "latest", f"{path}: base image {resolved!r} is not pinned"
            if resolved.startswith("apache/airflow:"):
                assert tag.split("-")[0] == airflow_pin, (
                    f"{path}: base image {resolved} but requirements.txt pins apache-airflow=={airflow_pin}")


def test_dockerfile_installs_java_and_the_pinned_requirements():
    for name, path in dockerfiles().items():
        text = dockerfile_text(path)
        assert re.search(r"apt-get install[^\n]*(jre|jdk)", text, flags=re.S | re.I) or \
            re.search(r"(openjdk|default-jre|temurin)", text, flags=re.I), f"{path}: installs no Java runtime"
        assert re.search(r"^COPY\s+requirements\.txt\s+(\S+)", text, flags=re.M), f"{path}: requirements.txt not copied"
        target = re.search(r"^COPY\s+requirements\.txt\s+(\S+)", text, flags=re.M).group(1)
        assert re.search(rf"pip install[^\n]*-r\s+{re.escape(target)}", text), f"{path}: no pip install -r {target}"


def test_hive_image_serves_the_thrift_calls_the_package_makes():
    """Hive 4.0.1 removed `get_table` (HIVE-26537); while the package calls it, stay below 4.0.1."""
    ref = service("hive-metastore")["image"]
    assert ref.startswith("apache/hive:"), f"hive-metastore: unexpected image {ref}"
    version = version_tuple(image_tag(ref))
    sources = "\n".join(p.read_text() for p in (ROOT / "plugins" / "hive_compaction").glob("*.py"))
    calls_get_table = re.search(r"""["']get_table["']|\.get_table\(""", sources)
    if calls_get_table:
        assert version < (4, 0, 1), (
            f"hive-metastore runs {ref}, which has no get_table Thrift call, but plugins/hive_compaction "
            "still calls it (use get_table_req, or keep the image below 4.0.1)")


# --- the warehouse ------------------------------------------------------------------------------

def test_metastore_warehouse_dir_options_agree():
    opts = metastore_options()
    given = {k: urlsplit(v).path.rstrip("/") for k, v in opts.items()
             if k in ("metastore.warehouse.dir", "hive.metastore.warehouse.dir")}
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


def test_warehouse_writers_share_one_uid():
    volume = warehouse_volume()
    users = {name: user_uid(name) for name in services()
             if any(m["source"] == volume and not m["read_only"] for m in mounts(name))}
    undeclared = sorted(n for n, uid in users.items() if uid is None)
    assert not undeclared, f"services writing the warehouse must state their user: {undeclared}"
    uids = {uid for uid in users.values() if uid not in ("0", "root")}
    assert len(uids) == 1, f"services writing the warehouse run as different uids: {users}"
    (uid,) = uids
    for name, user in users.items():
        if user in ("0", "root"):  # an init service: it must hand the volume to that uid
            target = next(m["target"] for m in mounts(name) if m["source"] == volume)
            script = command_text(name) + " " + command_text(name, "entrypoint")
            assert re.search(rf"chown\s+(-R\s+)?{uid}(:\d+)?\s+[^\n]*{re.escape(target)}", script), (
                f"{name} runs as root with the warehouse but does not chown {target} to uid {uid}")


# --- Airflow ------------------------------------------------------------------------------------

def test_airflow_services_mount_dags_plugins_and_spark_jobs_as_siblings():
    for name in AIRFLOW_SERVICES:
        by_source = {host_path(m["source"]).relative_to(ROOT).as_posix(): PurePosixPath(m["target"])
                     for m in mounts(name) if m["type"] == "bind"}
        for folder in ("dags", "plugins", "spark_jobs"):
            assert folder in by_source, f"{name}: ./{folder} is not mounted"
        dags, plugins, jobs = by_source["dags"], by_source["plugins"], by_source["spark_jobs"]
        assert dags.parent == plugins.parent == jobs.parent, (
            f"{name}: dags/, plugins/ and spark_jobs/ must be siblings (the DAG uses <dags>/../spark_jobs and "
            f"<dags>/../plugins): {dags}, {plugins}, {jobs}")
        assert jobs == dags.parent / "spark_jobs" and plugins == dags.parent / "plugins", (
            f"{name}: the folders must keep their names: {dags}, {plugins}, {jobs}")
        e = env(name)
        assert str(dags) == e.get("AIRFLOW__CORE__DAGS_FOLDER", str(AIRFLOW_HOME / "dags")), \
            f"{name}: ./dags is mounted at {dags}, not at Airflow's dags folder"
        assert str(plugins) == e.get("AIRFLOW__CORE__PLUGINS_FOLDER", str(AIRFLOW_HOME / "plugins")), \
            f"{name}: ./plugins is mounted at {plugins}, not at Airflow's plugins folder"


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
            db.get("POSTGRES_USER"), db.get("POSTGRES_PASSWORD"), db.get("POSTGRES_DB")), \
            f"{name}: SQL_ALCHEMY_CONN does not match {url.hostname}'s POSTGRES_* settings"
        assert (url.port or 5432) in (listening_ports(url.hostname) or {5432})


def test_airflow_shares_secrets_and_reaches_the_execution_api():
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        values = {name: env(name).get(key) for name in AIRFLOW_SERVICES}
        assert None not in values.values() and len(set(values.values())) == 1, f"{key} differs between services: {values}"
    api_servers = [n for n in AIRFLOW_SERVICES if command_text(n).strip() in ("api-server", "airflow api-server")]
    assert len(api_servers) == 1, f"expected one api-server service, found {api_servers}"
    for name in AIRFLOW_SERVICES:
        url = urlsplit(env(name).get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") or "")
        assert url.hostname == api_servers[0], f"{name}: the execution API URL does not name {api_servers[0]}"
        assert url.port in listening_ports(api_servers[0]), f"{name}: the execution API port is not served"


def test_connections_parse_and_point_at_services_and_ports():
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
                f"{name}: {key} uses port {conn.get('port')}, {host} listens on {sorted(listening_ports(host))}")
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
            f"dags/hive_compaction.yaml uses {key}: {conn_id}, the scheduler has no AIRFLOW_CONN_{conn_id.upper()}")


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
    jar_mounts = [m for m in mounts("hive-metastore")
                  if m["target"].rstrip("/") == "/opt/hive/auxlib" or
                  (m["target"].startswith("/opt/hive/lib/") and m["target"].endswith(".jar"))]
    assert jar_mounts, "hive-metastore: no JDBC driver mounted (/opt/hive/auxlib or /opt/hive/lib/*.jar)"
    for m in jar_mounts:
        if m["type"] == "bind":
            assert host_path(m["source"]).exists(), f"the JDBC driver {m['source']} does not exist"
            continue
        providers = [n for n in services() if n != "hive-metastore"
                     and any(o["source"] == m["source"] and not o["read_only"] for o in mounts(n))]
        assert providers, f"nothing writes the JDBC driver into volume {m['source']!r}"
        for provider in providers:
            assert depends_on("hive-metastore").get(provider) == "service_completed_successfully", (
                f"hive-metastore must wait for {provider} to fill {m['source']!r}")
            target = next(o["target"] for o in mounts(provider) if o["source"] == m["source"])
            assert re.search(rf"\b(cp|install|mv|curl|wget)\b[^\n]*{re.escape(target.rstrip('/'))}/\S+\.jar",
                             command_text(provider)), f"{provider} does not put a jar into {target}"


# --- the file as a whole ------------------------------------------------------------------------

def test_depends_on_names_existing_services_with_valid_conditions():
    for name in services():
        for dep, condition in depends_on(name).items():
            assert dep in services(), f"{name} depends on {dep!r}, which is no service"
            assert condition in DEPENDS_ON_CONDITIONS, f"{name} -> {dep}: unknown condition {condition!r}"
            if condition == "service_healthy":
                check = service(dep).get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{name} waits for {dep} to be healthy: no healthcheck"
            if condition == "service_completed_successfully":
                assert service(dep).get("restart", "no") in ("no", "on-failure"), (
                    f"{name} waits for {dep} to complete, but {dep} restarts forever")


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
    declared = set(compose().get("volumes") or {})
    for name in services():
        for m in mounts(name):
            if m["type"] == "volume" and m["source"]:
                assert m["source"] in declared, f"{name}: volume {m['source']!r} is not declared"


def test_variable_interpolations_have_defaults():
    """`docker compose up` must work without an .env file; `$$` is a literal dollar."""
    text = COMPOSE_FILE.read_text().replace("$$", "")
    for m in re.finditer(r"\$(\{[^}]*\}|\w+)", text):
        assert re.fullmatch(r"\{\w+:?-[^}]*\}", m.group(1)), (
            f"docker-compose.yaml: ${m.group(1)} is interpolated by Compose without a default (write $$ for the shell)")


def test_header_tells_how_to_start_and_where_the_ui_is():
    header = "".join(line for line in COMPOSE_FILE.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    assert "docker compose up -d" in header
    ui_ports = {str(p).split("/")[0].split(":")[-2] for p in service("airflow-apiserver").get("ports") or []
                if ":" in str(p)}
    assert ui_ports and all(f"localhost:{p}" in header for p in ui_ports), "the header must give the UI's address"
    assert warehouse_path() in header and "identical" in header


def test_compose_accepts_the_file():
    """Compose's own parser and validation, where a Compose binary is installed (no daemon needed)."""
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and subprocess.run(cmd + ["version"], capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("no Docker Compose here")
    run = subprocess.run(cmd + ["-f", str(COMPOSE_FILE), "config", "--quiet"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
