"""The supported-stores statement lives in one place: ``storage/capabilities.py``. docs/deploy.md
quotes its table (``supported_stores_table``) between markers, and no other doc says that a
store the table refuses works."""

from __future__ import annotations

import re
from pathlib import Path

from hive_compaction.storage import capabilities

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- supported-stores: begin (generated from storage/capabilities.py) -->\n"
END = "<!-- supported-stores: end -->"


def test_deploy_md_quotes_the_capability_table():
    text = (ROOT / "docs" / "deploy.md").read_text()
    assert BEGIN in text and END in text, "docs/deploy.md lost its supported-stores markers"
    quoted = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert quoted == capabilities.supported_stores_table(), (
        "docs/deploy.md's supported-storage table differs from storage/capabilities.py: paste "
        "`python -c 'from hive_compaction.storage.capabilities import supported_stores_table as t; "
        'print(t(), end="")\'` '
        "between its markers"
    )


def test_the_table_follows_the_refusals():
    table = capabilities.supported_stores_table()
    assert "| `s3a` | refused | yes |" in table  # in place refused on an object store, the switch allowed
    assert "| `hdfs` | yes | yes |" in table
    for scheme in capabilities.OTHER_SCHEMES:
        assert capabilities.commit_refusal(scheme, capabilities.IN_PLACE)
        assert capabilities.commit_refusal(scheme, capabilities.LOCATION_SWITCH)


def test_no_doc_says_a_refused_store_works():
    """A line of the README or docs/ naming a store the table refuses says it is refused (or links
    to the table); ABFS once was listed as working while the code refused it."""
    refused = "|".join(capabilities.OTHER_SCHEMES + ("gcs", "azure", "adls"))
    wrong = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(rf"`({refused})(://)?`|\b(ABFS|GCS|ADLS)\b", line) and not re.search(
                r"refus|supported-storage|not known|not supported|no\b", line, re.I
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not wrong, "these lines name a refused store without saying so:\n" + "\n".join(wrong)
