# Environment for the embedded local stack; sourced by the Makefile targets.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HIVE_COMPACTION_STATE="${HIVE_COMPACTION_STATE:-$ROOT/.state}"
export HIVE_METASTORE_PORT="${HIVE_METASTORE_PORT:-9083}"
export PATH="$ROOT/.venv/bin:$PATH"
export AIRFLOW_HOME="$HIVE_COMPACTION_STATE/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__UNIT_TEST_MODE=False
export AIRFLOW__LOGGING__LOGGING_LEVEL="${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}"
export AIRFLOW_CONN_HIVE_METASTORE="{\"conn_type\":\"generic\",\"host\":\"127.0.0.1\",\"port\":$HIVE_METASTORE_PORT}"
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[2]"}'
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"
