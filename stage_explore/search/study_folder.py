"""A study's output folder: the checks before a run records into it and the study file it
writes (split from :mod:`~stage_explore.search.driver`, s33 simplify).

Holds :func:`check_study_folder` (records there need ``resume``; a resumed study must keep the
recorded study's fingerprint) and :func:`write_study_meta` (the ``study.json`` a resume reads
back: the records version, the fingerprint and the study).
"""

from __future__ import annotations

import json
from pathlib import Path

from stage_core.errors import ConfigError
from stage_explore.records import (
    RECORDS_VERSION,
    STUDY_FILE,
    make_folder,
    part_files,
    read_study_meta,
    write_json_atomic,
)
from stage_explore.search.replay import as_recorded
from stage_explore.study.spec import StudySpec


def check_study_folder(directory: Path, spec: StudySpec, resume: bool) -> None:
    """Refuse to run ``spec`` into ``directory`` (a :class:`~stage_core.errors.ConfigError`
    naming the folder or the changed section) when it holds records and ``resume`` is off,
    when ``resume`` is on and it holds no recorded study, or when the recorded study's
    fingerprint differs from ``spec``'s in any section (the space compared as recorded,
    :func:`~stage_explore.search.replay.as_recorded`)."""
    meta = directory / STUDY_FILE
    if part_files(directory) and not resume:
        raise ConfigError(
            f"{directory} already holds records of study {spec.name!r}; "
            "pass --resume to continue it, or choose another --out"
        )
    recorded = read_study_meta(directory) if resume else None
    if resume and recorded is None and not part_files(directory):
        raise ConfigError(
            f"resume: {directory} holds no recorded study (expected {STUDY_FILE} or "
            "part-*.parquet files there); start it without resume, or check the output folder"
        )
    if recorded is not None:
        stored = recorded.get("fingerprint", {})
        for section, value in spec.fingerprint().items():
            if section == "space":
                value = as_recorded(value, stored.get(section))
            if json.dumps(stored.get(section), sort_keys=True) != json.dumps(value, sort_keys=True):
                raise ConfigError(
                    f"{spec.path}: [{section}] differs from the study recorded "
                    f"in {meta}; a resumed study must keep it unchanged"
                )


def write_study_meta(directory: Path, spec: StudySpec) -> None:
    """Create ``directory`` and write ``spec``'s study file there (atomically): the records
    version, its fingerprint (what :func:`check_study_folder` compares on resume) and the
    study itself."""
    make_folder(directory)
    write_json_atomic(
        directory / STUDY_FILE,
        {
            "records_version": RECORDS_VERSION,
            "fingerprint": spec.fingerprint(),
            "study": spec.to_dict(),
        },
    )
