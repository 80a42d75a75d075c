"""A notifier for the tests: appends what it was given (its rendered fields and the failure) to a
JSON-lines file. Importable by path as ``alert_recorder.RecordingNotifier`` (tests/ on PYTHONPATH)."""

from __future__ import annotations

import json

from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    template_fields = ("message",)

    def __init__(self, path: str, message: str = "{{ failure.message }}"):
        super().__init__()
        self.path = path
        self.message = message

    def notify(self, context):
        ti = context["ti"]
        with open(self.path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "message": self.message,
                        "failure": context["failure"],
                        "task_id": ti.task_id,
                        "map_index": ti.map_index,
                    }
                )
                + "\n"
            )


class BrokenNotifier(BaseNotifier):
    def notify(self, context):
        raise RuntimeError("the mail server is down")
