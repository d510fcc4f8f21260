//! Which cells of two runs are the same experiment, and whether their
//! layouts let them be compared.

use ptelab_stats::compare::NotComparable;

use crate::error::bail_usage;
use crate::record::{CellResult, Metric};
use crate::store::StoredRun;

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

/// How a run was measured, for the refusal below: `time on the host`,
/// `instructions in a tcg guest`.
fn measured(r: &StoredRun) -> String {
    match &r.run.guest {
        None => format!("{} on the host", r.run.metric()),
        Some(g) => format!("{} in a {} guest", g.metric, g.accel),
    }
}

/// A usage error unless every run of both sides was measured in one metric
/// on one accelerator (the host counting as its own): instructions and
/// nanoseconds have no ratio, and a KVM guest's time is not the host's.
/// Returns the shared metric.
pub(super) fn require_same_metric(
    (name_a, runs_a): (&str, &[StoredRun]),
    (name_b, runs_b): (&str, &[StoredRun]),
) -> anyhow::Result<Metric> {
    let first = &runs_a[0];
    let how = |r: &StoredRun| (r.run.metric(), r.run.guest.as_ref().map(|g| g.accel));
    let named = runs_a
        .iter()
        .map(|r| (name_a, r))
        .chain(runs_b.iter().map(|r| (name_b, r)));
    for (name, r) in named {
        if how(r) != how(first) {
            bail_usage!(
                "run {} ('{name_a}') was measured in {} but run {} ('{name}') in {}: \
                 compare runs of one metric and one accelerator",
                first.run.id,
                measured(first),
                r.run.id,
                measured(r)
            );
        }
    }
    Ok(first.run.metric())
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
