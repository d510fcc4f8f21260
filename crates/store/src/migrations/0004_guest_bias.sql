-- Version 4: the bias of a guest figure, measured by `ptelab calibrate
-- --guest` (docs/guests.md, "The bias of a guest figure"): one cell booted
-- K times with setups unrelated to the kernel path, per kernel and arch.
-- `compare` of guest runs and `reproduce`'s guest verdicts read it.

CREATE TABLE guest_bias (
    id          INTEGER PRIMARY KEY,
    -- The guest's `uname -r` and arch: what a stored guest run records.
    release     TEXT    NOT NULL,
    arch        TEXT    NOT NULL,
    workload    TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    folio       TEXT    NOT NULL,
    phase       TEXT,
    measured_at TEXT    NOT NULL,
    -- The bias: the largest change between two boots' figures (max / min - 1),
    -- as a fraction.
    spread      REAL    NOT NULL,
    -- The whole record (kernel spec, every boot's setup and figure) as JSON.
    bias_json   TEXT    NOT NULL
);
CREATE INDEX guest_bias_by_kernel ON guest_bias(release, arch, id);
