//! Which cells of two runs are the same experiment, and whether their
//! layouts let them be compared.

use ptelab_stats::compare::NotComparable;

use crate::error::bail_usage;
use crate::record::{Accel, CellResult, Metric};
use crate::store::{RunSummary, StoredRun};
use crate::workload::Arch;

/// What pairs two cells: everything but the kernel that ran them (and, with
/// `--across-folios`, but the folio layout).
pub(super) type CellKey = (String, u64, String, Option<String>, u32, bool);

pub(super) fn key(c: &CellResult, across_folios: bool) -> CellKey {
    (
        c.workload.name().to_string(),
        c.size_bytes,
        if across_folios {
            String::new()
        } else {
            c.folio.to_string()
        },
        c.phase.clone(),
        c.regions,
        c.neighbor,
    )
}

/// A usage error unless every run of `runs` (named `name`) has measured
/// cells.
pub(super) fn require_cells(name: &str, runs: &[StoredRun]) -> anyhow::Result<()> {
    if let Some(r) = runs.iter().find(|r| r.kernel_cells().next().is_none()) {
        bail_usage!(
            "run {} ('{name}', {}) has no measured cells to compare: compare runs made by \
             `ptelab bench` or `ptelab sweep`",
            r.run.id,
            r.run.kind
        );
    }
    Ok(())
}

/// What makes two runs' figures commensurable: the arch their kernel ran
/// on, and the metric and accelerator they were measured in (the host
/// counting as its own). An x86-64 instruction count says nothing about an
/// arm64 one, instructions and nanoseconds have no ratio, and a KVM guest's
/// time is not the host's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    /// Canonical (`Arch::name`) when known; as stored otherwise.
    pub arch: String,
    pub metric: Metric,
    pub accel: Option<Accel>,
}

impl Measured {
    pub fn of(r: &RunSummary) -> Measured {
        Measured {
            arch: Arch::parse(&r.arch).map_or_else(|| r.arch.clone(), |a| a.name().to_string()),
            metric: r.metric(),
            accel: r.guest.as_ref().map(|g| g.accel),
        }
    }

    /// Whether runs measured so compare with runs measured as `self`. A run
    /// whose arch was not recorded (imported from an older document)
    /// conflicts with none.
    pub fn compares_with(&self, other: &Measured) -> bool {
        let arch = self.arch.is_empty() || other.arch.is_empty() || self.arch == other.arch;
        arch && self.metric == other.metric && self.accel == other.accel
    }
}

impl std::fmt::Display for Measured {
    /// `x86_64 time on the host`, `arm64 instructions in a tcg guest`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arch = if self.arch.is_empty() {
            "unknown-arch"
        } else {
            &self.arch
        };
        match self.accel {
            None => write!(f, "{arch} {} on the host", self.metric),
            Some(a) => write!(f, "{arch} {} in a {a} guest", self.metric),
        }
    }
}

/// Why the runs of two sides cannot be compared (None: they can): a run
/// measured otherwise than A's first run, named with both.
pub fn incomparable(
    (name_a, runs_a): (&str, &[StoredRun]),
    (name_b, runs_b): (&str, &[StoredRun]),
) -> Option<String> {
    let first = runs_a.first()?;
    let how = Measured::of(&first.run);
    let named = runs_a
        .iter()
        .map(|r| (name_a, r))
        .chain(runs_b.iter().map(|r| (name_b, r)));
    for (name, r) in named {
        let other = Measured::of(&r.run);
        if !how.compares_with(&other) {
            return Some(format!(
                "run {} ('{name_a}') was measured as {how} but run {} ('{name}') as {other}: \
                 compare runs of one arch, one metric and one accelerator",
                first.run.id, r.run.id
            ));
        }
    }
    None
}

/// A usage error unless every run of both sides was measured alike
/// ([`incomparable`]). Returns the shared metric.
pub(super) fn require_comparable(
    a: (&str, &[StoredRun]),
    b: (&str, &[StoredRun]),
) -> anyhow::Result<Metric> {
    if let Some(why) = incomparable(a, b) {
        bail_usage!("{why}");
    }
    Ok(a.1[0].run.metric())
}

/// The distinct keys of `cells` in first-seen order (A's cells first, then
/// the ones only B has).
pub(super) fn keys_in_order<'a>(
    cells: impl Iterator<Item = &'a CellResult>,
    across_folios: bool,
) -> Vec<CellKey> {
    let mut keys: Vec<CellKey> = Vec::new();
    for c in cells {
        let k = key(c, across_folios);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// The folio column of a row: one folio, or `4K vs 64K` across folios.
pub(super) fn folio_label(a: Option<&CellResult>, b: Option<&CellResult>) -> String {
    match (a, b) {
        (Some(x), Some(y)) if x.folio != y.folio => format!("{} vs {}", x.folio, y.folio),
        (x, y) => x.or(y).expect("a row has a cell").folio.to_string(),
    }
}

/// Why two cells with one key cannot be compared, as far as layouts go. Each
/// side must have the layout it asked for; unless folios are compared on
/// purpose, both must also have the same layout.
pub(super) fn layout_refusal(
    a: &CellResult,
    b: &CellResult,
    across_folios: bool,
) -> Option<NotComparable> {
    let side_mismatch = |name: &str, c: &CellResult| {
        (!c.layout.matches).then(|| {
            let why = c
                .layout
                .mismatch
                .clone()
                .unwrap_or_else(|| c.layout.summary());
            format!("{name} does not have the requested layout ({why})")
        })
    };
    if let Some(why) = side_mismatch("A", a).or_else(|| side_mismatch("B", b)) {
        return Some(NotComparable::LayoutsDiffer(why));
    }
    if !across_folios
        && (a.layout.histogram != b.layout.histogram
            || a.layout.pmd_mapped_bytes != b.layout.pmd_mapped_bytes)
    {
        return Some(NotComparable::LayoutsDiffer(format!(
            "A {}, B {}",
            a.layout.summary(),
            b.layout.summary()
        )));
    }
    None
}
