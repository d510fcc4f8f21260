//! The bias of a guest figure (`ptelab calibrate --guest`, docs/guests.md
//! "The bias of a guest figure") as the noise threshold of instruction
//! counts: which stored bias stands for a cell of a kernel, and what a
//! change within it is called.

use ptelab_stats::compare::decide_interval;
use serde::Serialize;

use super::view::{CompareRow, VerdictKind};
use crate::record::CellResult;
use crate::store::{GuestBias, StoredRun};
use crate::workload::size::format_size;
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// A cell of a guest kernel, as a bias is looked up for it.
#[derive(Clone, Copy, Debug)]
pub struct GuestCell<'a> {
    /// The guest's `uname -r`.
    pub release: &'a str,
    pub arch: Arch,
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub phase: Option<&'a str>,
}

/// The stored bias that stands for a cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BiasUsed {
    /// As a fraction (0.0066 = ±0.66%).
    pub bias: f64,
    /// The kernel calibrated (`debian:6.17.8`) and its arch.
    pub kernel: String,
    pub arch: Arch,
    /// The size calibrated: the cell's own, or the nearest one calibrated.
    pub size_bytes: u64,
    /// Whether that is the cell's own size.
    pub exact: bool,
}

impl BiasUsed {
    /// `±0.66%, calibrate --guest on debian:6.17.8 x86_64` (`… at 400K`
    /// when another size stands for the cell).
    pub fn words(&self) -> String {
        let mut s = format!(
            "±{:.2}%, calibrate --guest on {} {}",
            self.bias * 100.0,
            self.kernel,
            self.arch.name()
        );
        if !self.exact {
            s.push_str(&format!(
                " at {}, the nearest size calibrated",
                format_size(self.size_bytes)
            ));
        }
        s
    }

    /// What a change within it is called, in place of a direction.
    pub fn within_words(&self) -> String {
        format!("within guest bias ({})", self.words())
    }
}

/// The bias of `cell`: among the biases stored for its kernel (release and
/// arch), workload, folio and phase, the newest of the size nearest to the
/// cell's (by ratio), or None when that cell was never calibrated there.
pub fn find(biases: &[GuestBias], cell: &GuestCell) -> Option<BiasUsed> {
    let distance = |b: &GuestBias| (b.size_bytes as f64 / cell.size_bytes as f64).ln().abs();
    biases
        .iter()
        .filter(|b| {
            b.release == cell.release
                && b.arch == cell.arch
                && b.workload == cell.workload
                && b.folio == cell.folio
                && b.phase.as_deref() == cell.phase
        })
        // The nearest size; among equals the newest (stored last).
        .min_by(|x, y| distance(x).total_cmp(&distance(y)).then(y.id.cmp(&x.id)))
        .map(|b| BiasUsed {
            bias: b.bias(),
            kernel: b.kernel.clone(),
            arch: b.arch,
            size_bytes: b.size_bytes,
            exact: b.size_bytes == cell.size_bytes,
        })
}

/// The bias of a change between two kernels' figures of one cell: the larger
/// of the two kernels' (each figure carries its own kernel's), or the one
/// calibrated when only one is.
pub fn for_pair(a: Option<BiasUsed>, b: Option<BiasUsed>) -> Option<BiasUsed> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.bias > a.bias { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Whether a ratio of two figures (B / A) stays within `bias`.
pub fn within(ratio: f64, bias: f64) -> bool {
    (ratio - 1.0).abs() <= bias
}

/// The command that calibrates `kernels` (specs) for a cell.
pub fn command(
    kernels: &[String],
    arch: Arch,
    workload: WorkloadKind,
    size: u64,
    folio: FolioSpec,
) -> String {
    format!(
        "ptelab calibrate --guest --kernel {} --arch {} -- bench {} --size {} --folio {}",
        kernels.join(","),
        arch.name(),
        workload.name(),
        format_size(size),
        folio
    )
}

/// "guest bias not calibrated for …: run `…`".
pub fn not_calibrated(
    kernels: &[String],
    arch: Arch,
    workload: WorkloadKind,
    size: u64,
    folio: FolioSpec,
) -> String {
    format!(
        "guest bias not calibrated for {} {}: run `{}`",
        kernels.join(", "),
        arch.name(),
        command(kernels, arch, workload, size, folio)
    )
}

/// Judge the rows of a comparison of two guest runs against each cell's
/// guest bias: a change within it is [`VerdictKind::WithinGuestBias`] in
/// place of a direction; a change beyond it is decided as `compare` decides
/// with the bias as the noise threshold. Returns the method's words: which
/// biases were used, and the command for the cells no bias covers.
pub(super) fn judge_rows(
    rows: &mut [CompareRow],
    pairs: &[(Option<&CellResult>, Option<&CellResult>)],
    biases: &[GuestBias],
    (a, b): (&StoredRun, &StoredRun),
    alpha: f64,
) -> String {
    let side = |r: &StoredRun| {
        let spec = r
            .run
            .guest
            .as_ref()
            .and_then(|g| {
                g.kernel_source
                    .split_whitespace()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| r.run.kernel_release.clone());
        (spec, r.run.kernel_release.clone(), Arch::parse(&r.run.arch))
    };
    let (sa, sb) = (side(a), side(b));
    let mut used: Vec<String> = Vec::new();
    // Per kernel and arch without a bias: its cells' labels, and the
    // command for the first.
    let mut missing: Vec<((String, Arch), Vec<String>, String)> = Vec::new();
    for (row, &(ca, cb)) in rows.iter_mut().zip(pairs) {
        let (Some(ca), Some(cb), Some(ratio)) = (ca, cb, row.ratio) else {
            continue;
        };
        if row.verdict == VerdictKind::NotComparable {
            continue;
        }
        let mut found = |(spec, release, arch): &(String, String, Option<Arch>), c: &CellResult| {
            let arch = (*arch)?;
            let got = find(
                biases,
                &GuestCell {
                    release,
                    arch,
                    workload: c.workload,
                    size_bytes: c.size_bytes,
                    folio: c.folio,
                    phase: c.phase.as_deref(),
                },
            );
            if got.is_none() {
                let label = format!(
                    "{} {} {}",
                    c.workload.name(),
                    format_size(c.size_bytes),
                    c.folio
                );
                let k = (spec.clone(), arch);
                match missing.iter_mut().find(|m| m.0 == k) {
                    Some(m) if !m.1.contains(&label) => m.1.push(label),
                    Some(_) => {}
                    None => {
                        let cmd = command(
                            std::slice::from_ref(spec),
                            arch,
                            c.workload,
                            c.size_bytes,
                            c.folio,
                        );
                        missing.push((k, vec![label], cmd));
                    }
                }
            }
            got
        };
        let (ba, bb) = (found(&sa, ca), found(&sb, cb));
        let Some(u) = for_pair(ba, bb) else { continue };
        let words = format!(
            "{} {} {}: {}",
            row.workload,
            format_size(row.size_bytes),
            row.folio,
            u.words()
        );
        if !used.contains(&words) {
            used.push(words);
        }
        if within(ratio, u.bias) {
            row.verdict = VerdictKind::WithinGuestBias;
            row.guest_bias = Some(u.words());
        } else if let (Some(lo), Some(hi), Some(p)) = (row.ci_low, row.ci_high, row.p_holm) {
            row.verdict = super::rows::verdict_kind(&decide_interval((lo, hi), p, u.bias, alpha));
            row.guest_bias = Some(u.words());
        }
    }
    let mut out = Vec::new();
    if !used.is_empty() {
        out.push(format!(
            "the noise threshold of these cells (the larger of the two kernels'): {}",
            used.join("; ")
        ));
    }
    for ((spec, arch), cells, cmd) in missing {
        out.push(format!(
            "not calibrated for {spec} {} at {} (`{cmd}`, and likewise for each cell)",
            arch.name(),
            cells.join(", ")
        ));
    }
    out.push("cells without a guest bias keep the noise threshold above".into());
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::guest_bias;

    const R: &str = "6.17.8+deb13-cloud-amd64";

    fn cell(size_kib: u64) -> GuestCell<'static> {
        GuestCell {
            release: R,
            arch: Arch::X86_64,
            workload: WorkloadKind::MprotectToggle,
            size_bytes: size_kib << 10,
            folio: FolioSpec::Base,
            phase: None,
        }
    }

    fn stored() -> Vec<GuestBias> {
        let mut v = vec![
            guest_bias(R, 400, 0.0066),
            guest_bias(R, 4, 0.085),
            guest_bias(R, 400, 0.012),
            guest_bias("6.16.12+deb13-cloud-amd64", 40, 0.3),
        ];
        for (i, b) in v.iter_mut().enumerate() {
            b.id = Some(i as i64 + 1);
        }
        v
    }

    #[test]
    fn the_cells_own_size_and_the_newest_calibration_of_it() {
        let b = find(&stored(), &cell(400)).unwrap();
        assert!((b.bias - 0.012).abs() < 1e-12 && b.exact, "{b:?}");
        assert_eq!(
            b.words(),
            "±1.20%, calibrate --guest on debian:6.17.8 x86_64"
        );
    }

    #[test]
    fn the_nearest_size_stands_for_another_and_says_so() {
        // By ratio: 100K is 4x from 400K and 25x from 4K.
        let b = find(&stored(), &cell(100)).unwrap();
        assert_eq!((b.size_bytes, b.exact), (400 << 10, false));
        assert!(b.words().ends_with(" at 400K, the nearest size calibrated"));
        let b = find(&stored(), &cell(8)).unwrap();
        assert_eq!(b.size_bytes, 4 << 10);
    }

    #[test]
    fn another_kernel_arch_folio_or_phase_is_not_calibrated() {
        let s = stored();
        let mut c = cell(400);
        c.arch = Arch::Arm64;
        assert_eq!(find(&s, &c), None);
        let mut c = cell(400);
        c.folio = FolioSpec::Mthp(64 << 10);
        assert_eq!(find(&s, &c), None);
        let mut c = cell(400);
        c.phase = Some("none-to-rw");
        assert_eq!(find(&s, &c), None);
        let mut c = cell(400);
        c.release = "7.0.13+deb13-cloud-amd64";
        assert_eq!(find(&s, &c), None);
    }

    #[test]
    fn a_pair_takes_the_larger_bias() {
        let s = stored();
        let a = find(&s, &cell(400));
        let mut c = cell(40);
        c.release = "6.16.12+deb13-cloud-amd64";
        let b = find(&s, &c);
        assert!((for_pair(a.clone(), b.clone()).unwrap().bias - 0.3).abs() < 1e-12);
        assert_eq!(for_pair(a.clone(), None), a);
        assert_eq!(for_pair(None, b.clone()), b);
        assert_eq!(for_pair(None, None), None);
    }

    #[test]
    fn within_is_inclusive_each_way() {
        assert!(within(1.5, 0.5) && within(0.5, 0.5));
        assert!(within(1.0065, 0.0066) && within(0.9935, 0.0066));
        assert!(!within(1.0067, 0.0066) && !within(0.983, 0.0066));
    }

    #[test]
    fn the_remedy_names_the_command() {
        assert_eq!(
            not_calibrated(
                &["debian:6.18.15".into(), "debian:6.19.6".into()],
                Arch::Arm64,
                WorkloadKind::ProtTransition,
                4 << 10,
                FolioSpec::Base
            ),
            "guest bias not calibrated for debian:6.18.15, debian:6.19.6 arm64: run `ptelab \
             calibrate --guest --kernel debian:6.18.15,debian:6.19.6 --arch arm64 -- bench \
             prot-transition --size 4K --folio 4K`"
        );
    }
}
