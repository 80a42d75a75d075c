"""The Airflow side: config, the run form, planning from the Metastore, the task bodies, the report,
alerts and assets. Imports no py4j or pyspark; of the rest of the package only ``model`` and the pure
``storage.paths`` / ``storage.capabilities``."""
