//! `ptelab crosscheck`: run a workload on the running kernel and on the model
//! (this arch, the strategy of this kernel's version) and compare every
//! effect user space can observe, call by call.
//!
//! Observables (one row each, kernel value beside model value):
//! - `tlb flushes`: the multiset of `tlb:tlb_flush` `local_mm_shootdown`
//!   records' `pages` of one mm call (docs/kernel.md §5.5) vs the model's flushes
//!   of that call that an x86 kernel traces (everything but arm64's
//!   `contpte_convert`). Other reasons (e.g. `remote_ipi_send`) are shown but
//!   not compared: the model is single-CPU.
//! - `write faults`: which pages take a fault when every page is written
//!   after the call (`ru_minflt` delta per page) vs which PTEs the model left
//!   non-writable.
//! - `pagemap present` / `pagemap exclusive` / `pagemap soft-dirty`: bits 63,
//!   56 and 55 of `/proc/self/pagemap` after the call vs the model's page
//!   table (present; mapped once — the model has one mm; soft-dirty PTE bit
//!   or the VMA's `VM_SOFTDIRTY`).
//! - `folio splits`: deltas of the mTHP `stats/split*` counters across the
//!   calls vs the model, which never splits a folio in mprotect or mremap.
//!
//! arm64 kernels have no `tlb:tlb_flush` tracepoint: there, in a TCG guest
//! with ptelab's QEMU plugin, each flush-compared call is a plugin window and
//! the host compares the TLBI instructions counted in it with the model's
//! ([`resolve_windows`]); elsewhere the flush rows show the model's flushes
//! beside "not observable" and count neither as a match nor as a mismatch
//! ([`Row::unobservable`]). The other rows compare with the arm64 model.
//!
//! The comparison logic here is pure; [`probe`] touches the machine,
//! [`model`] drives the model, [`run`] puts them together.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_kernel as kernel;
use ptelab_measure as measure;
use ptelab_record as record;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod file;
pub mod model;
pub mod probe;
pub mod run;
pub mod summary;
pub mod version;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::text::{format::size, table::Table};
use ptelab_model::{FlushOp, FlushSource};
use serde::{Deserialize, Serialize};

/// Schema tag of the JSON document.
pub const SCHEMA: &str = "ptelab/crosscheck/v1";

/// One compared observable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub workload: String,
    pub size_bytes: u64,
    pub folio: String,
    /// The call or scenario step the observable belongs to.
    pub scenario: String,
    pub observable: String,
    pub kernel: String,
    pub model: String,
    /// Kernel and model agree (false for an unobservable row).
    #[serde(rename = "match")]
    pub matches: bool,
    /// The kernel offers no way to observe this (no `tlb:tlb_flush` on
    /// arm64): neither a match nor a mismatch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unobservable: bool,
    /// Extra words (kernel events not compared, layout obtained, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A flush row of a kernel without the tracepoint, in a guest: the
    /// plugin window its call was marked in, for the host to count
    /// ([`resolve_windows`]). A resolved document has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<TlbiWindow>,
}

/// The sample window of one call and the TLB invalidations the model
/// issues in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlbiWindow {
    /// The plugin's window number (the guest's commit count).
    pub seq: u64,
    /// The model's TLBI instructions for the call (`FlushOp::ops`).
    pub model_tlbis: u64,
}

/// Where a row belongs (workload, size, folio, scenario).
#[derive(Clone, Debug)]
pub struct RowKey {
    pub workload: String,
    pub size_bytes: u64,
    pub folio: String,
    pub scenario: String,
}

impl RowKey {
    /// A row comparing two rendered values for equality of `same`.
    pub fn row(&self, observable: &str, kernel: String, model: String, same: bool) -> Row {
        Row {
            workload: self.workload.clone(),
            size_bytes: self.size_bytes,
            folio: self.folio.clone(),
            scenario: self.scenario.clone(),
            observable: observable.to_string(),
            kernel,
            model,
            matches: same,
            unobservable: false,
            note: None,
            window: None,
        }
    }

    /// A row whose two sides are compared as rendered text.
    pub fn text_row(&self, observable: &str, kernel: String, model: String) -> Row {
        let same = kernel == model;
        self.row(observable, kernel, model, same)
    }

    /// With a different scenario.
    pub fn with_scenario(&self, scenario: impl Into<String>) -> RowKey {
        RowKey {
            scenario: scenario.into(),
            ..self.clone()
        }
    }
}

/// A multiset of flush `pages` values (`-1` = `TLB_FLUSH_ALL`).
pub type FlushSet = BTreeMap<i64, u64>;

/// The tracepoint records an x86 kernel emits for the model's flushes of one
/// call (arm64 `contpte_convert` TLBIs have no x86 counterpart).
pub fn model_flush_set(flushes: &[FlushOp]) -> FlushSet {
    let mut m = FlushSet::new();
    for f in flushes
        .iter()
        .filter(|f| f.source != FlushSource::ContpteConvert)
    {
        *m.entry(f.trace_pages()).or_default() += 1;
    }
    m
}

/// Split a tracepoint breakdown (`"reason/pages"` -> events) into the
/// `local_mm_shootdown` multiset and everything else.
pub fn kernel_flush_set(breakdown: &BTreeMap<String, u64>) -> (FlushSet, BTreeMap<String, u64>) {
    let mut lmm = FlushSet::new();
    let mut other = BTreeMap::new();
    for (k, &n) in breakdown {
        if n == 0 {
            continue;
        }
        match k.split_once('/') {
            // pages = 0: flush_tlb_func() found this CPU already up to date
            // (docs/kernel.md §5.5) and invalidated nothing; the model logs
            // invalidations, so these are shown, not compared.
            Some(("local_mm_shootdown", "0")) => {
                other.insert(k.clone(), n);
            }
            Some(("local_mm_shootdown", pages)) => {
                let p = if pages == "all" {
                    Some(-1)
                } else {
                    pages.parse::<i64>().ok()
                };
                match p {
                    Some(p) => *lmm.entry(p).or_default() += n,
                    None => {
                        other.insert(k.clone(), n);
                    }
                }
            }
            _ => {
                other.insert(k.clone(), n);
            }
        }
    }
    (lmm, other)
}

/// `none`, or e.g. `16 pages x1, all x2` (sizes ascending, `all` last).
pub fn render_flushes(set: &FlushSet) -> String {
    if set.values().all(|&n| n == 0) {
        return "none".to_string();
    }
    let mut keys: Vec<i64> = set.keys().copied().filter(|&k| set[&k] > 0).collect();
    keys.sort_by_key(|&k| if k < 0 { i64::MAX } else { k });
    keys.iter()
        .map(|&k| {
            let what = if k < 0 {
                "all".to_string()
            } else {
                format!("{k} pages")
            };
            format!("{what} x{}", set[&k])
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A set of page indices as ranges: `none`, `all 16`, or `0-3,8,10-11 (7 of 16)`.
pub fn render_pages(pages: &[bool]) -> String {
    let n = pages.len();
    let set = pages.iter().filter(|&&b| b).count();
    if set == 0 {
        return format!("none of {n}");
    }
    if set == n {
        return format!("all {n}");
    }
    let mut out = String::new();
    let mut i = 0;
    let mut runs = 0;
    while i < n {
        if !pages[i] {
            i += 1;
            continue;
        }
        let s = i;
        while i < n && pages[i] {
            i += 1;
        }
        runs += 1;
        if runs > 8 {
            out.push_str(",...");
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if i - s == 1 {
            let _ = write!(out, "{s}");
        } else {
            let _ = write!(out, "{s}-{}", i - 1);
        }
    }
    let _ = write!(out, " ({set} of {n})");
    out
}

/// Compare two per-page bit vectors: rendered values and exact equality
/// (the rendering elides long run lists, the comparison does not).
pub fn page_row(key: &RowKey, observable: &str, kernel: &[bool], model: &[bool]) -> Row {
    let same = kernel == model;
    let mut row = key.row(observable, render_pages(kernel), render_pages(model), same);
    if !same && kernel.len() == model.len() {
        let first = kernel.iter().zip(model).position(|(a, b)| a != b);
        if let Some(i) = first {
            row.note = Some(format!(
                "first difference at page {i}: kernel {}, model {}",
                kernel[i], model[i]
            ));
        }
    }
    row
}

/// Append `note` to the row's note (`; `-separated).
pub fn add_note(row: &mut Row, note: String) {
    row.note = Some(match row.note.take() {
        Some(n) => format!("{n}; {note}"),
        None => note,
    });
}

/// What an unobservable row shows on the kernel side.
pub const NOT_OBSERVABLE: &str = "not observable";

/// What the kernel side of one call's flush row saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelFlushes {
    /// `tlb:tlb_flush` records by `reason/pages` (x86).
    Traced(BTreeMap<String, u64>),
    /// No tracepoint (arm64); the call was marked as plugin window `seq`.
    Window(u64),
    /// No tracepoint and no window: nothing sees the flushes.
    Unobservable,
}

/// The words of a flush row nothing observes.
const NO_TRACEPOINT: &str = "no tlb:tlb_flush tracepoint on this arch; \
    `ptelab vm --profile` counts its TLB invalidations in a TCG guest";

/// Compare flushes of one call. Where the kernel has no `tlb:tlb_flush`
/// tracepoint (arm64) the row shows every flush of the model (arm64
/// `contpte_convert` TLBIs included) and, until a plugin window is counted
/// into it ([`resolve_windows`]), is unobservable.
pub fn flush_row(key: &RowKey, kernel: &KernelFlushes, model: &[FlushOp]) -> Row {
    let breakdown = match kernel {
        KernelFlushes::Traced(b) => b,
        KernelFlushes::Window(_) | KernelFlushes::Unobservable => {
            let mut all = FlushSet::new();
            for f in model {
                *all.entry(f.trace_pages()).or_default() += 1;
            }
            let mut row = key.row(
                "tlb flushes",
                NOT_OBSERVABLE.to_string(),
                render_flushes(&all),
                false,
            );
            row.unobservable = true;
            row.note = Some(NO_TRACEPOINT.into());
            if let KernelFlushes::Window(seq) = *kernel {
                row.window = Some(TlbiWindow {
                    seq,
                    model_tlbis: model.iter().map(|f| f.ops).sum(),
                });
            }
            return row;
        }
    };
    let (k, other) = kernel_flush_set(breakdown);
    let m = model_flush_set(model);
    let mut row = key.row(
        "tlb flushes",
        render_flushes(&k),
        render_flushes(&m),
        k == m,
    );
    if !other.is_empty() {
        let o: Vec<String> = other.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        row.note = Some(format!("not compared: {}", o.join(", ")));
    }
    row
}

/// Count every windowed flush row from the plugin's output of the guest
/// (`None`: the guest ran without `--profile`): the row becomes `tlb
/// invalidations`, the TLBI instructions counted in the call's window (DSBs
/// left out) against the model's, a match only when equal.
pub fn resolve_windows(rows: &mut [Row], counts: Option<&ptelab_counts::record::Output>) {
    use ptelab_counts::Tlb;
    for row in rows.iter_mut() {
        let Some(w) = row.window.take() else { continue };
        let Some(counts) = counts else { continue };
        let Some(found) = counts
            .windows
            .iter()
            .find(|c| c.seq == w.seq && c.phase == 0)
        else {
            row.note = Some(format!(
                "the plugin wrote no window {} for this call, so nothing was counted",
                w.seq
            ));
            continue;
        };
        let counted: Vec<(Tlb, u64)> = Tlb::ALL
            .iter()
            .map(|&t| (t, found.tlb[t.index()]))
            .filter(|&(t, c)| t.invalidates() && c > 0)
            .collect();
        let n: u64 = counted.iter().map(|&(_, c)| c).sum();
        let kinds: Vec<String> = counted
            .iter()
            .map(|(t, c)| format!("{} {c}", t.name()))
            .collect();
        row.observable = "tlb invalidations".into();
        row.kernel = if kinds.is_empty() {
            "none".into()
        } else {
            format!("{n} ({})", kinds.join(", "))
        };
        row.model = format!("{} ({})", w.model_tlbis, row.model);
        row.matches = n == w.model_tlbis;
        row.unobservable = false;
        row.note =
            Some("TLBI instructions counted by ptelab's QEMU plugin in the call's window".into());
    }
}

/// Text table of rows: kernel vs model and a verdict per row.
pub fn render_table(header: &str, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    // Long kernel and model values overflow their column instead of
    // widening it for every row.
    let mut t = Table::new()
        .left("workload")
        .left("cell")
        .left("scenario")
        .left("observable")
        .left("kernel")
        .max_width(40)
        .left("model")
        .max_width(40)
        .left("verdict");
    for r in rows {
        let mut verdict = String::from(if r.unobservable {
            "unobservable"
        } else if r.matches {
            "match"
        } else {
            "MISMATCH"
        });
        if let Some(n) = &r.note {
            verdict.push_str(&format!("  [{n}]"));
        }
        t.row([
            r.workload.clone(),
            format!("{} {}", size(r.size_bytes), r.folio),
            r.scenario.clone(),
            r.observable.clone(),
            r.kernel.clone(),
            r.model.clone(),
            verdict,
        ]);
    }
    out.push_str(&t.text("  "));
    let unobservable = rows.iter().filter(|r| r.unobservable).count();
    let bad = rows
        .iter()
        .filter(|r| !r.matches && !r.unobservable)
        .count();
    let _ = write!(
        out,
        "{} rows: {} match, {} mismatch",
        rows.len(),
        rows.len() - bad - unobservable,
        bad
    );
    if unobservable > 0 {
        let _ = write!(out, ", {unobservable} not observable on this kernel");
    }
    out.push('\n');
    for r in rows.iter().filter(|r| !r.matches && !r.unobservable) {
        let _ = writeln!(
            out,
            "FINDING: {} {} {} / {} / {}: kernel {} but model {}{}",
            r.workload,
            size(r.size_bytes),
            r.folio,
            r.scenario,
            r.observable,
            r.kernel,
            r.model,
            r.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(pages: u64, full: bool, source: FlushSource) -> FlushOp {
        FlushOp {
            start: 0,
            pages,
            full,
            ops: 1,
            source,
        }
    }

    fn key() -> RowKey {
        RowKey {
            workload: "mprotect-toggle".into(),
            size_bytes: 64 << 10,
            folio: "64K".into(),
            scenario: "mprotect(PROT_NONE)".into(),
        }
    }

    #[test]
    fn kernel_breakdown_keeps_local_mm_shootdowns_apart() {
        let b: BTreeMap<String, u64> = [
            ("local_mm_shootdown/16".to_string(), 1),
            ("local_mm_shootdown/all".to_string(), 2),
            ("remote_ipi_send/all".to_string(), 2),
            ("local_mm_shootdown/4".to_string(), 0),
            ("local_mm_shootdown/0".to_string(), 1),
        ]
        .into_iter()
        .collect();
        let (lmm, other) = kernel_flush_set(&b);
        assert_eq!(lmm, [(16, 1), (-1, 2)].into_iter().collect());
        assert_eq!(other.len(), 2, "remote_ipi_send and the no-op record");
        assert_eq!(render_flushes(&lmm), "16 pages x1, all x2");
    }

    #[test]
    fn model_flushes_drop_contpte_converts() {
        let m = model_flush_set(&[
            op(16, false, FlushSource::MmuGather),
            op(16, false, FlushSource::ContpteConvert),
            op(512, true, FlushSource::FlushTlbRange),
        ]);
        assert_eq!(m, [(16, 1), (-1, 1)].into_iter().collect());
        assert_eq!(render_flushes(&FlushSet::new()), "none");
    }

    #[test]
    fn flush_rows_compare_multisets_and_note_other_reasons() {
        let b: BTreeMap<String, u64> = [
            ("local_mm_shootdown/16".to_string(), 1),
            ("remote_ipi_send/16".to_string(), 1),
        ]
        .into_iter()
        .collect();
        let r = flush_row(
            &key(),
            &KernelFlushes::Traced(b.clone()),
            &[op(16, false, FlushSource::MmuGather)],
        );
        assert!(r.matches);
        assert_eq!(
            r.note.as_deref(),
            Some("not compared: remote_ipi_send/16 x1")
        );
        let r = flush_row(
            &key(),
            &KernelFlushes::Traced(b),
            &[op(17, false, FlushSource::MmuGather)],
        );
        assert!(!r.matches);
        let r = flush_row(&key(), &KernelFlushes::Traced(BTreeMap::new()), &[]);
        assert!(r.matches);
        assert_eq!(r.kernel, "none");
        // arm64: nothing to compare with; every model flush is shown.
        let r = flush_row(
            &key(),
            &KernelFlushes::Unobservable,
            &[
                op(16, false, FlushSource::MmuGather),
                op(16, false, FlushSource::ContpteConvert),
            ],
        );
        assert!(r.unobservable && !r.matches);
        assert_eq!(
            (r.kernel.as_str(), r.model.as_str()),
            (NOT_OBSERVABLE, "16 pages x2")
        );
    }

    #[test]
    fn windowed_flush_rows_take_the_plugins_tlbis() {
        use ptelab_counts::record::{Output, Window};
        use ptelab_counts::Tlb;
        let model = [
            op(16, false, FlushSource::ContpteConvert),
            FlushOp {
                ops: 13,
                ..op(56, false, FlushSource::MmuGather)
            },
        ];
        let row = |seq| flush_row(&key(), &KernelFlushes::Window(seq), &model);
        let window = |seq, page, range| {
            let mut tlb = [0; Tlb::ALL.len()];
            tlb[Tlb::TlbiPage.index()] = page;
            tlb[Tlb::TlbiRange.index()] = range;
            tlb[Tlb::Dsb.index()] = 4;
            Window {
                step: 0,
                seq,
                phase: 0,
                kernel_insns: 1,
                user_insns: 1,
                tlb,
                blocks: vec![],
            }
        };
        let counts = Output {
            target: "aarch64".into(),
            windows: vec![window(0, 12, 2), window(1, 0, 2)],
        };
        let mut rows = vec![row(0), row(1), row(7)];
        assert!(rows.iter().all(|r| r.unobservable && r.window.is_some()));
        resolve_windows(&mut rows, Some(&counts));
        let [hit, miss, lost] = &rows[..] else {
            unreachable!()
        };
        assert!(hit.matches && !hit.unobservable && hit.window.is_none());
        assert_eq!(hit.observable, "tlb invalidations");
        assert_eq!(hit.kernel, "14 (tlbi-page 12, tlbi-range 2)");
        assert_eq!(hit.model, "14 (16 pages x1, 56 pages x1)");
        assert!(
            !miss.matches && !miss.unobservable,
            "2 counted, 14 modelled"
        );
        assert!(lost.unobservable && lost.note.as_deref().unwrap().contains("no window 7"));
        // Without the plugin the rows stay unobservable, their window dropped.
        let mut plain = vec![row(0)];
        resolve_windows(&mut plain, None);
        assert!(plain[0].unobservable && plain[0].window.is_none());
        assert_eq!(plain[0].kernel, NOT_OBSERVABLE);
    }

    #[test]
    fn page_sets_render_as_ranges_and_compare_exactly() {
        let v = [true, true, false, true, false, false, true, true];
        assert_eq!(render_pages(&v), "0-1,3,6-7 (5 of 8)");
        assert_eq!(render_pages(&[false; 4]), "none of 4");
        assert_eq!(render_pages(&[true; 4]), "all 4");
        let r = page_row(&key(), "write faults", &v, &v);
        assert!(r.matches);
        let mut w = v;
        w[2] = true;
        let r = page_row(&key(), "write faults", &v, &w);
        assert!(!r.matches);
        assert!(r.note.unwrap().contains("page 2"));
    }

    #[test]
    fn notes_accumulate() {
        let mut r = key().text_row("folio splits", "0".into(), "0".into());
        add_note(&mut r, "a".into());
        add_note(&mut r, "b".into());
        assert_eq!(r.note.as_deref(), Some("a; b"));
    }

    #[test]
    fn table_names_every_mismatch() {
        let k = key();
        let rows = vec![
            k.text_row("folio splits", "0".into(), "0".into()),
            k.text_row("tlb flushes", "all x1".into(), "none".into()),
        ];
        let t = render_table("kernel 6.18", &rows);
        assert!(t.contains("2 rows: 1 match, 1 mismatch\n"));
        assert!(t.contains("FINDING: mprotect-toggle 64K 64K / mprotect(PROT_NONE) / tlb flushes"));
    }
}
