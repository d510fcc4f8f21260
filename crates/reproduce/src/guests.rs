//! Which kernels each seed runs on in QEMU guests, and the guest runs'
//! evidence.
//!
//! `--kernels auto` picks, per seed, the Debian kernels that bracket the
//! seed's change (`changes`): the newest offered without it and the oldest
//! with it, plus what the seed asks beyond that (seed 001: the small-folio
//! fix and the newest kernel). `--kernels SPEC,…` runs every seed on the
//! kernels given, and a claim whose change they do not bracket says so.

use serde::Serialize;

use super::changes::{change, release_version};
use super::Seed;
use crate::guest::source::{KernelChoice, Version};
use crate::record::{CellResult, Metric};
use crate::report::view::{Axis, KernelSection, Plot, Point, Scale, Series, Unit};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};

/// A kernel a seed needs, relative to a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The newest kernel offered without the change.
    Before(&'static str),
    /// The oldest kernel offered with it.
    After(&'static str),
    /// The newest kernel offered.
    Newest,
}

/// The cells a seed measures in guests, on the kernels its roles pick.
#[derive(Clone, Debug)]
pub struct GuestCells {
    pub roles: Vec<Role>,
    pub workload: WorkloadKind,
    pub sizes: Vec<u64>,
    pub folios: Vec<FolioSpec>,
}

/// One guest boot the plan asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRun {
    pub arch: Arch,
    pub version: Version,
    pub workload: WorkloadKind,
    pub sizes: Vec<u64>,
    pub folios: Vec<FolioSpec>,
    /// Seeds that read its cells.
    pub seeds: Vec<&'static str>,
}

impl PlannedRun {
    /// Its cells, as a seed lists them.
    pub fn cells(&self) -> GuestCells {
        GuestCells {
            roles: Vec::new(),
            workload: self.workload,
            sizes: self.sizes.clone(),
            folios: self.folios.clone(),
        }
    }
}

/// What the guests of one arch will run, and what could not be planned.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub runs: Vec<PlannedRun>,
    /// (seed, why): a role no offered kernel fills.
    pub notes: Vec<(&'static str, String)>,
}

/// The versions `roles` pick from `offered`, or why one cannot be picked.
fn pick(roles: &[Role], offered: &[Version]) -> Result<Vec<Version>, String> {
    let mut out = Vec::new();
    for r in roles {
        let v = match r {
            Role::Before(k) => change(k).bracket(offered)?.0,
            Role::After(k) => change(k).bracket(offered)?.1,
            Role::Newest => *offered.iter().max().ok_or("no kernel is offered")?,
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The guest runs of `seeds` on `arch`, with `offered` the Debian versions
/// of that arch (for `Auto`).
pub fn plan(seeds: &[&Seed], arch: Arch, choice: &KernelChoice, offered: &[Version]) -> Plan {
    let mut p = Plan::default();
    for seed in seeds {
        for g in &seed.guest {
            let versions = match choice {
                KernelChoice::Given(v) => v.clone(),
                KernelChoice::Auto => match pick(&g.roles, offered) {
                    Ok(v) => v,
                    Err(why) => {
                        p.notes.push((seed.id, format!("{}: {why}", arch.name())));
                        continue;
                    }
                },
            };
            for version in versions {
                match p.runs.iter_mut().find(|r| {
                    r.version == version
                        && r.workload == g.workload
                        && r.sizes == g.sizes
                        && r.folios == g.folios
                }) {
                    Some(r) => r.seeds.push(seed.id),
                    None => p.runs.push(PlannedRun {
                        arch,
                        version,
                        workload: g.workload,
                        sizes: g.sizes.clone(),
                        folios: g.folios.clone(),
                        seeds: vec![seed.id],
                    }),
                }
            }
        }
    }
    p
}

/// The cells one guest run brought back.
#[derive(Clone, Debug)]
pub struct GuestRun {
    pub arch: Arch,
    /// The spec it booted (`debian:6.17.8`).
    pub kernel: String,
    /// The guest's `uname -r`.
    pub release: String,
    pub metric: Metric,
    pub workload: WorkloadKind,
    pub cells: Vec<CellResult>,
    /// Cells the guest could not measure, with the reason.
    pub failed: Vec<String>,
    pub run_id: Option<i64>,
}

/// `reproduce --json`'s `guests`: each cell named by what it holds, in the
/// run's unit (`report::json`).
impl Serialize for GuestRun {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("GuestRun", 8)?;
        st.serialize_field("arch", &self.arch)?;
        st.serialize_field("kernel", &self.kernel)?;
        st.serialize_field("release", &self.release)?;
        st.serialize_field("metric", &self.metric)?;
        st.serialize_field("workload", &self.workload)?;
        st.serialize_field(
            "cells",
            &crate::report::json::cells(&self.cells, self.metric),
        )?;
        st.serialize_field("failed", &self.failed)?;
        st.serialize_field("run_id", &self.run_id)?;
        st.end()
    }
}

impl GuestRun {
    pub fn version(&self) -> Option<Version> {
        release_version(&self.release)
    }
}

/// The guest runs of one reproduce, and why some did not happen.
#[derive(Clone, Debug, Default)]
pub struct GuestEvidence {
    pub runs: Vec<GuestRun>,
    /// (seed, why), seed "" for every seed.
    pub notes: Vec<(String, String)>,
    /// Arches that could not run guests at all, with the remedy.
    pub missing: Vec<(Arch, String)>,
    /// Arches whose guests ran but counted no mechanism (their QEMU cannot
    /// load ptelab's plugin), with the reason and the remedy.
    pub uncounted: Vec<(Arch, String)>,
    /// Arches asked for (`--arch`); empty when no guests were asked for.
    pub asked: Vec<Arch>,
    /// The guest biases stored (`calibrate --guest`): each cell's is the
    /// noise of its change between kernels.
    pub biases: Vec<crate::store::GuestBias>,
}

impl GuestEvidence {
    /// The versions measured on `arch` for `w`, oldest first.
    pub fn versions(&self, arch: Arch, w: WorkloadKind) -> Vec<Version> {
        let mut v: Vec<Version> = self
            .runs
            .iter()
            .filter(|r| r.arch == arch && r.workload == w)
            .filter_map(GuestRun::version)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The newest measured version without change `key` and the oldest with
    /// it, on `arch` for `w`.
    pub fn bracket(
        &self,
        arch: Arch,
        w: WorkloadKind,
        key: &str,
    ) -> Result<(Version, Version), String> {
        change(key).bracket(&self.versions(arch, w))
    }

    /// The run of `w` on `arch` and kernel `v`.
    pub fn run(&self, arch: Arch, v: Version, w: WorkloadKind) -> Option<&GuestRun> {
        self.runs
            .iter()
            .find(|r| r.arch == arch && r.workload == w && r.version() == Some(v))
    }

    /// One measured cell of a guest run.
    pub fn cell(
        &self,
        arch: Arch,
        v: Version,
        w: WorkloadKind,
        size: u64,
        folio: FolioSpec,
        phase: Option<&str>,
    ) -> Option<&CellResult> {
        let cells = &self.run(arch, v, w)?.cells;
        let at = |c: &&CellResult| c.size_bytes == size && c.folio == folio;
        // No phase asked: the cell without one, else the cell's one phase
        // (reclaim's names its method and LRU: `memcg-v2-reclaim ext4 mglru`).
        match phase {
            Some(p) => cells
                .iter()
                .filter(at)
                .find(|c| c.phase.as_deref() == Some(p)),
            None => cells
                .iter()
                .filter(at)
                .find(|c| c.phase.is_none())
                .or_else(|| cells.iter().find(at)),
        }
    }

    /// Why `arch` has no runs of `w` on `v`, when a reason is known.
    pub fn why_missing(&self, arch: Arch, v: Option<Version>, w: WorkloadKind) -> String {
        if self.asked.is_empty() {
            return "no guest kernels asked for (reproduce --kernels auto measures them)".into();
        }
        if !self.asked.contains(&arch) {
            return format!("{} guests not asked for (--arch)", arch.name());
        }
        if let Some((_, why)) = self.missing.iter().find(|(a, _)| *a == arch) {
            return why.clone();
        }
        if let Some(r) = v.and_then(|v| self.run(arch, v, w)) {
            if let Some(f) = r.failed.first() {
                return format!("{} guest {}: {f}", arch.name(), r.kernel);
            }
        }
        format!("no {} guest run of {w}", arch.name())
    }

    /// Why the mechanism was not counted in `arch` guests of `v`.
    pub fn why_uncounted(&self, arch: Arch, v: Version) -> String {
        match self.uncounted.iter().find(|(a, _)| *a == arch) {
            Some((_, why)) => format!("not counted on {} {v}: {why}", arch.name()),
            None => format!(
                "not counted on {} {v} (a KVM guest, which measures time and counts nothing)",
                arch.name()
            ),
        }
    }
}

/// The kernel a seed's figures across kernels are divided by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Baseline {
    pub version: Version,
    /// Why this kernel: `the newest kernel measured without cac1db8c3aad`.
    pub why: String,
    /// The same, short enough for a plot's title: `before cac1db8c3aad`.
    pub short: String,
}

impl GuestCells {
    /// The change the seed is about: the one its first `Before` role
    /// brackets (seed 001: mprotect batching, not the later fix).
    pub fn change(&self) -> Option<&'static str> {
        self.roles.iter().find_map(|r| match r {
            Role::Before(k) => Some(*k),
            _ => None,
        })
    }
}

impl GuestEvidence {
    /// The baseline of `w`'s cells on `arch`: the newest kernel measured
    /// without change `key` (the "before" kernel of the seed's change), or,
    /// when none measured lacks it or no change is named, the oldest kernel
    /// measured, which the reason then says.
    pub fn baseline(&self, arch: Arch, w: WorkloadKind, key: Option<&str>) -> Option<Baseline> {
        let versions = self.versions(arch, w);
        let oldest = *versions.first()?;
        let Some(c) = key.map(change) else {
            return Some(Baseline {
                version: oldest,
                why: "the oldest kernel measured".into(),
                short: "oldest measured".into(),
            });
        };
        Some(match versions.iter().filter(|v| !c.carried_by(v)).max() {
            Some(&v) => Baseline {
                version: v,
                why: format!(
                    "the newest kernel measured without {} ({}, {})",
                    c.commit,
                    c.subject,
                    c.release_name()
                ),
                short: format!("before {}", c.commit),
            },
            None => Baseline {
                version: oldest,
                why: format!(
                    "the oldest kernel measured; every kernel measured has {} ({}, {})",
                    c.commit,
                    c.subject,
                    c.release_name()
                ),
                short: format!("oldest measured, all with {}", c.commit),
            },
        })
    }
}

/// One row of a [`KernelGrid`]: a cell's folio, phase and size.
type Key = (FolioSpec, Option<String>, u64);

/// The cells of one workload in guests of several kernels of one arch.
#[derive(Clone, Debug)]
pub struct KernelGrid {
    pub arch: Arch,
    /// Arch, unit and accelerator.
    pub heading: String,
    /// The unit of the grid: its first (oldest) kernel's.
    pub metric: Metric,
    /// The kernels, oldest first: name (version, or the spec booted) and
    /// the metric its run measured in.
    kernels: Vec<(String, Metric)>,
    /// Cells by (folio, phase, size), in first-seen order.
    keys: Vec<Key>,
    /// `values[row][kernel]`: the median per call, `None` where that
    /// kernel did not measure the cell.
    values: Vec<Vec<Option<f64>>>,
    /// Index in `kernels` of the baseline kernel, and why it is; `None`
    /// with one kernel, or when the baseline ran in another metric.
    baseline: Option<(usize, Baseline)>,
}

impl KernelGrid {
    fn has_phase(&self) -> bool {
        self.keys.iter().any(|k| k.1.is_some())
    }

    /// The (folio, phase) curves of the grid, first-seen order.
    fn curves(&self) -> Vec<(FolioSpec, Option<String>)> {
        let mut out: Vec<(FolioSpec, Option<String>)> = Vec::new();
        for (folio, phase, _) in &self.keys {
            if !out.iter().any(|(f, p)| f == folio && p == phase) {
                out.push((*folio, phase.clone()));
            }
        }
        out
    }

    /// Kernels whose figures are in the grid's metric, which the plots draw.
    fn drawn(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.kernels.len()).filter(|&k| self.kernels[k].1 == self.metric)
    }

    /// The kernels divided by the baseline: every other one in its metric.
    fn compared(&self) -> Vec<usize> {
        match &self.baseline {
            Some((b, _)) => self.drawn().filter(|k| k != b).collect(),
            None => Vec::new(),
        }
    }

    /// Kernel `k`'s figure over the baseline's in row `row`; `None` where
    /// either did not measure the cell.
    pub fn ratio(&self, row: usize, k: usize) -> Option<f64> {
        let (b, _) = self.baseline.as_ref()?;
        let (v, base) = (self.values[row][k]?, self.values[row][*b]?);
        (base > 0.0 && v.is_finite()).then(|| v / base)
    }

    /// One line per (curve, drawn kernel), empty ones included so that a
    /// line's place (its colour) is the same on every plot: (label, kernel,
    /// points, gaps), `y` picking each row's value of that kernel (`None`:
    /// no point, a gap in the line).
    fn lines(
        &self,
        y: impl Fn(usize, usize) -> Option<f64>,
    ) -> Vec<(String, usize, Vec<Point>, Vec<f64>)> {
        let mut out = Vec::new();
        for (folio, phase) in self.curves() {
            for k in self.drawn() {
                let mut label = format!("{} {folio}", self.kernels[k].0);
                if let Some(p) = &phase {
                    label.push(' ');
                    label.push_str(p);
                }
                let mut points = Vec::new();
                let mut gaps = Vec::new();
                let mut rows: Vec<(usize, u64)> = self
                    .keys
                    .iter()
                    .enumerate()
                    .filter(|(_, (f, p, _))| *f == folio && *p == phase)
                    .map(|(i, (_, _, size))| (i, *size))
                    .collect();
                rows.sort_by_key(|(_, size)| *size);
                for (row, size) in rows {
                    match y(row, k) {
                        Some(y) => points.push(Point {
                            x: size as f64,
                            y,
                            lo: None,
                            hi: None,
                            marker: None,
                        }),
                        None => gaps.push(size as f64),
                    }
                }
                out.push((label, k, points, gaps));
            }
        }
        out
    }

    /// The report's section of seed `seed`: the table (each kernel's
    /// figure, then its ratio to the baseline kernel), and, when there is
    /// more than one size, a plot of the per-call figure against region
    /// size and one of the same relative to the baseline kernel.
    pub fn section(&self, seed: &str) -> KernelSection {
        let unit = match self.metric {
            Metric::Instructions => Unit::Instructions,
            Metric::Time => Unit::Nanoseconds,
        };
        let series = |lines: Vec<(String, usize, Vec<Point>, Vec<f64>)>| -> Vec<Series> {
            lines
                .into_iter()
                .enumerate()
                .filter(|(_, (_, _, points, _))| !points.is_empty())
                .map(|(i, (label, k, points, gaps))| {
                    let base = self.baseline.as_ref().is_some_and(|(b, _)| *b == k);
                    Series {
                        label: if base {
                            format!("{label} (baseline)")
                        } else {
                            label
                        },
                        color: i,
                        dashed: false,
                        points,
                        gaps,
                    }
                })
                .collect()
        };
        let id = format!("kernels-{seed}-{}", self.arch.name());
        let absolute = self.lines(|row, k| self.values[row][k]);
        let multi = absolute.iter().any(|(_, _, p, _)| p.len() > 1);
        let plot = multi.then(|| Plot {
            id: id.clone(),
            title: format!("seed {seed}: {}", self.heading),
            x: Axis::sizes(),
            y: Axis {
                label: format!("{} (log10)", self.metric.per_call_words()),
                scale: Scale::Log10,
                unit,
            },
            series: series(absolute),
            reference: None,
        });
        let relative = self
            .baseline
            .as_ref()
            .filter(|_| multi && !self.compared().is_empty())
            .map(|(b, why)| {
                let base = &self.kernels[*b].0;
                Plot {
                    id: format!("{id}-relative"),
                    title: format!(
                        "seed {seed}: {} guests, {} relative to {base} ({})",
                        self.arch.name(),
                        self.metric.per_call_words(),
                        why.short
                    ),
                    x: Axis::sizes(),
                    y: Axis {
                        label: format!(
                            "kernel / {base}, {} (linear)",
                            self.metric.per_call_words()
                        ),
                        scale: Scale::Linear,
                        unit: Unit::Ratio,
                    },
                    series: series(self.lines(|row, k| self.ratio(row, k))),
                    reference: Some(1.0),
                }
            });
        KernelSection {
            seed: seed.to_string(),
            heading: self.heading.clone(),
            columns: self.columns(),
            rows: self.rows(),
            baseline: self
                .baseline
                .as_ref()
                .filter(|_| !self.compared().is_empty())
                .map(|(b, why)| format!("{}, {}", self.kernels[*b].0, why.why)),
            plot,
            relative,
        }
    }

    /// `folio`, [`phase`], `size_kib`, one per kernel oldest first, then
    /// `KERNEL/BASELINE` for each kernel compared with the baseline.
    fn columns(&self) -> Vec<String> {
        let mut columns = vec!["folio".to_string()];
        if self.has_phase() {
            columns.push("phase".into());
        }
        columns.push("size_kib".into());
        for (name, metric) in &self.kernels {
            // A run in another metric (mixed accelerators) says so.
            columns.push(if *metric == self.metric {
                name.clone()
            } else {
                format!("{name} ({})", metric.per_call_unit())
            });
        }
        if let Some((b, _)) = &self.baseline {
            for k in self.compared() {
                columns.push(format!("{}/{}", self.kernels[k].0, self.kernels[*b].0));
            }
        }
        columns
    }

    /// One row per cell: its figure on each kernel (`-` where not
    /// measured), then its ratios (`1.94x`).
    fn rows(&self) -> Vec<Vec<String>> {
        let compared = self.compared();
        self.keys
            .iter()
            .enumerate()
            .map(|(row, (folio, phase, size))| {
                let mut r = vec![folio.to_string()];
                if self.has_phase() {
                    r.push(phase.clone().unwrap_or_default());
                }
                r.push((size >> 10).to_string());
                r.extend(
                    self.values[row]
                        .iter()
                        .map(|v| v.map_or("-".to_string(), |v| format!("{v:.0}"))),
                );
                r.extend(compared.iter().map(|&k| {
                    self.ratio(row, k)
                        .map_or("-".to_string(), |x| format!("{x:.2}x"))
                }));
                r
            })
            .collect()
    }
}

impl GuestEvidence {
    /// The cells of `cells.workload` measured in `arch` guests, one row per
    /// cell (folio, phase, size) and one column per kernel, oldest first:
    /// the shape of the seeds' own tables, with each kernel's ratio to the
    /// seed's baseline kernel ([`GuestEvidence::baseline`]). Figures are in
    /// the runs' metric, named in the heading; a kernel that did not
    /// measure a cell shows `-`.
    pub fn grid(&self, arch: Arch, cells: &GuestCells) -> Option<KernelGrid> {
        let w = cells.workload;
        let mut runs: Vec<&GuestRun> = self
            .runs
            .iter()
            .filter(|r| r.arch == arch && r.workload == w)
            .collect();
        runs.sort_by_key(|r| r.version());
        let metric = runs.first()?.metric;
        let mut keys: Vec<Key> = Vec::new();
        for r in &runs {
            for c in &r.cells {
                let k = (c.folio, c.phase.clone(), c.size_bytes);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        if keys.is_empty() {
            return None;
        }
        let name = |r: &GuestRun| r.version().map_or(r.kernel.clone(), |v| v.to_string());
        let values = keys
            .iter()
            .map(|(folio, phase, size)| {
                runs.iter()
                    .map(|r| {
                        r.cells
                            .iter()
                            .find(|c| {
                                c.folio == *folio && c.phase == *phase && c.size_bytes == *size
                            })
                            .map(|c| c.ns_per_call.median)
                    })
                    .collect()
            })
            .collect();
        let baseline = (runs.len() > 1)
            .then(|| self.baseline(arch, w, cells.change()))
            .flatten()
            .and_then(|b| {
                let i = runs.iter().position(|r| r.version() == Some(b.version))?;
                (runs[i].metric == metric).then_some((i, b))
            });
        Some(KernelGrid {
            arch,
            heading: format!(
                "{} guests, {} ({})",
                arch.name(),
                metric.per_call_words(),
                match metric {
                    Metric::Instructions => "TCG: exact guest instruction counts, not time",
                    Metric::Time => "KVM: wall time",
                }
            ),
            metric,
            kernels: runs.iter().map(|r| (name(r), r.metric)).collect(),
            keys,
            values,
            baseline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn offered() -> Vec<Version> {
        [
            "6.12.117", "6.16.12", "6.17.8", "6.17.13", "6.18.15", "6.19.6", "7.0.13", "7.1.3",
            "7.3.4",
        ]
        .map(v)
        .to_vec()
    }

    #[test]
    fn auto_picks_the_bracketing_kernels_once_each() {
        let catalogue = super::super::seeds(true);
        let chosen: Vec<&Seed> = catalogue.iter().collect();
        let p = plan(&chosen, Arch::Arm64, &KernelChoice::Auto, &offered());
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        let of = |w: WorkloadKind| -> Vec<String> {
            p.runs
                .iter()
                .filter(|r| r.workload == w)
                .map(|r| r.version.to_string())
                .collect()
        };
        assert_eq!(of(WorkloadKind::MprotectRoRw), ["6.16.12", "6.17.8"]);
        assert_eq!(
            of(WorkloadKind::MprotectToggle),
            ["6.16.12", "6.17.8", "7.0.13", "7.1.3", "7.3.4"]
        );
        assert_eq!(of(WorkloadKind::ProtTransition), ["6.18.15", "6.19.6"]);
        assert_eq!(of(WorkloadKind::Reclaim), ["7.0.13", "7.1.3"]);
        assert!(p.runs.iter().all(|r| r.arch == Arch::Arm64));
    }

    #[test]
    fn a_seed_whose_change_is_not_bracketed_says_which_kernels_it_needs() {
        let catalogue = super::super::seeds(true);
        let chosen: Vec<&Seed> = catalogue.iter().filter(|s| s.id == "003").collect();
        let p = plan(&chosen, Arch::X86_64, &KernelChoice::Auto, &offered()[..4]);
        assert!(p.runs.is_empty());
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].1.contains("one from v6.19 on"), "{:?}", p.notes);
    }

    #[test]
    fn given_kernels_run_every_seed() {
        let catalogue = super::super::seeds(true);
        let chosen: Vec<&Seed> = catalogue.iter().collect();
        let given = KernelChoice::Given(vec![v("6.16.12"), v("6.17.13")]);
        let p = plan(&chosen, Arch::X86_64, &given, &[]);
        let workloads = catalogue.iter().flat_map(|s| &s.guest).count();
        assert_eq!(p.runs.len(), 2 * workloads);
    }

    /// A guest run of seed 001's workload on `release`, one 4K cell per
    /// (KiB, figure).
    fn guest_run(release: &str, figures: &[(u64, f64)]) -> GuestRun {
        use crate::record::fixtures::fixture;
        GuestRun {
            arch: Arch::X86_64,
            kernel: format!("debian:{}", &release[..release.find('+').unwrap()]),
            release: release.into(),
            metric: Metric::Instructions,
            workload: WorkloadKind::MprotectToggle,
            cells: figures
                .iter()
                .map(|&(kib, v)| fixture(kib, v, FolioSpec::Base))
                .collect(),
            failed: Vec::new(),
            run_id: Some(1),
        }
    }

    /// Two kernels of seed 001's sweep, as the guests would answer.
    fn evidence() -> GuestEvidence {
        GuestEvidence {
            runs: vec![
                guest_run(
                    "6.17.8+deb13-cloud-amd64",
                    &[(400, 38535.0), (4000, 362317.0)],
                ),
                guest_run(
                    "6.16.12+deb13-cloud-amd64",
                    &[(400, 20984.0), (4000, 186344.0)],
                ),
            ],
            asked: vec![Arch::X86_64],
            ..GuestEvidence::default()
        }
    }

    /// Seed 001's guest cells, as the catalogue defines them.
    fn seed001() -> GuestCells {
        let catalogue = super::super::seeds(true);
        let seed = catalogue.iter().find(|s| s.id == "001").unwrap();
        seed.guest[0].clone()
    }

    /// Three kernels around seed 001's change: 6.17.8 at twice 6.16.12
    /// (exactly, at 40K and 4000K), 7.1.3 without its 400K cell.
    fn three_kernels() -> GuestEvidence {
        GuestEvidence {
            runs: vec![
                guest_run("7.1.3+deb13-cloud-amd64", &[(40, 5000.0), (4000, 300000.0)]),
                guest_run(
                    "6.16.12+deb13-cloud-amd64",
                    &[(40, 3000.0), (400, 20984.0), (4000, 186344.0)],
                ),
                guest_run(
                    "6.17.8+deb13-cloud-amd64",
                    &[(40, 6000.0), (400, 38535.0), (4000, 372688.0)],
                ),
            ],
            asked: vec![Arch::X86_64],
            ..GuestEvidence::default()
        }
    }

    #[test]
    fn the_kernel_table_has_one_column_per_kernel_oldest_first() {
        let g = evidence();
        let grid = g.grid(Arch::X86_64, &seed001()).unwrap();
        insta::assert_snapshot!(format!(
            "{}\n{}",
            grid.heading,
            grid.section("001").table().text(" | ")
        ));
        let s = grid.section("001");
        insta::assert_snapshot!(grid.section("001").table().markdown());
        let plot = s.plot.unwrap();
        assert_eq!(plot.series.len(), 2);
        assert_eq!(plot.series[0].label, "6.16.12 4K (baseline)");
        assert_eq!(plot.series[1].label, "6.17.8 4K");
        assert_eq!(plot.y.unit, Unit::Instructions);
        let mut other = seed001();
        other.workload = WorkloadKind::MremapMove;
        assert!(g.grid(Arch::Arm64, &seed001()).is_none());
        assert!(g.grid(Arch::X86_64, &other).is_none());
        assert_eq!(
            g.bracket(
                Arch::X86_64,
                WorkloadKind::MprotectToggle,
                "mprotect-batching"
            )
            .unwrap()
            .1
            .to_string(),
            "6.17.8"
        );
        assert!(g
            .why_missing(Arch::Arm64, None, WorkloadKind::MprotectToggle)
            .contains("not asked for"));
    }

    #[test]
    fn the_baseline_is_the_kernel_before_the_seeds_change() {
        let w = WorkloadKind::MprotectToggle;
        assert_eq!(seed001().change(), Some("mprotect-batching"));
        let g = three_kernels();
        let b = g
            .baseline(Arch::X86_64, w, Some("mprotect-batching"))
            .unwrap();
        assert_eq!(b.version.to_string(), "6.16.12");
        assert!(b.why.contains("without cac1db8c3aad"), "{}", b.why);
        // The fix's own baseline is the last kernel without it.
        let b = g
            .baseline(Arch::X86_64, w, Some("small-folio-mprotect"))
            .unwrap();
        assert_eq!(b.version.to_string(), "6.17.8");
        // Kernels that all carry the change: the oldest, and the reason says so.
        let mut later = three_kernels();
        later.runs.retain(|r| !r.release.starts_with("6.16"));
        let b = later
            .baseline(Arch::X86_64, w, Some("mprotect-batching"))
            .unwrap();
        assert_eq!(b.version.to_string(), "6.17.8");
        assert!(b.why.contains("every kernel measured has cac1db8c3aad"));
        assert!(g.baseline(Arch::Arm64, w, None).is_none());
    }

    #[test]
    fn the_relative_series_divide_by_the_baseline_and_leave_gaps() {
        let grid = three_kernels().grid(Arch::X86_64, &seed001()).unwrap();
        let s = grid.section("001");
        let rel = s.relative.as_ref().unwrap();
        assert_eq!(rel.reference, Some(1.0));
        assert_eq!((rel.y.scale, rel.y.unit), (Scale::Linear, Unit::Ratio));
        assert_eq!(rel.x.scale, Scale::Log2);
        assert!(rel.title.contains("relative to 6.16.12"), "{}", rel.title);
        let by_label = |l: &str| rel.series.iter().find(|s| s.label == l).unwrap();
        let xy = |s: &Series| -> Vec<(f64, f64)> { s.points.iter().map(|p| (p.x, p.y)).collect() };
        // The baseline is exactly 1.0 wherever it measured.
        let base = by_label("6.16.12 4K (baseline)");
        assert_eq!(
            xy(base),
            [(40960.0, 1.0), (409600.0, 1.0), (4096000.0, 1.0)]
        );
        // Twice the baseline is 2.0.
        let after = by_label("6.17.8 4K");
        assert_eq!(after.points[0].y, 2.0);
        assert_eq!(after.points[2].y, 2.0);
        assert!((after.points[1].y - 38535.0 / 20984.0).abs() < 1e-12);
        // A cell not measured is a gap in the line, not a zero.
        let fix = by_label("7.1.3 4K");
        assert_eq!(xy(fix).len(), 2);
        assert!(fix.points.iter().all(|p| p.y > 0.0 && p.x != 409600.0));
        assert_eq!(fix.gaps, [409600.0]);
        // Each kernel keeps its colour on both plots.
        let abs = s.plot.as_ref().unwrap();
        for line in &rel.series {
            let same = abs.series.iter().find(|a| a.label == line.label).unwrap();
            assert_eq!(same.color, line.color, "{}", line.label);
        }
        // The table: figures, then ratios; '-' where a side is missing.
        assert_eq!(
            s.columns,
            [
                "folio",
                "size_kib",
                "6.16.12",
                "6.17.8",
                "7.1.3",
                "6.17.8/6.16.12",
                "7.1.3/6.16.12"
            ]
        );
        let row400 = s.rows.iter().find(|r| r[1] == "400").unwrap();
        assert_eq!(row400[3..], ["38535", "-", "1.84x", "-"]);
        assert!(s
            .baseline
            .as_deref()
            .unwrap()
            .starts_with("6.16.12, the newest"));
    }

    #[test]
    fn a_guest_runs_json_names_its_figures_by_their_unit() {
        let v = serde_json::to_value(&evidence().runs[0]).unwrap();
        assert_eq!(v["metric"], "instructions");
        let c = &v["cells"][0];
        assert_eq!(
            (c["unit"].as_str(), c["per_call"]["median"].as_f64()),
            (Some("instructions"), Some(38535.0))
        );
        assert!(c.get("ns_per_call").is_none() && c.get("ns_per_page").is_none());
    }

    #[test]
    fn one_kernel_has_no_baseline_and_no_relative_plot() {
        let mut g = evidence();
        g.runs.truncate(1);
        let s = g.grid(Arch::X86_64, &seed001()).unwrap().section("001");
        assert!(s.baseline.is_none() && s.relative.is_none());
        assert_eq!(s.columns, ["folio", "size_kib", "6.17.8"]);
    }

    #[test]
    fn the_report_shows_the_ratios_beside_the_figures() {
        use crate::report::view::ReportBuilder;
        let s = three_kernels()
            .grid(Arch::X86_64, &seed001())
            .unwrap()
            .section("001");
        let svg = crate::report::plot::Plotter::plot(
            &crate::report::plot::SvgPlotter::default(),
            s.relative.as_ref().unwrap(),
        );
        insta::assert_snapshot!("relative_plot_svg", svg);
        let m = ReportBuilder::new("across kernels")
            .kernel_section(s)
            .build();
        let md = String::from_utf8(crate::report::markdown::render_markdown(&m).unwrap()).unwrap();
        let from = md.find("## Seed 001").unwrap();
        insta::assert_snapshot!("kernel_section_markdown", &md[from..]);
        let html = String::from_utf8(crate::report::html::render_html(&m).unwrap()).unwrap();
        assert_eq!(html.matches("<svg ").count(), 2);
        assert!(html.contains("relative to 6.16.12 (before cac1db8c3aad)"));
        assert!(
            html.contains("<th class=\"n\">6.17.8/6.16.12</th>"),
            "{html}"
        );
    }
}
