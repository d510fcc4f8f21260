-- Version 2: a machine's between-run repeatability, measured by
-- `ptelab calibrate` (docs/statistics.md, "Calibrating the noise threshold").
-- `ptelab compare` takes the newest calibration of the runs' machine as its
-- noise threshold floor.

CREATE TABLE calibration (
    id             INTEGER PRIMARY KEY,
    machine_id     TEXT    NOT NULL,
    kernel_release TEXT    NOT NULL,
    measured_at    TEXT    NOT NULL,
    -- Coefficients as fractions (0.048 = 95% of A/A differences under 4.8%):
    -- with compare's drift correction, and raw (--normalize none).
    adjusted       REAL    NOT NULL,
    raw            REAL    NOT NULL,
    -- The whole record (runs used, grid, per-cell figures) as JSON.
    calibration_json TEXT  NOT NULL
);
CREATE INDEX calibration_by_machine ON calibration(machine_id, id);
