"""Tables by pattern (issue 55): the names' syntax, their resolution against the Metastore's names (a
double here), the form's field, the DAG's shape, and the asset events of the matched tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hive_compaction.airflow import alerts, assets, config, table_resolution
from hive_compaction.airflow.config import ConfigError
from hive_compaction.airflow.metastore_types import TableInfo
from hive_compaction.airflow.run_params import ParamError, params_schema, select
from hive_compaction.airflow.table_patterns import parse

ROOT = Path(__file__).resolve().parents[1]
MB = 1024**2


class Catalog:
    """The Metastore's names, counting the calls resolution makes."""

    def __init__(self, names: dict[str, list[str]]):
        self.names = names
        self.calls: list[str] = []

    def databases(self):
        self.calls.append("get_all_databases")
        return list(self.names)

    def table_names(self, database):
        self.calls.append(f"get_tables {database}")
        return list(self.names.get(database, []))

    def tables(self, database, names):
        self.calls.append(f"get_table_objects_by_name_req {database} {len(list(names))}")
        return [
            TableInfo(
                database=database,
                table=t,
                location=f"file:///w/{database}.db/{t}",
                storage_format="orc",
                input_format="",
                partition_keys=(("dt", "string"),),
                table_type="EXTERNAL_TABLE",
            )
            for t in names
            if t in [n.lower() for n in self.names.get(database, [])]
        ]


METASTORE = {
    "sales": ["orders", "refunds", "tmp_load"],
    "ads": ["clicks", "Views"],
    "hr": ["people"],
    "default": ["hive_compaction_results", "misc"],
}


def resolved(raw: dict, names: dict = METASTORE):
    settings = config.parse(raw, "c.yaml")
    catalog = Catalog(names)
    return table_resolution.resolve(settings, catalog), catalog, settings


@pytest.mark.parametrize(
    "text, kind, database",
    [
        ("sales.orders", "exact", "sales"),
        ("Sales.*", "glob", "sales"),
        ("*.orders", "glob", None),
        ("s?les.[ot]*", "glob", None),
        ("re:(sales|ads)\\..*", "regex", None),
    ],
)
def test_names_globs_and_regular_expressions(text, kind, database):
    p = parse(text)
    assert (p.kind, p.database) == (kind, database)


def test_a_bad_regular_expression_is_refused_naming_the_entry():
    with pytest.raises(
        ConfigError,
        match=r"c\.yaml: tables\[1\]: 're:sales.*' is not a valid regular "
        r"expression: missing \)",
    ):
        config.parse({"tables": ["a.b", "re:sales\\.("]}, "c.yaml")
    with pytest.raises(ConfigError, match=r"c\.yaml: exclude\[0\]: 're:\[' is not a valid regular expression"):
        config.parse({"tables": ["a.*"], "exclude": ["re:["]}, "c.yaml")


def test_a_whole_database_a_glob_and_a_regex_with_exclude_and_the_results_table_left_out():
    r, catalog, _ = resolved({"tables": ["sales.*", "re:ads\\.c.*", "default.*"], "exclude": ["sales.tmp_*"]})
    assert [t.name for t in r.tables] == ["ads.clicks", "default.misc", "sales.orders", "sales.refunds"]
    assert r.describe() == [
        {"entry": "sales.*", "tables": ["sales.orders", "sales.refunds"], "excluded": ["sales.tmp_load"]},
        {"entry": "re:ads\\.c.*", "tables": ["ads.clicks"], "excluded": []},
        {"entry": "default.*", "tables": ["default.misc"], "excluded": ["default.hive_compaction_results"]},
    ]
    # a regex may match any database: every database is listed once, its tables once, then fetched in batches
    assert catalog.calls[0] == "get_all_databases" and catalog.calls.count("get_all_databases") == 1
    assert sorted(c for c in catalog.calls if c.startswith("get_tables")) == [
        "get_tables ads",
        "get_tables default",
        "get_tables hr",
        "get_tables sales",
    ]
    assert set(r.infos) == {"ads.clicks", "default.misc", "sales.orders", "sales.refunds"}


def test_patterns_naming_their_databases_do_not_list_the_databases():
    r, catalog, _ = resolved({"tables": ["sales.*", "ads.*"]})
    assert "get_all_databases" not in catalog.calls
    assert [t.name for t in r.tables] == ["ads.clicks", "ads.views", "sales.orders", "sales.refunds", "sales.tmp_load"]


def test_policy_is_defaults_then_the_database_then_the_entry_and_an_exact_name_wins():
    r, _, _ = resolved(
        {
            "defaults": {"target_file_size": "256MB", "min_small_files": 3},
            "databases": {"Sales": {"target_file_size": "512MB", "merge_mode": "copy"}},
            "tables": [
                {"name": "*.*", "min_small_files": 5},  # first: gives every matched table's own keys
                {"name": "sales.*", "min_small_files": 9},  # never reached: *.* matched first
                {"name": "sales.orders", "merge_mode": "rewrite"},
            ],
        }
    )
    policies = {t.name: t.policy for t in r.tables}
    assert policies["sales.orders"].merge_mode == "rewrite"  # exact, wherever it stands
    assert policies["sales.orders"].target_file_size == 512 * MB  # its database's section
    assert policies["sales.refunds"].target_file_size == 512 * MB and policies["sales.refunds"].merge_mode == "copy"
    assert policies["sales.refunds"].min_small_files == 5
    assert policies["hr.people"].target_file_size == 256 * MB and policies["hr.people"].min_small_files == 5
    assert r.matched_by["sales.refunds"] == "*.*" and "sales.orders" not in r.matched_by
    assert r.describe()[1] == {"entry": "sales.*", "tables": [], "excluded": []}


def test_a_databases_section_applies_without_a_defaults_section():
    r, _, _ = resolved(
        {
            "databases": {"sales": {"merge_mode": "copy"}},
            "tables": ["sales.orders", {"name": "sales.refunds", "min_small_files": 7}, "sales.t*"],
        },
        {"sales": ["orders", "refunds", "tmp_load"]},
    )
    policies = {t.name: t.policy for t in r.tables}
    assert {name: p.merge_mode for name, p in policies.items()} == {
        "sales.orders": "copy",
        "sales.refunds": "copy",
        "sales.tmp_load": "copy",
    }
    assert policies["sales.refunds"].min_small_files == 7


def test_an_entry_whose_keys_disagree_with_a_databases_section_is_refused_naming_both():
    with pytest.raises(ConfigError, match=r"c\.yaml: table \*\.events \(with databases: small\): .*small_file_limit"):
        config.parse(
            {
                "databases": {"small": {"target_file_size": "32MB", "small_file_limit": "16MB"}},
                "tables": [{"name": "*.events", "small_file_limit": "64MB"}],
            },
            "c.yaml",
        )


def test_an_excluded_exact_name_and_an_entry_listed_twice_are_refused():
    with pytest.raises(ConfigError, match="table sales.orders is listed and excluded"):
        config.parse({"tables": ["sales.orders"], "exclude": ["sales.*"]})
    with pytest.raises(ConfigError, match=r"table Sales\.\* is listed twice"):
        config.parse({"tables": ["sales.*", "Sales.*"]})


def test_a_table_created_since_is_matched_by_the_next_resolution():
    names = {"sales": ["orders"]}
    first, _, settings = resolved({"tables": ["sales.*"]}, names)
    names["sales"].append("returns")
    second = table_resolution.resolve(settings, Catalog(names))
    assert [t.name for t in first.tables] == ["sales.orders"]
    assert [t.name for t in second.tables] == ["sales.orders", "sales.returns"]


def test_the_form_takes_names_and_patterns_of_the_resolved_tables():
    r, _, settings = resolved({"tables": ["sales.*", "hr.people"]})
    s = r.settings(settings)
    picked = select(s, {"tables": ["sales.o*", "hr.people", "re:sales\\..*"]}, "manual", None)
    assert [t.name for t in picked.tables] == ["sales.orders", "hr.people", "sales.refunds", "sales.tmp_load"]
    with pytest.raises(ParamError, match=r"tables: 'ads\.\*' matches no configured table"):
        select(s, {"tables": ["ads.*"]}, "manual", None)
    with pytest.raises(ParamError, match="tables: .*not a valid regular expression"):
        select(s, {"tables": ["re:("]}, "manual", None)
    schema = params_schema([t.name for t in settings.tables], [p.entry for p in settings.patterns])["tables"]
    assert "enum" not in schema["items"] and schema["examples"] == ["hr.people", "sales.*"]


REPORT = {
    "run": "manual__x",
    "dry_run": False,
    "matched_by": {"sales.orders": "sales.*"},
    "partitions": [
        {
            "table": t,
            "partition": "dt=2026-01-01",
            "status": "merged",
            "files_before": 4,
            "files_after": 1,
            "bytes_before": 40,
            "bytes_after": 30,
            "rows": 9,
            "rows_merged": 9,
        }
        for t in ("sales.orders", "hr.people")
    ],
}


def test_only_the_matched_tables_get_alias_events_with_their_partitions_in_the_extra():
    [e] = assets.alias_events(REPORT)
    assert (e.entry, e.table, e.extra["merged_partitions"]) == ("sales.*", "sales.orders", ["dt=2026-01-01"])
    assert e.extra["files_before"] == 4 and e.extra["partitions"]["dt=2026-01-01"]["rows"] == 9
    assert assets.alias_name("sales.*") == "hive_compaction:sales.*"


def test_a_failure_of_the_pattern_events_task_names_the_matched_tables():
    plan = {
        "matched_by": {"sales.orders": "sales.*"},
        "batches": [{"batch": 0, "label": "x", "partitions": [["sales.orders", "dt=1"], ["hr.people", "dt=1"]]}],
    }
    f = alerts.failure(f"{alerts.ASSET_EVENT_TASKS}{alerts.PATTERN_EVENTS_TASK}", "r", plan=plan, exception="x")
    assert f["tables"] == ["sales.orders"] and f["partitions"] == ["sales.orders/dt=1"]


def test_the_dags_shape_does_not_grow_with_the_tables_a_pattern_matches(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"tables": ["db.events", "sales.*", "re:ads\\..*"]}))
    monkeypatch.setenv(config.CONFIG_ENV, str(cfg))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["hive_compaction"]
    assert sorted(dag.task_ids) == ["compacted.by_pattern", "compacted.db.events", "merge", "plan", "refresh_metastore"]
    outlets = dag.get_task("compacted.by_pattern").outlets
    assert [o.name for o in outlets] == ["hive_compaction:sales.*", "hive_compaction:re:ads\\..*"]
