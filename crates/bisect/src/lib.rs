//! `ptelab bisect`: find the kernel change behind a figure (docs/bisect.md).
//!
//! Over the Debian versions between two endpoints (`versions`), or over a
//! git tree's commits, built per step (`tree`). Both measure the endpoints
//! first and refuse to start when they are not separated beyond the noise
//! (`classify`), then search, measuring each step through the fleet (one
//! bench cell per guest run, stored with a `bisect:ID` tag) and keeping the
//! figures in a state file so an interrupted bisect resumes (`state`).
//! The figure is the cell's, or one of its mechanism counters
//! (`--metric`), which every step's guest then counts under TCG.
//! Kernels are measured in rounds, the endpoints together: through
//! `--executor slurm` a round is one job array of boots (the fleet's
//! executor), and a tree's builds are Slurm tasks too (`fleet::builds`),
//! into the shared cache.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_fleet as fleet;
use ptelab_guest as guest;
use ptelab_kernel as kernel;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod classify;
pub mod git;
pub mod report;
pub mod search;
pub mod state;
pub mod tree;
pub mod versions;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::fleet::{Fleet, Job, Measured, Settings};
use crate::guest::boot::profile::Symbols;
use crate::guest::build::short;
use crate::guest::source::cache::Cache;
use crate::guest::source::Kernel;
use crate::record::{Counter, Metric};
use crate::store::OnFirstUse;
use crate::workload::Arch;
use classify::{Classifier, Quantity, Verdict};
use state::{Measurement, State};

/// What every bisect needs, from the command line.
pub struct Setup<'a> {
    pub cache: &'a Cache,
    pub settings: Settings,
    /// Opened at the first run stored, so that a bisect refused before it
    /// creates no database.
    pub store: Option<&'a OnFirstUse>,
    /// ptelab's arguments in the guest (a `bench … --no-store --json`).
    pub args: Vec<String>,
    /// The guest command as the user typed it.
    pub words: Vec<String>,
    /// Bytes of files the guest command writes (reclaim: it gets a disk).
    pub disk: Option<u64>,
    /// `--tag`s, added to every stored run.
    pub tags: Vec<String>,
    /// Guest runs per step; None: 1 under the instruction metric, 3 under time.
    pub replicates: Option<u32>,
    /// The separation the endpoints need, a fraction.
    pub noise: f64,
    pub threshold: Option<f64>,
    /// The mechanism counter followed instead of the bench figure (the
    /// fleet's settings then profile every guest under TCG).
    pub counter: Option<Counter>,
    /// `--phase`: the one cell followed of a bench that measures several.
    pub phase: Option<String>,
    /// `--executor slurm`: a tree's builds are Slurm tasks (the guests go
    /// through the fleet's executor, in `settings`).
    pub slurm: Option<crate::fleet::slurm::Request>,
    /// The `ptelab bisect …` command line, for the report.
    pub invocation: String,
}

/// Where a step sits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Good,
    Bad,
    Step,
}

/// One kernel measured (or not) and its verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub role: Role,
    /// A Debian version or a commit id.
    pub id: String,
    /// The commit's subject.
    pub subject: Option<String>,
    pub measurement: Option<Measurement>,
    pub verdict: Verdict,
    /// Taken from the state of an earlier, interrupted bisect.
    pub resumed: bool,
}

/// A version or commit (with its subject).
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    pub id: String,
    pub subject: Option<String>,
}

/// What a bisect found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The `bisect:ID` tag of its stored runs, and its state file's name.
    pub id: String,
    /// `versions` or `git`.
    pub kind: &'static str,
    pub repo: Option<std::path::PathBuf>,
    pub good: String,
    pub bad: String,
    pub arch: Arch,
    pub command: Vec<String>,
    /// The phase followed (`--phase`), of a bench measuring several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    pub invocation: String,
    pub classifier: Classifier,
    pub steps: Vec<Step>,
    /// The first bad version or commit (with its subject); with skips
    /// left in between, every candidate, oldest first.
    pub first_bad: Vec<Found>,
    pub last_good: String,
}

impl Report {
    pub fn quantity(&self) -> &Quantity {
        &self.classifier.quantity
    }

    /// The step measured on `id`.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| s.id == id && s.measurement.is_some())
    }
}

/// A short hash naming a bisect (its tag and state file), from `parts`,
/// the counter followed and the phase (a bisect of the bench figure of a
/// one-phase bench keeps the name it had before counters and phases).
pub fn bisect_id(parts: &[&str], counter: Option<&Counter>, phase: Option<&str>) -> String {
    let mut h = Sha256::new();
    let counter = counter.map(Counter::name);
    let phase = phase.map(|p| format!("phase:{p}"));
    for p in parts
        .iter()
        .copied()
        .chain(counter.as_deref())
        .chain(phase.as_deref())
    {
        h.update(p.as_bytes());
        h.update([0]);
    }
    format!("{:x}", h.finalize())[..12].to_string()
}

/// Measures kernels through the fleet, remembering figures in the state.
pub struct Prober<'a> {
    setup: &'a Setup<'a>,
    /// Prepared at the first boot: a resumed bisect may need none.
    fleet: Option<Fleet>,
    kernel: Kernel,
    state: State,
    tag: String,
    /// Measured by this run (not taken from the state).
    fresh: std::collections::BTreeSet<String>,
    /// Why a kernel measured in this run gave no figure.
    failed: std::collections::BTreeMap<String, String>,
}

impl<'a> Prober<'a> {
    /// Measures guests of `kernel`'s arch; the guest binary and the
    /// accelerator are prepared before the first boot (a resumed bisect
    /// may need none).
    pub fn new(
        setup: &'a Setup<'a>,
        kernel: &Kernel,
        id: &str,
        about: &str,
    ) -> anyhow::Result<Prober<'a>> {
        let state = State::load(&setup.cache.root.join("bisect").join("state"), id, about);
        if !state.measured.is_empty() {
            eprintln!(
                "ptelab: resuming bisect {id}: {} kernels measured already ({})",
                state.measured.len(),
                state.path().display()
            );
        }
        Ok(Prober {
            setup,
            fleet: None,
            kernel: kernel.clone(),
            state,
            tag: format!("bisect:{id}"),
            fresh: Default::default(),
            failed: Default::default(),
        })
    }

    /// The figures of `kernel` (named `id` in the state): remembered, or
    /// measured now. `Ok(Err(why))` when the guest gave no figure (did not
    /// boot, the command failed, the answer was refused).
    pub fn measure(
        &mut self,
        id: &str,
        kernel: &Kernel,
    ) -> anyhow::Result<(Result<Measurement, String>, bool)> {
        let remembered = self.state.measured.contains_key(id);
        self.prefetch(&[(id, kernel)])?;
        match (self.state.measured.get(id), self.failed.get(id)) {
            (Some(m), _) => Ok((Ok(m.clone()), remembered && !self.fresh.contains(id))),
            (None, Some(why)) => Ok((Err(why.clone()), false)),
            (None, None) => unreachable!("prefetch measured it or said why not"),
        }
    }

    /// Measure every item not measured yet, in rounds (`rounds`): the
    /// endpoints together, and through Slurm each round one job array.
    /// The figures go to the state, or why there are none to `failed`.
    pub fn prefetch(&mut self, items: &[Item]) -> anyhow::Result<()> {
        let todo: Vec<Item> = items
            .iter()
            .filter(|(id, _)| {
                !self.state.measured.contains_key(*id) && !self.failed.contains_key(*id)
            })
            .copied()
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        if self.fleet.is_none() {
            self.fleet = Some(Fleet::prepare(
                self.setup.cache,
                self.setup.settings.clone(),
                std::slice::from_ref(&self.kernel),
            )?);
        }
        let fleet = self.fleet.as_ref().expect("prepared");
        let got = rounds(todo.len(), self.setup.replicates, |round| {
            let jobs: Vec<Job> = round
                .iter()
                .map(|&i| Job {
                    kernel: todo[i].1,
                    name: "bisect".into(),
                    args: self.setup.args.clone(),
                    program: None,
                    disk: self.setup.disk,
                    setup: Default::default(),
                })
                .collect();
            let finished = fleet.run(&jobs)?;
            round
                .iter()
                .zip(finished)
                .map(|(&i, done)| self.figure(todo[i].1, done))
                .collect()
        })?;
        for ((id, _), m) in todo.iter().zip(got) {
            match m {
                Ok(m) => {
                    self.state.record(id, m)?;
                    self.fresh.insert(id.to_string());
                }
                Err(why) => {
                    self.failed.insert(id.to_string(), why);
                }
            }
        }
        Ok(())
    }

    /// One guest's figure of `kernel`, stored as a run when there is a
    /// store; `Ok(Err(why))` when the guest gave none.
    fn figure(
        &self,
        kernel: &Kernel,
        done: crate::fleet::Finished,
    ) -> anyhow::Result<Result<Measurement, String>> {
        let log = done.log.display().to_string();
        let (done_before, done_mark) = (done.before, done.mark.clone());
        let out = match done.answer {
            Ok(out) => out,
            Err(e) => return Ok(Err(format!("no answer from the guest ({e:#})"))),
        };
        if out.exit_code != 0 {
            return Ok(Err(format!(
                "the guest command exited {} on Linux {}; console log {log}",
                out.exit_code, out.kernel_release
            )));
        }
        let measured = match Measured::parse(&out.stdout, kernel, &out) {
            Ok(m) => m,
            Err(e) => {
                return Ok(Err(format!(
                    "the guest's answer was refused ({e:#}); console log {log}"
                )))
            }
        };
        let cell = match pick_cell(&measured.cells, self.setup.phase.as_deref()) {
            Ok(c) => c,
            Err(why) => {
                return Ok(Err(format!(
                    "{why}{}; console log {log}",
                    measured
                        .failed
                        .first()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                )))
            }
        };
        let figure = match &self.setup.counter {
            None => cell.ns_per_call.median,
            Some(c) => match counted(c, cell, &out) {
                Ok(v) => v,
                Err(why) => return Ok(Err(format!("{why}; console log {log}"))),
            },
        };
        let mut run_ids = Vec::new();
        // An answer a resumed batch handed to the run before was stored then.
        if let (Some(store), false) = (self.setup.store, done_before) {
            let mut tags = vec![self.tag.clone()];
            tags.extend(self.setup.tags.iter().cloned());
            run_ids.push(measured.store(store.get()?, "bench", kernel, &tags)?);
            crate::fleet::Finished::mark_stored(&done_mark);
        }
        Ok(Ok(Measurement {
            figures: vec![figure],
            quantity: Quantity {
                metric: out.accel.metric(),
                counter: self.setup.counter.clone(),
            },
            release: out.kernel_release.clone(),
            size_bytes: cell.size_bytes,
            run_ids,
        }))
    }
}

/// The cell a step is judged by: the one of `phase`, or the only one.
pub(crate) fn pick_cell<'c>(
    cells: &'c [crate::record::CellResult],
    phase: Option<&str>,
) -> Result<&'c crate::record::CellResult, String> {
    let names = || {
        cells
            .iter()
            .map(|c| c.phase.as_deref().unwrap_or("(unnamed)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (phase, cells) {
        (_, []) => Err("the guest measured no cell".into()),
        (None, [one]) => Ok(one),
        (None, _) => Err(format!(
            "the guest measured {} cells, of the phases {}: bisect follows one, named with --phase",
            cells.len(),
            names()
        )),
        // A reclaim phase is its method with the LRU after a space
        // (`swpout-whole mglru`): the method alone names it too.
        (Some(p), _) => cells
            .iter()
            .find(|c| {
                c.phase
                    .as_deref()
                    .is_some_and(|n| n == p || n.split(' ').next() == Some(p))
            })
            .ok_or_else(|| {
                format!(
                    "the guest measured no phase '{p}': its phases are {}",
                    names()
                )
            }),
    }
}

/// Check `--phase` against the phases a bench of `workload` measures, when
/// they are known before a boot (reclaim's are named by the guest kernel:
/// checked on the endpoints' answers).
pub fn check_phase(
    workload: crate::workload::WorkloadKind,
    phase: Option<&str>,
) -> anyhow::Result<()> {
    let Some(phases) = workload.phases() else {
        return Ok(());
    };
    match phase {
        Some(p) if phases.is_empty() => crate::error::bail_usage!(
            "--phase {p}: bench {workload} measures one unnamed phase, so there is no phase to \
             choose: drop --phase"
        ),
        Some(p) if !phases.contains(&p) => crate::error::bail_usage!(
            "--phase {p}: bench {workload} measures no phase of that name; accepted names: {}",
            phases.join(", ")
        ),
        None if !phases.is_empty() => crate::error::bail_usage!(
            "bench {workload} measures {} phases, one cell each, and bisect follows one: pass \
             --phase NAME, one of {}",
            phases.len(),
            phases.join(", ")
        ),
        _ => Ok(()),
    }
}

/// `counter` of a profiled cell, or why the guest gave none.
fn counted(
    counter: &Counter,
    cell: &crate::record::CellResult,
    out: &crate::guest::boot::run::GuestOutput,
) -> Result<f64, String> {
    let Some(profile) = &cell.profile else {
        return Err(format!(
            "the guest counted nothing for {} ({} guest: the counters need TCG and ptelab's QEMU plugin)",
            counter.name(),
            out.accel.name()
        ));
    };
    if counter.function().is_some() {
        // Without the kernel's symbols a function has no name to count by.
        let why = match &out.symbol_table {
            Some(Ok(t)) if !t.is_empty() => None,
            Some(Ok(_)) => Some("its /proc/kallsyms has no text symbols".to_string()),
            Some(Err(why)) => Some(why.clone()),
            None => Some("none were asked for".to_string()),
        };
        if let Some(why) = why {
            return Err(format!(
                "the guest kernel's symbols are not available ({why}), so {} cannot be counted",
                counter.name()
            ));
        }
    }
    Ok(counter.of(profile))
}

/// One kernel to measure: its id in the bisect (version or commit) and
/// the kernel.
pub type Item<'k> = (&'k str, &'k Kernel);

/// How many more figures a kernel needs after `have`: `--replicates`, else
/// 1 under instructions and 3 under time (known from the first figure).
fn wanted(replicates: Option<u32>, have: Option<&Measurement>) -> u32 {
    let done = have.map_or(0, |m| m.figures.len() as u32);
    let want = match (have, replicates) {
        (_, Some(n)) => n,
        (None, None) => 1,
        (Some(m), None) if m.quantity.metric == Metric::Instructions => 1,
        (Some(_), None) => 3,
    };
    want.saturating_sub(done)
}

/// Measure `n` items in rounds: the first measures each once, a later one
/// the replicates the figures so far call for ([`wanted`]). `round` takes
/// the items of one round (an item once per figure wanted) and gives one
/// figure, or why none, for each. An item with no figure is measured no
/// more. Returns each item's measurement, or why it has none.
fn rounds(
    n: usize,
    replicates: Option<u32>,
    mut round: impl FnMut(&[usize]) -> anyhow::Result<Vec<Result<Measurement, String>>>,
) -> anyhow::Result<Vec<Result<Measurement, String>>> {
    let mut got: Vec<Option<Measurement>> = vec![None; n];
    let mut why: Vec<Option<String>> = vec![None; n];
    loop {
        let todo: Vec<usize> = (0..n)
            .filter(|&i| why[i].is_none())
            .flat_map(|i| std::iter::repeat_n(i, wanted(replicates, got[i].as_ref()) as usize))
            .collect();
        if todo.is_empty() {
            break;
        }
        for (&i, one) in todo.iter().zip(round(&todo)?) {
            match (one, &mut got[i]) {
                (Err(e), _) => why[i] = Some(e),
                (Ok(m), None) => got[i] = Some(m),
                (Ok(m), Some(have)) => {
                    have.figures.extend(m.figures);
                    have.run_ids.extend(m.run_ids);
                }
            }
        }
    }
    Ok(got
        .into_iter()
        .zip(why)
        .map(|(m, why)| match why {
            Some(e) => Err(e),
            None => m.ok_or_else(|| "no figure".to_string()),
        })
        .collect())
}

/// Measure both endpoints and set the threshold between them; an endpoint
/// with no figure is bad input (e.g. a config that does not boot).
pub fn endpoints(
    prober: &mut Prober,
    good: (&str, &Kernel, Option<String>),
    bad: (&str, &Kernel, Option<String>),
    hint: &str,
) -> anyhow::Result<(Classifier, Vec<Step>)> {
    let ends = [(good.0, good.1), (bad.0, bad.1)];
    check_function(prober.setup, ends)?;
    // Independent: one round (through Slurm, one job array).
    prober.prefetch(&ends)?;
    let mut steps = Vec::new();
    for (role, (id, kernel, subject)) in [(Role::Good, good), (Role::Bad, bad)] {
        let (m, resumed) = prober.measure(id, kernel)?;
        check_function(prober.setup, ends)?;
        let m = match m {
            Ok(m) => m,
            Err(why) => crate::error::bail_usage!(
                "the {} endpoint {id} gave no figure, so there is nothing to bisect against{hint}: {why}",
                if role == Role::Good { "good" } else { "bad" }
            ),
        };
        eprintln!(
            "ptelab: {} endpoint {}: {}",
            if role == Role::Good { "good" } else { "bad" },
            short(id),
            figures(&m)
        );
        steps.push(Step {
            role,
            id: id.to_string(),
            subject,
            measurement: Some(m),
            verdict: if role == Role::Good {
                Verdict::Good
            } else {
                Verdict::Bad
            },
            resumed,
        });
    }
    let (g, b) = (
        steps[0].measurement.as_ref().unwrap(),
        steps[1].measurement.as_ref().unwrap(),
    );
    if g.quantity != b.quantity {
        anyhow::bail!(
            "the endpoints were measured in different metrics ({} and {})",
            g.quantity.name(),
            b.quantity.name()
        );
    }
    let c = Classifier::new(
        &g.figures,
        &b.figures,
        g.quantity.clone(),
        prober.setup.noise,
        prober.setup.threshold,
    )?;
    let q = &c.quantity;
    eprintln!(
        "ptelab: threshold {} (good {}, bad {})",
        q.with_unit(c.threshold),
        q.number(c.good),
        q.number(c.bad)
    );
    Ok((c, steps))
}

/// A function counter's name must be a text symbol of at least one
/// endpoint's kernel: one that appears or goes between them is what a
/// bisect may be after. That is known once both kernels' symbols are in the
/// cache: before any boot when profiled guests of both ran here before,
/// else after the endpoints' runs. Until then it passes.
fn check_function(setup: &Setup, ends: [(&str, &Kernel); 2]) -> anyhow::Result<()> {
    let Some(name) = setup.counter.as_ref().and_then(Counter::function) else {
        return Ok(());
    };
    let tables: Vec<Option<Symbols>> = ends
        .iter()
        .map(|(_, k)| crate::fleet::cached_symbols(setup.cache, k))
        .collect();
    if tables
        .iter()
        .any(|t| t.as_ref().is_none_or(|t| t.contains(name)))
    {
        return Ok(());
    }
    let near =
        crate::text::nearest::nearest(tables.iter().flatten().flat_map(Symbols::names), name, 5);
    crate::error::bail_usage!(
        "no kernel function '{name}' in {} or {} (the text symbols of their guests' /proc/kallsyms); \
         the nearest names: {}",
        short(ends[0].0),
        short(ends[1].0),
        near.join(", ")
    )
}

/// A step's figures as progress prints them.
pub fn figures(m: &Measurement) -> String {
    m.figures
        .iter()
        .map(|&f| m.quantity.with_unit(f))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Measure one step and classify it.
pub fn probe_step(
    prober: &mut Prober,
    classifier: &Classifier,
    id: &str,
    subject: Option<String>,
    kernel: &Kernel,
) -> anyhow::Result<Step> {
    let (m, resumed) = prober.measure(id, kernel)?;
    let (measurement, verdict) = match m {
        Ok(m) => {
            let v = if m.quantity != classifier.quantity {
                Verdict::Skip(format!(
                    "measured in {}, not {}",
                    m.quantity.name(),
                    classifier.quantity.name()
                ))
            } else {
                classifier.classify(&m.figures)
            };
            (Some(m), v)
        }
        Err(why) => (None, Verdict::Skip(why)),
    };
    eprintln!(
        "ptelab: {}: {} -> {}{}",
        short(id),
        measurement.as_ref().map_or("no figure".into(), figures),
        verdict.word(),
        match &verdict {
            Verdict::Skip(why) => format!(" ({why})"),
            _ => String::new(),
        }
    );
    Ok(Step {
        role: Role::Step,
        id: id.to_string(),
        subject,
        measurement,
        verdict,
        resumed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One item measured in rounds: its measurement and how many guest
    /// runs it took (the run `fail_at` gives no figure).
    fn run(
        metric: Metric,
        replicates: Option<u32>,
        fail_at: Option<usize>,
    ) -> (Result<Measurement, String>, usize) {
        let mut n = 0;
        let mut r = rounds(1, replicates, |todo| {
            Ok(todo
                .iter()
                .map(|_| {
                    n += 1;
                    if Some(n) == fail_at {
                        return Err("no answer".into());
                    }
                    Ok(Measurement {
                        figures: vec![100.0 + n as f64],
                        quantity: Quantity::figure(metric),
                        release: "r".into(),
                        size_bytes: 4096,
                        run_ids: vec![n as i64],
                    })
                })
                .collect())
        })
        .unwrap();
        (r.remove(0), n)
    }

    #[test]
    fn a_phase_picks_its_cell_and_several_cells_need_one() {
        use crate::record::CellResult;
        use crate::workload::FolioSpec;
        let cell = |phase: Option<&str>, f: f64| CellResult {
            phase: phase.map(String::from),
            ..crate::record::fixtures::fixture(4, f, FolioSpec::Base)
        };
        let two = [cell(Some("none-to-rw"), 1.0), cell(Some("rw-to-none"), 2.0)];
        let f = |c: &CellResult| c.ns_per_call.median;
        assert_eq!(pick_cell(&two, Some("rw-to-none")).map(f), Ok(2.0));
        let e = pick_cell(&two, None).unwrap_err();
        assert!(
            e.contains("2 cells, of the phases none-to-rw, rw-to-none") && e.contains("--phase"),
            "{e}"
        );
        let e = pick_cell(&two, Some("up")).unwrap_err();
        assert!(
            e.contains("no phase 'up': its phases are none-to-rw, rw-to-none"),
            "{e}"
        );
        let one = [cell(None, 3.0)];
        assert_eq!(pick_cell(&one, None).map(f), Ok(3.0));
        // Reclaim's label: its method, then the LRU.
        let reclaim = [cell(Some("swpout-whole mglru"), 4.0)];
        assert_eq!(pick_cell(&reclaim, Some("swpout-whole")).map(f), Ok(4.0));
        assert!(pick_cell(&[], None).is_err());
    }

    #[test]
    fn a_phase_is_checked_before_a_boot_where_the_workload_names_its_phases() {
        use crate::workload::WorkloadKind as W;
        let refused = |w: W, p: Option<&str>| {
            let e = check_phase(w, p).unwrap_err();
            assert!(crate::error::is_usage(&e), "{e}");
            e.to_string()
        };
        assert!(check_phase(W::ProtTransition, Some("none-to-rw")).is_ok());
        assert!(check_phase(W::MremapMove, Some("iteration")).is_ok());
        assert!(check_phase(W::MprotectToggle, None).is_ok());
        // Reclaim's phase is named in the guest: checked on its answer.
        assert!(check_phase(W::Reclaim, Some("anything")).is_ok());
        let e = refused(W::ProtTransition, None);
        assert!(
            e.contains("2 phases") && e.contains("none-to-rw, rw-to-none"),
            "{e}"
        );
        let e = refused(W::ProtTransition, Some("none-to-ro"));
        assert!(e.contains("accepted names: none-to-rw, rw-to-none"), "{e}");
        let e = refused(W::MprotectToggle, Some("none-to-rw"));
        assert!(
            e.contains("one unnamed phase") && e.contains("drop --phase"),
            "{e}"
        );
    }

    #[test]
    fn a_phase_names_another_bisect_and_none_keeps_the_old_name() {
        let parts = ["versions", "6.18.15", "6.19.6"];
        let plain = bisect_id(&parts, None, None);
        assert_ne!(plain, bisect_id(&parts, None, Some("none-to-rw")));
        assert_ne!(
            bisect_id(&parts, None, Some("none-to-rw")),
            bisect_id(&parts, None, Some("rw-to-none"))
        );
        // The hash of the parts alone, as before --phase.
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0]);
        }
        assert_eq!(plain, format!("{:x}", h.finalize())[..12]);
    }

    #[test]
    fn time_is_replicated_and_instructions_measured_once() {
        let (m, n) = run(Metric::Instructions, None, None);
        assert_eq!((m.unwrap().figures, n), (vec![101.0], 1));
        let (m, n) = run(Metric::Time, None, None);
        let m = m.unwrap();
        assert_eq!(
            (m.figures, m.run_ids, n),
            (vec![101.0, 102.0, 103.0], vec![1, 2, 3], 3)
        );
        let (m, n) = run(Metric::Instructions, Some(2), None);
        assert_eq!((m.unwrap().figures.len(), n), (2, 2));
        let (m, n) = run(Metric::Time, None, Some(2));
        assert_eq!((m.unwrap_err(), n), ("no answer".to_string(), 3));
    }

    /// The endpoints go in one round, and a later round holds only the
    /// replicates the first figures call for.
    #[test]
    fn items_share_rounds_and_later_rounds_hold_the_replicates() {
        let mut sizes = Vec::new();
        let got = rounds(2, None, |todo| {
            sizes.push(todo.to_vec());
            Ok(todo
                .iter()
                .map(|&i| {
                    let metric = [Metric::Instructions, Metric::Time][i];
                    Ok(Measurement {
                        figures: vec![1.0],
                        quantity: Quantity::figure(metric),
                        release: "r".into(),
                        size_bytes: 4096,
                        run_ids: vec![],
                    })
                })
                .collect())
        })
        .unwrap();
        assert_eq!(sizes, [vec![0, 1], vec![1, 1]]);
        assert_eq!(got[0].as_ref().unwrap().figures.len(), 1);
        assert_eq!(got[1].as_ref().unwrap().figures.len(), 3);
    }

    #[test]
    fn replicates_follow_the_rule() {
        let m = |metric, n| Measurement {
            figures: vec![1.0; n],
            quantity: Quantity::figure(metric),
            release: "r".into(),
            size_bytes: 4096,
            run_ids: vec![],
        };
        assert_eq!(wanted(None, None), 1);
        assert_eq!(wanted(None, Some(&m(Metric::Instructions, 1))), 0);
        assert_eq!(wanted(None, Some(&m(Metric::Time, 1))), 2);
        assert_eq!(wanted(Some(3), None), 3);
        assert_eq!(wanted(Some(3), Some(&m(Metric::Instructions, 1))), 2);
    }
}
