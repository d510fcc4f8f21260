-- Version 3: the mechanism counters of a guest cell (`ptelab vm --profile`,
-- docs/guests.md, "Mechanism counters"). The rest of a cell's profile (TLB
-- invalidations, instruction totals, where its symbols came from) is in
-- cell_json; the per-function counts have a table of their own, so that a
-- function can be found across runs.

CREATE TABLE cell_function (
    cell         INTEGER NOT NULL REFERENCES cell(id) ON DELETE CASCADE,
    -- The kernel function (its symbol), in the profile's order (most
    -- instructions first).
    idx          INTEGER NOT NULL,
    name         TEXT    NOT NULL,
    -- Per mm call: entries at the function's first instruction, and
    -- instructions executed in it (inlined code included).
    entries      REAL    NOT NULL,
    instructions REAL    NOT NULL,
    PRIMARY KEY (cell, idx)
) WITHOUT ROWID;
CREATE INDEX cell_function_by_name ON cell_function(name, cell);
