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
use crate::guest::spec::Version;
use crate::guest::Arch;
use crate::record::{CellResult, Metric};
use crate::report::view::{Axis, KernelSection, Plot, Point, Scale, Series, Unit};
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

/// Which kernels to run on.
#[derive(Clone, Debug)]
pub enum KernelChoice {
    /// The kernels each seed's roles pick among those offered.
    Auto,
    /// These versions, for every seed.
    Given(Vec<Version>),
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
#[derive(Clone, Debug, Serialize)]
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
    /// Arches asked for (`--arch`); empty when no guests were asked for.
    pub asked: Vec<Arch>,
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
}

/// The cells of one workload in guests of several kernels of one arch.
#[derive(Clone, Debug)]
pub struct KernelGrid {
    /// Arch, unit and accelerator.
    pub heading: String,
    pub metric: Metric,
    /// `folio`, [`phase`], `size_kib`, then one per kernel, oldest first.
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// One line per (kernel, folio, phase): (label, [(bytes, per call)]).
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

impl KernelGrid {
    /// The report's section of seed `seed`: the table, and a plot of the
    /// per-call figure against region size when there is more than one size.
    pub fn section(&self, seed: &str) -> KernelSection {
        let unit = match self.metric {
            Metric::Instructions => Unit::Instructions,
            Metric::Time => Unit::Nanoseconds,
        };
        let plot = self.lines.iter().any(|(_, p)| p.len() > 1).then(|| Plot {
            id: format!(
                "kernels-{seed}-{}",
                self.heading.split_whitespace().next().unwrap_or("guests")
            ),
            title: format!("seed {seed}: {}", self.heading),
            x: Axis {
                label: "region size (bytes, log2)".into(),
                scale: Scale::Log2,
                unit: Unit::Bytes,
            },
            y: Axis {
                label: format!("{} (log10)", self.metric.per_call_words()),
                scale: Scale::Log10,
                unit,
            },
            series: self
                .lines
                .iter()
                .enumerate()
                .map(|(i, (label, pts))| Series {
                    label: label.clone(),
                    color: i,
                    dashed: false,
                    points: pts
                        .iter()
                        .map(|&(x, y)| Point {
                            x,
                            y,
                            lo: None,
                            hi: None,
                            marker: None,
                        })
                        .collect(),
                })
                .collect(),
            reference: None,
        });
        KernelSection {
            seed: seed.to_string(),
            heading: self.heading.clone(),
            columns: self.columns.clone(),
            rows: self.rows.clone(),
            plot,
        }
    }
}

impl GuestEvidence {
    /// The cells of `w` measured in `arch` guests, one row per cell (folio,
    /// phase, size) and one column per kernel, oldest first: the shape of
    /// the seeds' own tables. Figures are in the runs' metric, named in the
    /// heading; a kernel that did not measure a cell shows `-`.
    pub fn grid(&self, arch: Arch, w: WorkloadKind) -> Option<KernelGrid> {
        let mut runs: Vec<&GuestRun> = self
            .runs
            .iter()
            .filter(|r| r.arch == arch && r.workload == w)
            .collect();
        runs.sort_by_key(|r| r.version());
        let metric = runs.first()?.metric;
        let mut keys: Vec<(FolioSpec, Option<String>, u64)> = Vec::new();
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
        let has_phase = keys.iter().any(|k| k.1.is_some());
        let mut columns = vec!["folio".to_string()];
        if has_phase {
            columns.push("phase".into());
        }
        columns.push("size_kib".into());
        let name = |r: &GuestRun| r.version().map_or(r.kernel.clone(), |v| v.to_string());
        for r in &runs {
            // A run in another metric (mixed accelerators) says so.
            columns.push(if r.metric == metric {
                name(r)
            } else {
                format!("{} ({})", name(r), r.metric.per_call_unit())
            });
        }
        let mut rows = Vec::new();
        let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (folio, phase, size) in keys {
            let mut row = vec![folio.to_string()];
            if has_phase {
                row.push(phase.clone().unwrap_or_default());
            }
            row.push((size >> 10).to_string());
            for r in &runs {
                let cell = r
                    .cells
                    .iter()
                    .find(|c| c.folio == folio && c.phase == phase && c.size_bytes == size);
                row.push(cell.map_or("-".to_string(), |c| format!("{:.0}", c.ns_per_call.median)));
                if let Some(c) = cell.filter(|_| r.metric == metric) {
                    let mut label = format!("{} {folio}", name(r));
                    if let Some(p) = &phase {
                        label.push(' ');
                        label.push_str(p);
                    }
                    match lines.iter_mut().find(|(l, _)| *l == label) {
                        Some((_, pts)) => pts.push((size as f64, c.ns_per_call.median)),
                        None => lines.push((label, vec![(size as f64, c.ns_per_call.median)])),
                    }
                }
            }
            rows.push(row);
        }
        Some(KernelGrid {
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
            columns,
            rows,
            lines,
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

    /// Two kernels of seed 001's sweep, as the guests would answer.
    fn evidence() -> GuestEvidence {
        use crate::record::fixtures::fixture;
        let run = |release: &str, figures: &[(u64, f64)]| GuestRun {
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
        };
        GuestEvidence {
            runs: vec![
                run(
                    "6.17.8+deb13-cloud-amd64",
                    &[(400, 38535.0), (4000, 362317.0)],
                ),
                run(
                    "6.16.12+deb13-cloud-amd64",
                    &[(400, 20984.0), (4000, 186344.0)],
                ),
            ],
            asked: vec![Arch::X86_64],
            ..GuestEvidence::default()
        }
    }

    #[test]
    fn the_kernel_table_has_one_column_per_kernel_oldest_first() {
        let g = evidence();
        let grid = g.grid(Arch::X86_64, WorkloadKind::MprotectToggle).unwrap();
        insta::assert_snapshot!(format!(
            "{}\n{}",
            grid.heading,
            grid.section("001").table().text(" | ")
        ));
        let s = grid.section("001");
        insta::assert_snapshot!(grid.section("001").table().markdown());
        let plot = s.plot.unwrap();
        assert_eq!(plot.series.len(), 2);
        assert_eq!(plot.series[0].label, "6.16.12 4K");
        assert_eq!(plot.y.unit, Unit::Instructions);
        assert!(g.grid(Arch::Arm64, WorkloadKind::MprotectToggle).is_none());
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
}
