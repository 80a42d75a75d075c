# The project's image for docker-compose.yaml: Apache Airflow plus the pinned requirements
# (Spark provider, PySpark, hmsclient, ...), a Java runtime and the package's wheel.
#
# Build context: the repository root (docker-compose.yaml builds it with
#   build: {context: ., dockerfile: docker/airflow.Dockerfile}).
#
# The same image runs the Spark standalone master and worker of the compose stack, so the
# driver (spark-submit, started by Airflow's tasks in client mode) and the executors run the
# very same Spark (the jars of the pinned pyspark wheel), Java and Python.
#
# Keep AIRFLOW_VERSION equal to the apache-airflow pin in requirements.txt (tests/test_compose.py
# checks it): installing another Airflow over the image's own is not supported by Airflow.
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

ARG AIRFLOW_VERSION

USER root
# default-jre-headless: the Debian release's Java (17 on bookworm) for spark-submit, the Spark
# driver and the standalone master/worker; it provides /usr/lib/jvm/default-java on every CPU
# architecture.
# libpostgresql-jdbc-java: PostgreSQL's JDBC driver (/usr/share/java/postgresql.jar, Java 8
# class files), copied by the compose file's volume-init service into the Hive Metastore.
# (The man1 folder: slim Debian images leave it out, and the JRE's alternatives point into it.)
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless libpostgresql-jdbc-java \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java

USER airflow
COPY requirements.txt /requirements.txt
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /requirements.txt

# The package as platform teams install it: a wheel built from this checkout (pyproject.toml,
# plugins/), installed non-editable; no source folder on PYTHONPATH. It carries the merge and
# rollback jobs and the JVM helper's source. Rebuild the image after a change to plugins/.
COPY --chown=airflow:0 pyproject.toml README.md /tmp/hive-compaction/
COPY --chown=airflow:0 plugins /tmp/hive-compaction/plugins
RUN pip wheel --no-cache-dir --no-deps -w /tmp/hive-compaction/dist /tmp/hive-compaction \
 && pip install --no-cache-dir --no-deps /tmp/hive-compaction/dist/hive_compaction-*.whl \
 && rm -rf /tmp/hive-compaction \
 && python -c "import hive_compaction.jobs as j; print('hive_compaction', j.MERGE_JOB)"

# Fail the build, not the first DAG run, when the pyspark Python code and its jars disagree
# (pyspark-client installs its own copy of the pyspark package) or Spark cannot start Java.
RUN python -c "import glob, os, pyspark; \
jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), 'jars', 'spark-core_*.jar')); \
assert jars and all(pyspark.__version__ in os.path.basename(j) for j in jars), (pyspark.__version__, jars)" \
 && spark-submit --version
