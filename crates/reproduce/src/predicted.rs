//! The cost model's figure beside each guest cell a claim compares
//! (docs/model.md, "The cost model"; `ptelab model --predict` on stored
//! runs). Per arch, the costs are fitted on the profiled TCG cells of
//! `mprotect-toggle` this run measured (seed 001's sweep, every kernel
//! pooled); every other cell of the run is predicted out of sample. A toggle
//! cell's figure is the fit's own, and its line says "in sample": agreement
//! there shows the costs can describe the cells, not that they predict them.
//!
//! Where there is no figure, the line says why: a cell executing kernel
//! functions no fit cell did (the refusal of `model --predict`), a workload
//! the model does not count (reclaim), a KVM guest (time, not instructions),
//! or no counted toggle cells to fit on.

use serde::Serialize;

use super::guests::GuestEvidence;
use crate::crosscheck::version::strategy_for_kernel;
use crate::guest::source::Version;
use crate::predict::{self, render, Observed, Prediction};
use crate::record::{CellResult, Metric};
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// The workload the costs are fitted on.
pub const FIT_WORKLOAD: WorkloadKind = WorkloadKind::MprotectToggle;

/// The cost model of one arch, fitted on this run's guest cells.
#[derive(Clone, Debug, Serialize)]
pub struct ArchFit {
    pub arch: Arch,
    pub fit_workload: WorkloadKind,
    /// The fitted costs and the out-of-sample predictions, as
    /// `model --predict` reports them; `None` when nothing could be fitted.
    pub fitted: Option<render::Report>,
    /// Why nothing was fitted.
    pub not_fitted: Option<String>,
    /// The fit cells, each predicted by the fit it is part of.
    pub in_sample: Vec<Prediction>,
    /// Guest runs left out, with why (a release the model has no strategy
    /// for).
    pub left_out: Vec<(String, String)>,
}

/// The cost models of one reproduce run, one per arch with TCG guests.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(transparent)]
pub struct Predicted {
    pub arches: Vec<ArchFit>,
}

/// What the cost model says of one measured cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<'a> {
    /// A figure: the prediction, whether the cell is one the fit was made
    /// on, and what the figure rests on beyond the fit (empty, or
    /// "extrapolated: …").
    Figure {
        p: &'a Prediction,
        in_sample: bool,
        note: String,
    },
    /// No figure, and why.
    Not(String),
}

/// The profile-free reason a cell has no model row.
fn not_counted(w: WorkloadKind, phase: Option<&str>) -> String {
    match (w, phase) {
        (WorkloadKind::Reclaim, _) => {
            "the cost model does not price reclaim (its young-bit counters are not fitted)".into()
        }
        (_, Some(p)) => format!("the model does not count the {w} {p} phase"),
        _ => format!("the model does not count {w}"),
    }
}

impl ArchFit {
    /// Fit `arch`'s costs on the TCG cells of `g`; `None` when no TCG guest
    /// of `arch` ran.
    fn of(g: &GuestEvidence, arch: Arch) -> Option<ArchFit> {
        let runs: Vec<_> = g
            .runs
            .iter()
            .filter(|r| r.arch == arch && r.metric == Metric::Instructions)
            .collect();
        if runs.is_empty() {
            return None;
        }
        let mut out = ArchFit {
            arch,
            fit_workload: FIT_WORKLOAD,
            fitted: None,
            not_fitted: None,
            in_sample: Vec::new(),
            left_out: Vec::new(),
        };
        let mut fit_obs = Vec::new();
        let mut targets = Vec::new();
        let mut toggles_uncounted = false;
        for run in runs {
            let strategy = match strategy_for_kernel(&run.release, arch) {
                Ok(s) => s.strategy,
                Err(e) => {
                    out.left_out.push((run.kernel.clone(), e));
                    continue;
                }
            };
            for (c, obs) in Observed::from_guest_cells(&run.kernel, arch, strategy, &run.cells) {
                // Only counted cells are fitted on: the plugin's
                // per-function figures are what split a joint cost.
                match (c.workload == FIT_WORKLOAD, c.profile.is_some()) {
                    (true, true) => fit_obs.push(obs),
                    (true, false) => {
                        toggles_uncounted = true;
                        targets.push(obs);
                    }
                    _ => targets.push(obs),
                }
            }
        }
        if fit_obs.is_empty() {
            out.not_fitted = Some(if toggles_uncounted {
                format!(
                    "the {arch} {FIT_WORKLOAD} guests were not counted (no QEMU plugin \
                     profile): nothing to fit the costs on"
                )
            } else {
                format!(
                    "no counted {FIT_WORKLOAD} cells in {arch} TCG guests to fit the costs on \
                     (seed 001 measures them)"
                )
            });
            return Some(out);
        }
        match predict::fit_and_predict(arch, fit_obs, targets) {
            Ok(p) => {
                out.fitted = Some(p.report);
                out.in_sample = p.in_sample;
            }
            Err(e) => out.not_fitted = Some(format!("the fit failed: {e:#}")),
        }
        Some(out)
    }

    /// The figure (or why none) of `run_kernel`'s cell `c`.
    fn outcome(&self, run_kernel: &str, c: &CellResult) -> Outcome<'_> {
        let same = |p: &&Prediction| {
            p.cell.kernel == run_kernel
                && p.cell.workload == c.workload
                && p.cell.size_bytes == c.size_bytes
                && p.cell.folio == c.folio
                && p.cell.phase == c.phase
        };
        if let Some(p) = self.in_sample.iter().find(same) {
            return Outcome::Figure {
                p,
                in_sample: true,
                note: render::note(p),
            };
        }
        if let Some((_, why)) = self.left_out.iter().find(|(k, _)| k == run_kernel) {
            return Outcome::Not(why.clone());
        }
        let Some(report) = &self.fitted else {
            return Outcome::Not(self.not_fitted.clone().unwrap_or_default());
        };
        match report.predictions.iter().find(same) {
            Some(p) if p.predicted.is_some() => Outcome::Figure {
                p,
                in_sample: false,
                note: render::note(p),
            },
            // Only the fit workload is fitted on here, so the remedy of
            // `model --predict` (measure another workload) does not apply.
            Some(p) if !p.lacking.is_empty() => Outcome::Not(format!(
                "no {} cell of the fit executes {}",
                self.fit_workload,
                render::few(&p.lacking)
            )),
            Some(p) => Outcome::Not(render::note(p)),
            None => Outcome::Not(not_counted(c.workload, c.phase.as_deref())),
        }
    }
}

/// One cell a claim compares: its label and where it is.
pub struct At<'a> {
    pub label: String,
    pub size: u64,
    pub folio: FolioSpec,
    pub phase: Option<&'a str>,
}

impl<'a> At<'a> {
    pub fn new(
        label: impl Into<String>,
        size: u64,
        folio: FolioSpec,
        phase: Option<&'a str>,
    ) -> At<'a> {
        At {
            label: label.into(),
            size,
            folio,
            phase,
        }
    }
}

/// `+1.8%`: (predicted − measured) / measured.
fn residual(p: &Prediction) -> String {
    render::pct(p.residual.unwrap_or(f64::NAN))
}

/// A predicted figure with the measured one and the residual.
fn beside(p: &Prediction) -> String {
    let v = p.predicted.unwrap_or(f64::NAN);
    format!(
        "{v:.0} (measured {:.0}, {})",
        p.cell.instructions,
        residual(p)
    )
}

impl Predicted {
    /// The cost models of the TCG guests of `g`, one per arch.
    pub fn of(g: &GuestEvidence) -> Predicted {
        Predicted {
            arches: Arch::ALL
                .into_iter()
                .filter_map(|a| ArchFit::of(g, a))
                .collect(),
        }
    }

    pub fn arch(&self, arch: Arch) -> Option<&ArchFit> {
        self.arches.iter().find(|f| f.arch == arch)
    }

    /// What the cost model says of the cell of `w` measured on `arch`
    /// kernel `v`; `None` when the cell was not measured (the measured line
    /// says why).
    #[allow(clippy::too_many_arguments)]
    pub fn outcome<'a>(
        &'a self,
        g: &GuestEvidence,
        arch: Arch,
        v: Version,
        w: WorkloadKind,
        size: u64,
        folio: FolioSpec,
        phase: Option<&str>,
    ) -> Option<Outcome<'a>> {
        let run = g.run(arch, v, w)?;
        let c = g.cell(arch, v, w, size, folio, phase)?;
        if run.metric != Metric::Instructions {
            return Some(Outcome::Not(
                "a KVM guest measures time; the cost model predicts TCG guest instructions".into(),
            ));
        }
        Some(match self.arch(arch) {
            Some(f) => f.outcome(&run.kernel, c),
            None => Outcome::Not(format!("no {arch} TCG guests to fit the costs on")),
        })
    }

    /// The cost model's line for `cells` of `w` on `arch`, each on kernels
    /// `before` and `after`: per cell the predicted figures beside the
    /// measured ones with the residuals, and the predicted ratio beside the
    /// measured ratio; `None` when no cell was measured on both.
    pub fn between(
        &self,
        g: &GuestEvidence,
        arch: Arch,
        (before, after): (Version, Version),
        w: WorkloadKind,
        cells: &[At],
    ) -> Option<String> {
        // (text, whether its figures are in sample, the one reason it has none)
        let mut parts: Vec<(String, Option<bool>, Option<String>)> = Vec::new();
        for at in cells {
            let side = |v| self.outcome(g, arch, v, w, at.size, at.folio, at.phase);
            let (Some(a), Some(b)) = (side(before), side(after)) else {
                continue;
            };
            let part = match (&a, &b) {
                (
                    Outcome::Figure {
                        p: pa,
                        in_sample: ia,
                        note: na,
                    },
                    Outcome::Figure {
                        p: pb,
                        in_sample: ib,
                        note: nb,
                    },
                ) => {
                    let (xa, xb) = (pa.predicted.unwrap(), pb.predicted.unwrap());
                    let (ma, mb) = (pa.cell.instructions, pb.cell.instructions);
                    // The plugin's count inside the calls, or the icount
                    // figure of a guest that was not profiled.
                    let what = if pa.cell.counted && pb.cell.counted {
                        "counted"
                    } else {
                        "measured"
                    };
                    let mut s = format!(
                        "{} {xa:.0} -> {xb:.0} ({what} {ma:.0} -> {mb:.0}, {} and {}), \
                         ratio {:.2}x ({what} {:.2}x)",
                        at.label,
                        residual(pa),
                        residual(pb),
                        xb / xa,
                        mb / ma
                    );
                    if !na.is_empty() || !nb.is_empty() {
                        s.push_str(" (extrapolated)");
                    }
                    (s, (ia == ib).then_some(*ia), None)
                }
                (Outcome::Not(wa), Outcome::Not(wb)) if wa == wb => (
                    format!("{}: not predicted: {wa}", at.label),
                    None,
                    Some(wa.clone()),
                ),
                _ => {
                    let one = |v: Version, o: &Outcome| match o {
                        Outcome::Figure { p, in_sample, .. } => format!(
                            "{v} {}{}",
                            beside(p),
                            if *in_sample { " in sample" } else { "" }
                        ),
                        Outcome::Not(why) => format!("{v} not predicted: {why}"),
                    };
                    let (sa, sb) = (one(before, &a), one(after, &b));
                    (format!("{}: {sa}; {sb}", at.label), None, None)
                }
            };
            parts.push(part);
        }
        if parts.is_empty() {
            return None;
        }
        let head = format!("{arch} guests {before} -> {after}");
        if let Some(why) = &parts[0].2 {
            if parts.iter().all(|p| p.2.as_ref() == Some(why)) {
                return Some(format!("{head}: not predicted: {why}"));
            }
        }
        let figures: Vec<bool> = parts.iter().filter_map(|p| p.1).collect();
        let all = |v: bool| !figures.is_empty() && figures.iter().all(|x| *x == v);
        let sample = if all(true) {
            format!(", in sample (the {FIT_WORKLOAD} cells the costs were fitted on)")
        } else if all(false) {
            format!(", out of sample (costs fitted on this run's {FIT_WORKLOAD} cells)")
        } else {
            String::new()
        };
        let mixed = sample.is_empty();
        let text: Vec<String> = parts
            .into_iter()
            .map(|(s, in_sample, _)| match in_sample {
                Some(true) if mixed => format!("{s} (in sample)"),
                _ => s,
            })
            .collect();
        Some(format!(
            "{head}, instructions per call{sample}: {}",
            text.join("; ")
        ))
    }

    /// One line per arch: what the costs were fitted on and how well, or
    /// why they were not.
    pub fn summary(&self) -> Vec<String> {
        self.arches
            .iter()
            .map(|f| match &f.fitted {
                Some(r) => {
                    let n = r.predictions.len();
                    let given = r.predictions.iter().filter(|p| p.predicted.is_some()).count();
                    format!(
                        "{}: fitted on {} {} cells of {} from this run (residuals within ±{:.1}%); {}",
                        f.arch,
                        r.fit_cells,
                        f.fit_workload,
                        r.fit_kernels.join(", "),
                        r.fit_max_residual * 100.0,
                        if n == 0 {
                            "no other cells to predict".to_string()
                        } else {
                            format!("{given} of {n} other cells predicted out of sample")
                        }
                    )
                }
                None => format!(
                    "{}: not fitted: {}",
                    f.arch,
                    f.not_fitted.as_deref().unwrap_or("")
                ),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guests::GuestRun;
    use crate::store::StoredRun;
    use crate::{claim_text, claims, Evidence};

    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    /// A stored guest run of `tests/fixtures/predict` as the guest handed
    /// it back to reproduce.
    fn stored(json: &str) -> GuestRun {
        let run: StoredRun = serde_json::from_str(json).unwrap();
        let guest = run.run.guest.clone().unwrap();
        GuestRun {
            arch: Arch::X86_64,
            kernel: guest.kernel_source.split(' ').next().unwrap().into(),
            release: run.run.kernel_release.clone(),
            metric: guest.metric,
            workload: WorkloadKind::MprotectToggle,
            cells: run.kernel_cells().cloned().collect(),
            failed: Vec::new(),
            run_id: Some(run.run.id),
        }
    }

    /// Two real x86_64 TCG sweeps of seed 001's toggle, profiled: Debian
    /// 6.16.12 and 6.17.8 (4K to 40M; 400K is the size seed 001 shares).
    fn real_toggles() -> Evidence {
        let guests = GuestEvidence {
            runs: vec![
                stored(include_str!(
                    "../../../tests/fixtures/predict/x86_64-6.16.12-toggle.json"
                )),
                stored(include_str!(
                    "../../../tests/fixtures/predict/x86_64-6.17.8-toggle.json"
                )),
            ],
            asked: vec![Arch::X86_64],
            ..GuestEvidence::default()
        };
        Evidence {
            predicted: Predicted::of(&guests),
            guests,
            ..Evidence::default()
        }
    }

    /// A cost per counter name, the same whatever the column order.
    fn known_cost(name: &str) -> f64 {
        10.0 + name.bytes().map(u64::from).sum::<u64>() as f64 % 97.0
    }

    /// A synthetic TCG cell of `release`: the model's counters times known
    /// costs, profiled (with no function counts) unless `counted` is false.
    fn synthetic(
        arch: Arch,
        release: &str,
        w: WorkloadKind,
        (size, folio, phase): (u64, FolioSpec, Option<&str>),
        counted: bool,
    ) -> CellResult {
        let s = strategy_for_kernel(release, arch).unwrap().strategy;
        let figure = match predict::model_row(arch, s, w, size, folio, phase).unwrap() {
            Some(x) => 1000.0 + x.iter().map(|(k, v)| v * known_cost(k)).sum::<f64>(),
            None => 5_000_000.0,
        };
        let mut c = crate::record::fixtures::fixture(size / K, figure, folio);
        c.workload = w;
        c.phase = phase.map(str::to_string);
        c.profile = counted.then(crate::record::Profile::default);
        c
    }

    fn run_of(arch: Arch, version: &str, w: WorkloadKind, cells: Vec<CellResult>) -> GuestRun {
        let deb = crate::guest::arch::facts(arch).debian;
        GuestRun {
            arch,
            kernel: format!("debian:{version}"),
            release: format!("{version}+deb13-cloud-{deb}"),
            metric: Metric::Instructions,
            workload: w,
            cells,
            failed: Vec::new(),
            run_id: None,
        }
    }

    /// Synthetic arm64 guests of seeds 001 (the fit: 4K toggles on 6.18.15
    /// and 6.19.6), 003 (prot-transition on the same kernels, predicted out
    /// of sample), 002 (mremap in 64K folios on 6.16.12 and 6.17.8, which
    /// executes contpte helpers no 4K toggle does) and 004 (reclaim, not
    /// priced).
    fn synthetic_arm64() -> Evidence {
        let a = Arch::Arm64;
        let f4k = FolioSpec::Base;
        let toggle = |ver: &str| {
            let cells = [4 * K, 40 * K, 400 * K, 4000 * K, 40000 * K]
                .into_iter()
                .map(|s| {
                    let rel = format!("{ver}+deb13");
                    synthetic(a, &rel, WorkloadKind::MprotectToggle, (s, f4k, None), true)
                })
                .collect();
            run_of(a, ver, WorkloadKind::MprotectToggle, cells)
        };
        let prot = |ver: &str| {
            let w = WorkloadKind::ProtTransition;
            let mut cells = Vec::new();
            for s in [4 * K, 400 * K] {
                for p in ["none-to-rw", "rw-to-none"] {
                    cells.push(synthetic(a, ver, w, (s, f4k, Some(p)), true));
                }
            }
            run_of(a, ver, w, cells)
        };
        let mremap = |ver: &str| {
            let w = WorkloadKind::MremapMove;
            let f64k = FolioSpec::Mthp(64 * K);
            let cells = vec![synthetic(a, ver, w, (M, f64k, Some("mremap")), true)];
            run_of(a, ver, w, cells)
        };
        let reclaim = |ver: &str| {
            let w = WorkloadKind::Reclaim;
            let cell = (
                16 * M,
                FolioSpec::Mthp(64 * K),
                Some("memcg-v2-reclaim ext4 mglru"),
            );
            run_of(a, ver, w, vec![synthetic(a, ver, w, cell, true)])
        };
        let guests = GuestEvidence {
            runs: vec![
                toggle("6.18.15"),
                toggle("6.19.6"),
                prot("6.18.15"),
                prot("6.19.6"),
                mremap("6.16.12"),
                mremap("6.17.8"),
                reclaim("7.0.13"),
                reclaim("7.1.3"),
            ],
            asked: vec![a],
            ..GuestEvidence::default()
        };
        Evidence {
            predicted: Predicted::of(&guests),
            guests,
            ..Evidence::default()
        }
    }

    /// Seed 001's own cells are the fit's: the line says "in sample", and
    /// gives the fitted figures beside the measured ones and both ratios.
    #[test]
    fn the_fit_cells_are_in_sample() {
        let ev = real_toggles();
        let f = ev.predicted.arch(Arch::X86_64).unwrap();
        let r = f.fitted.as_ref().unwrap();
        // The 16 toggle cells, each fitted as its two directions, and each
        // in sample as measured.
        assert_eq!(r.fit_cells, 32);
        assert_eq!(f.in_sample.len(), 16);
        assert!(r.predictions.is_empty());
        let line = ev
            .predicted
            .between(
                &ev.guests,
                Arch::X86_64,
                (v("6.16.12"), v("6.17.8")),
                WorkloadKind::MprotectToggle,
                &[At::new("400 KiB", 400 * K, FolioSpec::Base, None)],
            )
            .unwrap();
        assert!(
            line.starts_with("x86_64 guests 6.16.12 -> 6.17.8, instructions per call, in sample"),
            "{line}"
        );
        // Beside the plugin's count inside the calls (the cell's icount
        // figure, 21239 -> 38819, also holds the harness).
        assert!(line.contains("(counted 20969 -> 38519, "), "{line}");
        assert!(line.contains("(counted 1.84x)"), "{line}");
        // A cell not measured has no line: the measured line says why.
        let none = ev.predicted.between(
            &ev.guests,
            Arch::X86_64,
            (v("6.16.12"), v("6.17.8")),
            WorkloadKind::MprotectToggle,
            &[At::new("4000 KiB", 4000 * K, FolioSpec::Base, None)],
        );
        assert_eq!(none, None);
    }

    /// Another workload's cells are predicted out of sample, with residual
    /// and ratio; the synthetic figures are the model's counters times
    /// known costs, so the fit recovers them.
    #[test]
    fn other_workloads_are_out_of_sample() {
        let ev = synthetic_arm64();
        let line = ev
            .predicted
            .between(
                &ev.guests,
                Arch::Arm64,
                (v("6.18.15"), v("6.19.6")),
                WorkloadKind::ProtTransition,
                &[At::new(
                    "400K none-to-rw",
                    400 * K,
                    FolioSpec::Base,
                    Some("none-to-rw"),
                )],
            )
            .unwrap();
        assert!(line.contains("out of sample"), "{line}");
        assert!(line.contains("ratio "), "{line}");
        let o = ev
            .predicted
            .outcome(
                &ev.guests,
                Arch::Arm64,
                v("6.19.6"),
                WorkloadKind::ProtTransition,
                400 * K,
                FolioSpec::Base,
                Some("none-to-rw"),
            )
            .unwrap();
        let Outcome::Figure { p, in_sample, .. } = o else {
            panic!("{o:?}")
        };
        assert!(!in_sample);
        assert!(p.predicted.is_some() && p.residual.is_some());
    }

    /// A cell executing functions no fit cell did gets the refusal of
    /// `model --predict`; reclaim is not priced; a KVM guest is time.
    #[test]
    fn cells_without_a_figure_say_why() {
        let ev = synthetic_arm64();
        let at = |w, v: &str, size, folio, phase| {
            ev.predicted
                .outcome(
                    &ev.guests,
                    Arch::Arm64,
                    Version::parse(v).unwrap(),
                    w,
                    size,
                    folio,
                    phase,
                )
                .unwrap()
        };
        let f64k = FolioSpec::Mthp(64 * K);
        let Outcome::Not(why) = at(WorkloadKind::MremapMove, "6.17.8", M, f64k, Some("mremap"))
        else {
            panic!("predicted")
        };
        assert!(
            why.starts_with("no mprotect-toggle cell of the fit executes"),
            "{why}"
        );
        assert!(why.contains("contpte"), "{why}");
        let Outcome::Not(why) = at(WorkloadKind::Reclaim, "7.1.3", 16 * M, f64k, None) else {
            panic!("predicted")
        };
        assert!(why.contains("does not price reclaim"), "{why}");
        let line = ev
            .predicted
            .between(
                &ev.guests,
                Arch::Arm64,
                (v("7.0.13"), v("7.1.3")),
                WorkloadKind::Reclaim,
                &[At::new("64K", 16 * M, f64k, None)],
            )
            .unwrap();
        assert_eq!(
            line,
            "arm64 guests 7.0.13 -> 7.1.3: not predicted: the cost model does not price \
             reclaim (its young-bit counters are not fitted)"
        );
        let mut kvm = synthetic_arm64().guests;
        for r in &mut kvm.runs {
            r.metric = Metric::Time;
        }
        let o = ev.predicted.outcome(
            &kvm,
            Arch::Arm64,
            v("7.1.3"),
            WorkloadKind::Reclaim,
            16 * M,
            f64k,
            None,
        );
        let Some(Outcome::Not(why)) = o else {
            panic!("{o:?}")
        };
        assert!(why.contains("KVM"), "{why}");
    }

    /// Guests that were not counted leave nothing to fit on, and say so.
    #[test]
    fn uncounted_toggles_are_not_fitted() {
        let mut g = real_toggles().guests;
        for r in &mut g.runs {
            for c in &mut r.cells {
                c.profile = None;
            }
        }
        let p = Predicted::of(&g);
        let f = p.arch(Arch::X86_64).unwrap();
        assert!(f.fitted.is_none());
        assert!(
            f.not_fitted.as_deref().unwrap().contains("not counted"),
            "{f:?}"
        );
        let line = p
            .between(
                &g,
                Arch::X86_64,
                (v("6.16.12"), v("6.17.8")),
                WorkloadKind::MprotectToggle,
                &[At::new("400 KiB", 400 * K, FolioSpec::Base, None)],
            )
            .unwrap();
        assert!(
            line.contains(": not predicted: the x86_64 mprotect-toggle guests were not counted"),
            "{line}"
        );
        assert!(Predicted::of(&GuestEvidence::default()).arches.is_empty());
    }

    /// Each claim of seed 001 pairs the kernels its measured line compares:
    /// before and after batching, the last kernel before the fix against
    /// the last without batching, and before and after the fix (synthetic
    /// x86_64 toggles on four kernels, every one the fit's).
    #[test]
    fn seed_001_claims_pair_the_kernels_they_compare() {
        let a = Arch::X86_64;
        let w = WorkloadKind::MprotectToggle;
        let runs = ["6.16.12", "6.17.8", "7.0.13", "7.1.3"]
            .map(|ver| {
                let cells = [400 * K, 4000 * K, 40000 * K]
                    .into_iter()
                    .map(|s| synthetic(a, ver, w, (s, FolioSpec::Base, None), true))
                    .collect();
                run_of(a, ver, w, cells)
            })
            .to_vec();
        let guests = GuestEvidence {
            runs,
            asked: vec![a],
            ..GuestEvidence::default()
        };
        let ev = Evidence {
            predicted: Predicted::of(&guests),
            guests,
            ..Evidence::default()
        };
        let rows = claims::judge_all(&["001"], &ev, true);
        let line = |start: &str| {
            let r = rows.iter().find(|r| r.claim.starts_with(start)).unwrap();
            r.predicted.clone().unwrap_or_default()
        };
        let regression = line("x86_64: order-0");
        assert!(
            regression
                .starts_with("x86_64 guests 6.16.12 -> 6.17.8, instructions per call, in sample"),
            "{regression}"
        );
        for size in ["400 KiB", "4000 KiB", "40000 KiB"] {
            assert!(regression.contains(&format!("{size} ")), "{regression}");
        }
        assert!(line("x86-64: the instructions").contains("4000 KiB "));
        let still = line("the regression is still present");
        assert!(
            still.starts_with("x86_64 guests 6.16.12 -> 7.0.13"),
            "{still}"
        );
        let fix = line("the 2026 small-folio fix");
        assert!(fix.starts_with("x86_64 guests 7.0.13 -> 7.1.3"), "{fix}");
        assert!(line("arm64: order-0").is_empty(), "arm64 was not asked for");
    }

    /// Every claim of seed 001 on the real toggles, as `reproduce` prints
    /// them, and the cost model's paragraph.
    #[test]
    fn seed_001_claims_print_the_prediction_beside_the_measurement() {
        let ev = real_toggles();
        let rows = claims::judge_all(&["001"], &ev, true);
        let mut text: String = rows.iter().map(claim_text).collect();
        text.push('\n');
        text.push_str(&crate::cost_model_text(&ev.predicted));
        insta::assert_snapshot!(text);
    }

    /// Seeds 002, 003 and 004 on the synthetic arm64 guests: predicted out
    /// of sample, refused, not priced; in the text and in the report.
    #[test]
    fn other_seeds_print_figures_refusals_and_reasons() {
        let ev = synthetic_arm64();
        let rows = claims::judge_all(&["002", "003", "004"], &ev, true);
        let text: String = rows
            .iter()
            .filter(|r| r.predicted.is_some())
            .map(claim_text)
            .collect();
        insta::assert_snapshot!("synthetic_arm64_claims_text", text);
        let mut b = crate::report::view::ReportBuilder::new("reproduce");
        for r in rows.iter().filter(|r| r.predicted.is_some()) {
            b = b.claim(r.clone());
        }
        let m = b.build();
        let md = String::from_utf8(crate::report::markdown::render_markdown(&m).unwrap()).unwrap();
        let from = md.find("## Claims").unwrap();
        insta::assert_snapshot!("synthetic_arm64_claims_markdown", &md[from..]);
        let html = String::from_utf8(crate::report::html::render_html(&m).unwrap()).unwrap();
        assert!(html.contains("<dt>predicted (cost model)</dt>"), "{html}");
        assert!(html.contains("out of sample"));
        let json = serde_json::to_value(&ev.predicted).unwrap();
        assert_eq!(json[0]["arch"], "arm64");
        assert_eq!(json[0]["fit_workload"], "mprotect-toggle");
        assert!(json[0]["fitted"]["costs"].is_array());
        assert!(json[0]["fitted"]["predictions"].as_array().unwrap().len() >= 8);
        assert_eq!(
            serde_json::to_value(&rows[0]).unwrap()["predicted"],
            rows[0].predicted.clone().unwrap()
        );
    }
}
