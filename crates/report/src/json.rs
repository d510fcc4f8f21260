//! Measured cells as the JSON documents of stored and guest runs print them
//! (`show --json`, `vm --json`, `reproduce --json`): the record
//! ([`CellResult`]) with every figure measured on the run's clock named by
//! what it holds, and the unit beside it.
//!
//! | record field | printed as | holds |
//! |---|---|---|
//! | `ns_per_call` | `per_call` | median, CI, min, mean and samples per call |
//! | `ns_per_page` | `per_page` | median per call over the 4K pages one call covers |
//! | `probe_ns` | `probe` | the kernel-speed probe per block (one `getppid(2)`) |
//! | `memory_probe_ns` | `memory_probe` | the memory-latency probe per block (one dependent load) |
//! | (none) | `unit` | `ns` (the host, a KVM guest) or `instructions` (a TCG guest, icount) |
//!
//! A guest under TCG runs with `-icount shift=0`: its clock advances one
//! "nanosecond" per instruction, so the same record holds instructions there,
//! and only the host, which chose the accelerator, knows it
//! ([`crate::record::Guest`]). The record keeps its names wherever it
//! travels as written by the process that measured: the database's cell
//! JSON, `bench --json` and `sweep --json` (on the host their figures are
//! nanoseconds; in a guest they are the answer `fleet::Measured::parse`
//! reads). Reading takes either name (serde aliases in `record`), so
//! `runs --import` reads a `show --json` document of this shape or of the
//! shape before it. The documents keep their `v1` schema: a reader of the
//! older names finds no `ns_per_call` rather than a wrong one.

use serde_json::Value;

use crate::record::{CellResult, Metric};

/// (record name, printed name) of the figures in the run's unit.
pub const RENAMED: [(&str, &str); 4] = [
    ("ns_per_call", "per_call"),
    ("ns_per_page", "per_page"),
    ("probe_ns", "probe"),
    ("memory_probe_ns", "memory_probe"),
];

/// `cell`, measured in `metric`, as documents print it (see the module
/// documentation). Keys are in alphabetical order.
pub fn cell(cell: &CellResult, metric: Metric) -> Value {
    let mut v = serde_json::to_value(cell).expect("a cell serializes to JSON");
    if let Value::Object(o) = &mut v {
        for (from, to) in RENAMED {
            if let Some(x) = o.remove(from) {
                o.insert(to.into(), x);
            }
        }
        o.insert("unit".into(), metric.unit_words().into());
    }
    v
}

/// Every cell of `cells`, measured in `metric`, as documents print them.
pub fn cells(cells: &[CellResult], metric: Metric) -> Vec<Value> {
    cells.iter().map(|c| cell(c, metric)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fixtures::fixture;
    use crate::workload::FolioSpec;

    #[test]
    fn figures_are_named_by_what_they_hold_and_read_back() {
        let mut c = fixture(400, 38535.0, FolioSpec::Base);
        c.probe_ns = vec![211.0, f64::NAN];
        c.memory_probe_ns = vec![95.0];
        let v = cell(&c, Metric::Instructions);
        assert_eq!(v["unit"], "instructions");
        assert_eq!(v["per_call"]["median"], 38535.0);
        assert_eq!(v["per_page"], 38535.0 / 100.0);
        assert_eq!(v["probe"], serde_json::json!([211.0, null]));
        assert_eq!(v["memory_probe"], serde_json::json!([95.0]));
        let text = v.to_string();
        for old in ["ns_per_call", "ns_per_page", "probe_ns"] {
            assert!(!text.contains(old), "{old} in {text}");
        }
        assert_eq!(cell(&c, Metric::Time)["unit"], "ns");
        // The record reads either shape: what documents print, and what the
        // database, bench --json and older documents hold.
        let back: CellResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.ns_per_call, c.ns_per_call);
        assert_eq!(back.ns_per_page, c.ns_per_page);
        assert_eq!(back.memory_probe_ns, c.memory_probe_ns);
        assert!(back.probe_ns[1].is_nan() && back.probe_ns[0] == 211.0);
        let old: CellResult = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(old.ns_per_call, c.ns_per_call);
        let record = serde_json::to_value(&c).unwrap();
        assert!(record.get("ns_per_call").is_some() && record.get("unit").is_none());
    }
}
