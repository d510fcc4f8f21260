-- ptelab results database, schema version 1.
--
-- Applied by src/store/mod.rs through PRAGMA user_version. This file is the
-- version-1 schema and is frozen once released: later changes are numbered
-- files in migrations/ (0002_*.sql, ...), each taking the database from
-- version N-1 to N.
--
-- Times are UTC, ISO 8601 ("2026-05-01T12:34:56Z"). Nanoseconds are REAL
-- because one sample is the mean ns per call over a batch of calls.

CREATE TABLE run (
    id             INTEGER PRIMARY KEY,
    -- "bench" | "sweep" | "model" | "crosscheck" | "reproduce"
    kind           TEXT    NOT NULL,
    command        TEXT    NOT NULL,
    started_at     TEXT    NOT NULL,
    finished_at    TEXT,
    -- A run killed mid-way stays 'running'; readers report it as interrupted
    -- when its process (pid on boot_id) is gone.
    status         TEXT    NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'complete', 'interrupted', 'failed')),
    pid            INTEGER,
    boot_id        TEXT,
    host_json      TEXT    NOT NULL,
    kernel_release TEXT    NOT NULL,
    arch           TEXT    NOT NULL,
    machine_id     TEXT    NOT NULL,
    tool_version   TEXT    NOT NULL,
    git_revision   TEXT
);

CREATE TABLE run_tag (
    run INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    tag TEXT    NOT NULL,
    PRIMARY KEY (run, tag)
) WITHOUT ROWID;
CREATE INDEX run_tag_by_tag ON run_tag(tag, run);

CREATE TABLE cell (
    id                   INTEGER PRIMARY KEY,
    run                  INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    -- "kernel" (a measured CellResult) | "model" (a ModelCellRecord)
    backend              TEXT    NOT NULL CHECK (backend IN ('kernel', 'model')),
    workload             TEXT    NOT NULL,
    size_bytes           INTEGER NOT NULL,
    folio                TEXT    NOT NULL,
    phase                TEXT,
    regions              INTEGER,
    neighbor             INTEGER,
    arch                 TEXT,
    strategy             TEXT,
    -- The requested layout ({"folio": "64K", "regions": 1, "neighbor": false})
    -- and the observed one (record::Layout), as JSON.
    layout_requested     TEXT,
    layout_observed      TEXT,
    layout_matches       INTEGER,
    ns_median            REAL,
    ns_ci_low            REAL,
    ns_ci_high           REAL,
    ns_min               REAL,
    ns_mean              REAL,
    ns_per_page          REAL,
    tlb_flushes_per_call REAL,
    -- The whole record as JSON, without the parts stored in the sample,
    -- counter and flush tables. The numbers with a REAL column above are
    -- read back from the column (exact), not from the JSON (serde_json parses
    -- floats to within one ULP).
    cell_json            TEXT    NOT NULL
);
CREATE INDEX cell_by_run ON cell(run);

CREATE TABLE sample (
    cell INTEGER NOT NULL REFERENCES cell(id) ON DELETE CASCADE,
    idx  INTEGER NOT NULL,
    ns   REAL    NOT NULL,
    PRIMARY KEY (cell, idx)
) WITHOUT ROWID;

-- Model counters per mm call.
CREATE TABLE counter (
    cell  INTEGER NOT NULL REFERENCES cell(id) ON DELETE CASCADE,
    name  TEXT    NOT NULL,
    value REAL    NOT NULL,
    PRIMARY KEY (cell, name)
) WITHOUT ROWID;

-- TLB flush breakdown: "reason/pages" -> events.
CREATE TABLE flush (
    cell   INTEGER NOT NULL REFERENCES cell(id) ON DELETE CASCADE,
    key    TEXT    NOT NULL,
    events INTEGER NOT NULL,
    PRIMARY KEY (cell, key)
) WITHOUT ROWID;
