//! What a bisect has measured, kept under the kernel cache
//! (`bisect/state/KEY.json`, KEY from the endpoints, arch, config, build
//! and guest command), so an interrupted bisect run again with the same
//! arguments takes every figure it already has instead of booting again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::classify::Quantity;

/// One kernel's figures (a Debian version or a commit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The cell's median per call, or its counter, one per replicate.
    pub figures: Vec<f64>,
    /// What the figures are (state files from before counters hold only
    /// the metric).
    #[serde(flatten)]
    pub quantity: Quantity,
    /// The guest's `uname -r`.
    pub release: String,
    /// The cell's size in bytes.
    pub size_bytes: u64,
    /// Stored runs, one per replicate (empty with --no-store).
    pub run_ids: Vec<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// The endpoints and the command, as given (for a person reading it).
    pub about: String,
    pub measured: BTreeMap<String, Measurement>,
    #[serde(skip)]
    path: PathBuf,
}

impl State {
    /// The state at `dir/KEY.json`, empty when there is none (or it
    /// cannot be read: it is only a shortcut).
    pub fn load(dir: &Path, key: &str, about: &str) -> State {
        let path = dir.join(format!("{key}.json"));
        let mut s: State = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        s.path = path;
        s.about = about.to_string();
        s
    }

    /// Record a measurement and write the file (renamed into place, so it
    /// is whole or absent).
    pub fn record(&mut self, id: &str, m: Measurement) -> anyhow::Result<()> {
        self.measured.insert(id.to_string(), m);
        let dir = self.path.parent().expect("state in a directory");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = self.path.with_extension("partial");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("writing {}", self.path.display()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Counter, Metric};

    #[test]
    fn a_state_survives_a_reload() {
        let d = tempfile::tempdir().unwrap();
        let mut s = State::load(d.path(), "k", "good..bad");
        assert!(s.measured.is_empty());
        let m = Measurement {
            figures: vec![370_670.0],
            quantity: Quantity::figure(Metric::Instructions),
            release: "6.16.12+deb13-cloud-amd64".into(),
            size_bytes: 4 << 20,
            run_ids: vec![3],
        };
        s.record("6.16.12", m.clone()).unwrap();
        let again = State::load(d.path(), "k", "good..bad");
        assert_eq!(again.measured["6.16.12"], m);
        assert!(State::load(d.path(), "other", "x").measured.is_empty());
    }

    #[test]
    fn a_counter_is_kept_and_a_state_from_before_counters_still_reads() {
        let d = tempfile::tempdir().unwrap();
        let mut s = State::load(d.path(), "k", "good..bad");
        let m = Measurement {
            figures: vec![100.0],
            quantity: Quantity {
                metric: Metric::Instructions,
                counter: Some(Counter::parse("calls:vm_normal_page").unwrap()),
            },
            release: "6.17.8+deb13-cloud-amd64".into(),
            size_bytes: 400 << 10,
            run_ids: vec![],
        };
        s.record("6.17.8", m.clone()).unwrap();
        let text = std::fs::read_to_string(s.path()).unwrap();
        assert!(
            text.contains("\"counter\": \"calls:vm_normal_page\""),
            "{text}"
        );
        assert_eq!(State::load(d.path(), "k", "x").measured["6.17.8"], m);

        // Written before --metric: no counter field.
        let old = r#"{"about": "debian:6.16.12..debian:6.17.13 -- bench mprotect-toggle",
            "measured": {"6.16.12": {"figures": [190742.0], "metric": "instructions",
            "release": "6.16.12+deb13-cloud-amd64", "size_bytes": 4194304, "run_ids": [7]}}}"#;
        std::fs::write(d.path().join("old.json"), old).unwrap();
        let m = &State::load(d.path(), "old", "x").measured["6.16.12"];
        assert_eq!(m.quantity, Quantity::figure(Metric::Instructions));
        assert_eq!(
            (m.figures.as_slice(), m.run_ids.as_slice()),
            (&[190742.0][..], &[7][..])
        );
    }
}
