//! Guest runs across kernels: the engine behind `ptelab vm`, `reproduce
//! --kernels` and `bisect`. It resolves (and fetches) kernels, builds the
//! guest binary of each arch, boots jobs `--jobs` at a time, and turns a
//! measuring command's answer into cells stored with their provenance.
//!
//! A measuring answer is untrusted (it crossed the guest's console): it is
//! size-limited and checksummed by `guest::boot::frame`, then parsed here against
//! the record schema before anything is stored.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_guest as guest;
use ptelab_kernel as kernel;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::error::bail_usage;
use crate::guest::boot::binary::guest_binaries;
use crate::guest::boot::initramfs::JobStep;
use crate::guest::boot::profile::Symbols;
pub use crate::guest::boot::qemu::Setup;
use crate::guest::boot::qemu::{choose_accel, narrow_strings, AccelRequest};
use crate::guest::boot::run::{GuestJob, GuestOutput};
use crate::guest::source::cache::Cache;
use crate::guest::source::Kernel;
use crate::kernel::procfs::MEM_SHARE;
use crate::record::{Accel, CellResult, CellSink, Guest, Host};
use crate::store::Store;
use crate::workload::Arch;

pub mod builds;
pub mod executor;
pub mod slurm;
pub mod task;

pub use executor::{Executing, Executor};

/// Set on SIGINT/SIGTERM: what a caller of the fleet checks between steps.
pub fn interrupted() -> &'static AtomicBool {
    crate::kernel::signals::interrupted()
}

/// Memory a guest keeps for its kernel, the initramfs and ptelab itself;
/// the rest is MemAvailable in the guest (docs/guests.md gives the figure).
pub const GUEST_RESERVE: u64 = 192 << 20;

/// Console logs kept: the newest ones, so the cache does not grow without end.
const KEEP_LOGS: usize = 200;

/// The bytes a guest of `memory` bytes leaves a measuring command.
pub fn usable_memory(memory: u64) -> u64 {
    (memory.saturating_sub(GUEST_RESERVE) as f64 * MEM_SHARE) as u64
}

/// The guest memory that fits cells mapping `need` bytes (256 MiB steps).
pub fn memory_for(need: u64) -> u64 {
    ((need as f64 / MEM_SHARE) as u64 + GUEST_RESERVE).next_multiple_of(256 << 20)
}

/// Refuse, before any boot, cells that cannot fit a guest of `memory`.
pub fn check_fits(need: u64, memory: u64) -> anyhow::Result<()> {
    let usable = usable_memory(memory);
    if need > usable {
        bail_usage!(
            "the largest cell maps {} but a guest of --memory {} leaves it about {}: pass --memory {} or more",
            crate::text::format::bytes(need as f64),
            crate::text::format::bytes(memory as f64),
            crate::text::format::bytes(usable as f64),
            crate::workload::size::format_size(memory_for(need))
        );
    }
    Ok(())
}

/// How every guest of a fleet boots.
#[derive(Clone, Debug)]
pub struct Settings {
    pub accel: AccelRequest,
    /// Guest memory in bytes.
    pub memory: u64,
    /// From QEMU's start to its exit, per guest.
    pub timeout: Duration,
    /// Guests booted at once.
    pub jobs: u32,
    /// Static executables put in the guest's `/files`.
    pub files: Vec<PathBuf>,
    /// Kernel parameters added to ptelab's.
    pub append: Vec<String>,
    /// Load ptelab's QEMU plugin and count the mechanism.
    pub profile: ProfileRequest,
    /// Where the guests boot (`--executor`).
    pub executing: Executing,
}

/// Whether guests count the mechanism (docs/guests.md, "Mechanism counters").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileRequest {
    Off,
    /// `--profile`: every guest, or a usage error where one cannot (KVM).
    Required,
    /// Every guest that runs under TCG (`reproduce`): a KVM guest measures
    /// time instead.
    WhereTcg,
}

/// One guest boot: a command on a kernel.
#[derive(Clone, Debug)]
pub struct Job<'a> {
    pub kernel: &'a Kernel,
    /// Short name for the log file and progress (`sweep`).
    pub name: String,
    /// ptelab's arguments in the guest, or the program's.
    pub args: Vec<String>,
    /// `exec NAME`: run `/files/NAME` instead of ptelab.
    pub program: Option<String>,
    /// Bytes of files the command writes at once, when it needs a disk
    /// (the reclaim workload, seed 004): the guest then gets an ext4 disk
    /// on NVMe and MGLRU on (docs/guests.md, "The guest disk").
    pub disk: Option<u64>,
    /// What the boot varies beside the kernel path: the default setup, or
    /// one of `calibrate --guest`'s.
    pub setup: Setup,
}

/// A finished boot: the guest's answer and where its console went.
pub struct Finished {
    pub log: PathBuf,
    pub answer: anyhow::Result<GuestOutput>,
    /// Its run was stored by an earlier run of the same command (a
    /// cluster's batch resumed): not to be stored again.
    pub before: bool,
    /// Where to mark its run stored ([`Finished::mark_stored`]), when the
    /// answer may be handed over again.
    pub mark: Option<PathBuf>,
}

impl Finished {
    /// Say that this answer's run is stored, so that a resumed batch does
    /// not have it stored twice. Best effort: without the mark, a resume
    /// stores it again.
    pub fn mark_stored(mark: &Option<PathBuf>) {
        if let Some(m) = mark {
            let _ = std::fs::write(m, "");
        }
    }
}

/// The guest binary and accelerator of one arch.
struct ArchSetup {
    binary: PathBuf,
    accel: Accel,
    /// Its guests load the QEMU plugin.
    profile: bool,
    /// Why its guests do not, though counting was asked for.
    uncounted: Option<String>,
}

/// Kernels, guest binaries and logs, ready to boot jobs.
pub struct Fleet {
    settings: Settings,
    per_arch: BTreeMap<Arch, ArchSetup>,
    /// The QEMU plugin (`--profile`).
    plugin: Option<PathBuf>,
    /// Guest kernels' symbols, by image sha256 (`--profile`).
    symbols: PathBuf,
    logs: PathBuf,
    /// Where guest disk images are made (unnamed, gone after each run).
    disks: PathBuf,
    interrupted: &'static AtomicBool,
    executor: Box<dyn Executor>,
}

impl Fleet {
    /// Choose the accelerator and build the guest binary of every arch in
    /// `kernels` (printing why that accelerator), so that nothing that can
    /// fail on this machine waits until after a boot.
    pub fn prepare(cache: &Cache, settings: Settings, kernels: &[Kernel]) -> anyhow::Result<Fleet> {
        // Refusals first, then the guest binaries (minutes when built).
        let mut accels = BTreeMap::new();
        for k in kernels {
            if accels.contains_key(&k.arch) {
                continue;
            }
            let (accel, why) = match (settings.accel, settings.executing.remote()) {
                // The nodes' KVM, not this machine's, runs them.
                (AccelRequest::Kvm, true) => (
                    Accel::Kvm,
                    "--accel kvm: KVM on the nodes, time per call".to_string(),
                ),
                (req, _) => choose_accel(req, k.arch)?,
            };
            if settings.profile == ProfileRequest::Required && accel != Accel::Tcg {
                bail_usage!(
                    "--profile counts with a QEMU TCG plugin, and {} guests would run under KVM \
                     here ({why}); pass --accel tcg to count under TCG",
                    k.arch.name()
                );
            }
            eprintln!("ptelab: {} guests: {why}", k.arch.name());
            accels.insert(k.arch, accel);
        }
        let arches: Vec<Arch> = accels.keys().copied().collect();
        let mut binaries = guest_binaries(&arches)?;
        let mut per_arch = BTreeMap::new();
        for (arch, accel) in accels {
            per_arch.insert(
                arch,
                ArchSetup {
                    binary: binaries.remove(&arch).expect("built for every arch"),
                    accel,
                    profile: settings.profile != ProfileRequest::Off && accel == Accel::Tcg,
                    uncounted: None,
                },
            );
        }
        let logs = cache.root.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        prune_logs(&logs, KEEP_LOGS);
        let plugin = match per_arch.values().any(|a| a.profile) {
            true => Some(crate::guest::boot::plugin::library()?),
            false => None,
        };
        // Whether each arch's QEMU loads the plugin, asked before any boot:
        // `--profile` refuses one that cannot; `reproduce` measures its
        // guests plain and says why nothing was counted.
        if let Some(library) = &plugin {
            for (arch, a) in per_arch.iter_mut().filter(|(_, a)| a.profile) {
                if let Err(e) = crate::guest::boot::plugin::loads_in(*arch, library) {
                    if settings.profile == ProfileRequest::Required {
                        return Err(e);
                    }
                    eprintln!(
                        "ptelab: {} guests run without counting the mechanism: {e:#}",
                        arch.name()
                    );
                    a.profile = false;
                    a.uncounted = Some(format!("{e:#}"));
                }
            }
        }
        Ok(Fleet {
            executor: settings.executing.executor(&cache.root, settings.jobs),
            settings,
            per_arch,
            plugin,
            symbols: symbols_dir(cache),
            logs,
            disks: cache.root.join("disks"),
            interrupted: crate::kernel::signals::interrupted(),
        })
    }

    /// The same fleet, its guests booted by `executor` (a test's
    /// [`executor::Fake`]).
    pub fn with_executor(mut self, executor: Box<dyn Executor>) -> Fleet {
        self.executor = executor;
        self
    }

    /// One fleet for the arches of both, prepared with the same settings
    /// and cache: their jobs can then share one queue.
    pub fn join(mut self, other: Fleet) -> Fleet {
        self.per_arch.extend(other.per_arch);
        self.plugin = self.plugin.or(other.plugin);
        self
    }

    /// Why guests of `arch` count nothing though counting was asked for
    /// (their QEMU cannot load the plugin), with the remedy.
    pub fn uncounted(&self, arch: Arch) -> Option<&str> {
        self.per_arch.get(&arch)?.uncounted.as_deref()
    }

    /// The accelerator guests of `arch` run under (`prepare` saw the arch).
    pub fn accel(&self, arch: Arch) -> Option<Accel> {
        self.per_arch.get(&arch).map(|a| a.accel)
    }

    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// Boot every job on its own, `--jobs` at a time; answers come back in
    /// job order. Each boot is announced, and each end with how many are
    /// done. An interruption stops the boots not yet started and is an
    /// error (no guest is left running: `run_boot` kills its own QEMU).
    pub fn run(&self, jobs: &[Job]) -> anyhow::Result<Vec<Finished>> {
        self.run_boots(jobs, (0..jobs.len()).map(|i| vec![i]).collect())
    }

    /// As [`Fleet::run`], but the jobs of one kernel (and boot setup) share
    /// one boot, run one after the other in it: booting a kernel under TCG
    /// costs as much as a short sweep. Jobs with a disk go last in their
    /// boot (the disk is mounted for them), or boot apart where they run on
    /// another CPU model (`qemu::narrow_strings`: x86-64).
    pub fn run_per_kernel(&self, jobs: &[Job]) -> anyhow::Result<Vec<Finished>> {
        self.run_boots(jobs, boots_per_kernel(jobs))
    }

    /// Boot each group of `boots` (indices into `jobs`) once, in the order
    /// given, through the executor; answers come back in job order.
    fn run_boots(&self, jobs: &[Job], boots: Vec<Vec<usize>>) -> anyhow::Result<Vec<Finished>> {
        let planned: Vec<executor::Boot> = boots
            .iter()
            .map(|members| {
                let boot: Vec<&Job> = members.iter().map(|&i| &jobs[i]).collect();
                let kernel = boot[0].kernel;
                let setup = &self.per_arch[&kernel.arch];
                let names = boot
                    .iter()
                    .map(|j| j.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                executor::Boot {
                    job: self.guest_job(&boot, setup, &self.log_path(&boot)),
                    what: format!(
                        "{} ({} guest, {}) for {names}",
                        kernel.spec,
                        kernel.arch.name(),
                        setup.accel.name()
                    ),
                    short: format!("{} {names}", kernel.spec),
                }
            })
            .collect();
        let logs: Vec<PathBuf> = planned.iter().map(|b| b.job.log.clone()).collect();
        let answers = self.executor.boot(planned)?;
        if self.interrupted() {
            anyhow::bail!("interrupted: no guest is left running");
        }
        let mut finished: Vec<Option<Finished>> = jobs.iter().map(|_| None).collect();
        for ((members, log), answered) in boots.iter().zip(logs).zip(answers) {
            let kernel = jobs[members[0]].kernel;
            let mark = |k: usize| answered.marks.as_ref().map(|t| task::mark_path(t, k));
            match answered.answer.map(|outs| self.with_symbols(kernel, outs)) {
                Ok(outs) => {
                    anyhow::ensure!(
                        outs.len() == members.len(),
                        "a boot of {} commands answered {}",
                        members.len(),
                        outs.len()
                    );
                    for (k, (&i, out)) in members.iter().zip(outs).enumerate() {
                        let mark = mark(k);
                        finished[i] = Some(Finished {
                            log: log.clone(),
                            answer: Ok(out),
                            before: answered.stored_before.get(k).copied().unwrap_or(false),
                            mark,
                        });
                    }
                }
                Err(e) => {
                    // Every job of the boot fails with its error, a usage
                    // error staying one (exit 2).
                    let (why, usage) = (format!("{e:#}"), crate::error::is_usage(&e));
                    let mut e = Some(e);
                    for &i in members {
                        let err = e.take().unwrap_or_else(|| match usage {
                            true => crate::error::usage(why.clone()),
                            false => anyhow::anyhow!("{why}"),
                        });
                        finished[i] = Some(Finished {
                            log: log.clone(),
                            answer: Err(err),
                            before: false,
                            mark: None,
                        });
                    }
                }
            }
        }
        Ok(finished
            .into_iter()
            .map(|f| f.expect("every job is in a boot"))
            .collect())
    }

    /// Where a kernel's symbols are cached (deflated compact text).
    fn symbols_path(&self, kernel: &Kernel) -> PathBuf {
        symbols_file(&self.symbols, kernel)
    }

    /// A profiled boot's symbol table, given to each of its answers that
    /// counted: the one the guest sent (then cached), or the cached one.
    fn with_symbols(&self, kernel: &Kernel, mut outs: Vec<GuestOutput>) -> Vec<GuestOutput> {
        if outs.iter().all(|o| o.counts.is_none()) {
            return outs;
        }
        let path = self.symbols_path(kernel);
        let sent = outs.iter_mut().find_map(|o| o.symbols.take());
        let table: Result<Symbols, String> = match &sent {
            Some(b) if b.is_empty() => Err("the guest's /proc/kallsyms showed no addresses".into()),
            Some(b) => {
                // A cache that cannot be written costs the next run a transfer.
                let _ =
                    std::fs::create_dir_all(&self.symbols).and_then(|_| std::fs::write(&path, b));
                Ok(b.clone())
            }
            None => std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display())),
        }
        .and_then(|bytes| {
            crate::guest::boot::profile::inflate(&bytes)
                .map(|t| Symbols::parse(&t))
                .map_err(|e| format!("{e:#}"))
        });
        for o in outs.iter_mut().filter(|o| o.counts.is_some()) {
            o.symbol_table = Some(table.clone());
        }
        outs
    }

    /// The guest run of one boot's jobs (all of one kernel and setup).
    fn guest_job(&self, boot: &[&Job], setup: &ArchSetup, log: &Path) -> GuestJob {
        let first = boot[0];
        let plugin = self.plugin.as_ref().filter(|_| setup.profile);
        let steps = boot.iter().map(|job| self.guest_step(job, setup)).collect();
        // The disk fits the largest of the jobs' files.
        let disk = boot.iter().filter_map(|j| j.disk).max();
        GuestJob {
            profile: plugin.map(|library| crate::guest::boot::run::Profiling {
                library: library.clone(),
                symbols: !self.symbols_path(first.kernel).is_file(),
            }),
            arch: first.kernel.arch,
            kernel: first.kernel.image.clone(),
            binary: setup.binary.clone(),
            steps,
            files: self.settings.files.clone(),
            append: self.settings.append.clone(),
            accel: setup.accel,
            memory_mib: self.settings.memory >> 20,
            disk: disk.map(|bytes| {
                crate::guest::boot::disk::DiskSpec::for_data(bytes, self.disks.clone())
            }),
            // Each job's own time: a boot of several gets the sum.
            timeout: self.settings.timeout * boot.len() as u32,
            log: log.to_path_buf(),
            interrupted: self.interrupted,
            setup: first.setup.clone(),
        }
    }

    /// One job's command as its guest runs it.
    fn guest_step(&self, job: &Job, setup: &ArchSetup) -> JobStep {
        let mut args = job.args.clone();
        // Every measuring guest reports its windows, counted or not, so that
        // a profiled guest runs exactly what a plain one does (same argv):
        // its instruction figures are the plain guest's.
        // A crosscheck marks its flush-compared calls the same way, for
        // kernels without the tlb:tlb_flush tracepoint.
        let command = args.first().cloned().unwrap_or_default();
        let marking = matches!(command.as_str(), "bench" | "sweep" | "crosscheck");
        if job.program.is_none() && marking {
            args.insert(1, "--windows".into());
        }
        // Under icount a TCG guest's clock counts instructions: it skips the
        // memory-latency probe, which measures nothing there.
        if job.program.is_none()
            && setup.accel == Accel::Tcg
            && matches!(command.as_str(), "bench" | "sweep")
        {
            args.insert(1, "--icount".into());
        }
        JobStep {
            args,
            program: job.program.clone(),
            // Seed 004, the one workload with a disk, is about MGLRU reclaim.
            mglru: job.disk.is_some(),
            disk: job.disk.is_some(),
        }
    }

    fn log_path(&self, boot: &[&Job]) -> PathBuf {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let names: Vec<&str> = boot.iter().map(|j| j.name.as_str()).collect();
        // Start time first, so that the name order is the age order
        // (`prune_logs`); a sequence number keeps same-second jobs apart.
        self.logs.join(format!(
            "{}-{}-{}-{}.log",
            crate::guest::source::cache::now_rfc3339().replace(':', ""),
            boot[0].kernel.sha256.get(..12).unwrap_or("image"),
            names.join("+"),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ))
    }
}

/// The boots [`Fleet::run_per_kernel`] makes of `jobs`, in the order it
/// starts them: what a cluster runs as one task each, so that its guests
/// are a local run's.
pub fn boots_per_kernel(jobs: &[Job]) -> Vec<Vec<usize>> {
    let mut boots = per_kernel(jobs);
    // Longest first (stable: the caller's order among equals), so that the
    // last guests to finish are short ones.
    boots.sort_by_key(|b| std::cmp::Reverse(b.len()));
    boots
}

/// The boots of `jobs` when each kernel (and boot setup, and CPU model)
/// boots once: groups of indices in job order, jobs with a disk last.
fn per_kernel(jobs: &[Job]) -> Vec<Vec<usize>> {
    let cpu = |j: &Job| narrow_strings(j.kernel.arch, j.disk.is_some());
    let mut boots: Vec<Vec<usize>> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let same = |b: &&mut Vec<usize>| {
            let first = &jobs[b[0]];
            first.kernel.arch == job.kernel.arch
                && first.kernel.sha256 == job.kernel.sha256
                && first.kernel.spec.to_string() == job.kernel.spec.to_string()
                && first.setup == job.setup
                && cpu(first) == cpu(job)
        };
        match boots.iter_mut().find(|b| same(b)) {
            Some(b) => b.push(i),
            None => boots.push(vec![i]),
        }
    }
    for b in &mut boots {
        b.sort_by_key(|&i| jobs[i].disk.is_some());
    }
    boots
}

fn symbols_dir(cache: &Cache) -> PathBuf {
    cache.root.join("symbols")
}

fn symbols_file(dir: &Path, kernel: &Kernel) -> PathBuf {
    dir.join(format!("{}.syms", kernel.sha256))
}

/// A kernel's symbols as a profiled guest of it left them in the cache,
/// or None when none has run (or the cached copy does not read).
pub fn cached_symbols(cache: &Cache, kernel: &Kernel) -> Option<Symbols> {
    let bytes = std::fs::read(symbols_file(&symbols_dir(cache), kernel)).ok()?;
    crate::guest::boot::profile::inflate(&bytes)
        .ok()
        .map(|t| Symbols::parse(&t))
}

/// What a measuring command prints with `--json` (bench: one cell with
/// the host beside it; sweep: `cells`).
#[derive(Deserialize)]
struct MeasuredDoc {
    schema: String,
    host: Host,
    #[serde(default)]
    cells: Option<Vec<CellResult>>,
    #[serde(default)]
    interrupted: bool,
    #[serde(default)]
    failed: Vec<Value>,
}

/// The cells a measuring guest command answered, with the guest's host
/// record and where and how it ran.
#[derive(Debug)]
pub struct Measured {
    pub host: Host,
    pub cells: Vec<CellResult>,
    pub interrupted: bool,
    /// Cells the guest could not measure, each with its reason.
    pub failed: Vec<String>,
}

impl Measured {
    /// Parse and check a measuring answer (`bench`/`sweep --json`) of a
    /// guest of `kernel`, and record the guest's provenance in its host.
    pub fn parse(stdout: &[u8], kernel: &Kernel, out: &GuestOutput) -> anyhow::Result<Measured> {
        let mut m = measured(stdout)?;
        let counts = out.counts.as_ref();
        if counts.is_none() {
            m.cells.iter_mut().for_each(|c| c.windows.clear());
        }
        if let Some(counts) = counts {
            use crate::guest::boot::profile::{profile, Names};
            let names = match &out.symbol_table {
                Some(Ok(table)) if !table.is_empty() => Names::Symbols {
                    table,
                    source: format!("the guest's /proc/kallsyms ({} text symbols)", table.len()),
                },
                Some(Ok(_)) => {
                    Names::Addresses("the guest's /proc/kallsyms has no text symbols".into())
                }
                Some(Err(why)) => Names::Addresses(why.clone()),
                None => Names::Addresses("no symbols were asked for".into()),
            };
            for c in &mut m.cells {
                let windows = std::mem::take(&mut c.windows);
                if !windows.is_empty() {
                    c.profile = Some(
                        profile(&windows, counts, &names, c.workload.marked_parts()).with_context(
                            || {
                                format!(
                                    "counting the mechanism of {} {}",
                                    c.workload.name(),
                                    c.folio
                                )
                            },
                        )?,
                    );
                }
            }
        }
        m.host.guest = Some(Guest {
            not_measured: m.failed.clone(),
            ..Guest::new(out.accel, &out.qemu_version, &kernel.source, &kernel.sha256)
        });
        Ok(m)
    }

    /// Store as one run of `command`, tagged with `tags` and the kernel's name.
    pub fn store(
        &self,
        store: &Store,
        command: &str,
        kernel: &Kernel,
        tags: &[String],
    ) -> anyhow::Result<i64> {
        let mut tags = tags.to_vec();
        tags.extend(kernel.tag());
        self.store_tagged(store, command, &tags)
    }

    /// Store as one run of `command` tagged with `tags` only (a run that
    /// must not stand for its kernel: `calibrate --guest`'s padded boots).
    pub fn store_tagged(
        &self,
        store: &Store,
        command: &str,
        tags: &[String],
    ) -> anyhow::Result<i64> {
        let id = store.begin(command, &crate::kernel::host::invocation(), &self.host)?;
        for c in &self.cells {
            store.cell(id, c)?;
        }
        store.finish(
            id,
            self.interrupted,
            self.cells.is_empty() && !self.failed.is_empty(),
        )?;
        store.add_tags(id, tags)?;
        Ok(id)
    }
}

fn measured(stdout: &[u8]) -> anyhow::Result<Measured> {
    let value: Value = serde_json::from_slice(stdout).context("the answer is not JSON")?;
    let doc: MeasuredDoc = serde_json::from_value(value.clone())
        .context("the answer is not a ptelab result document")?;
    let cells = match (doc.schema.as_str(), doc.cells) {
        ("ptelab/bench/v1", None) => vec![serde_json::from_value::<CellResult>(value)
            .context("the answer's cell does not fit the record schema")?],
        ("ptelab/sweep/v1" | "ptelab/bench/v1", Some(cells)) => cells,
        (other, _) => anyhow::bail!("the answer has schema '{other}', not a bench or sweep result"),
    };
    let failed = doc
        .failed
        .iter()
        .map(|f| match f {
            Value::String(s) => s.clone(),
            Value::Object(o) => {
                let cell = o.get("cell").and_then(Value::as_str).unwrap_or("a cell");
                let why = o
                    .get("error")
                    .or_else(|| o.get("why"))
                    .and_then(Value::as_str)
                    .unwrap_or("failed");
                format!("{cell}: {why}")
            }
            other => other.to_string(),
        })
        .collect();
    Ok(Measured {
        host: doc.host,
        cells,
        interrupted: doc.interrupted,
        failed,
    })
}

/// Remove all but the `keep` newest `*.log` files of `dir` (names start with
/// their UTC start time, so the name order is the age order).
fn prune_logs(dir: &Path, keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let old = logs.len().saturating_sub(keep);
    for p in &logs[..old] {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod tests {
    use super::*;
    use crate::guest::source::fake::Fake;
    use serde_json::json;

    /// A guest answer for the tests of the fleet's callers: a kernel from the
    /// fake source under `dir` (no apt, no network), and one measured cell of
    /// its guest with `failed` beside it.
    pub fn fake_answer(dir: &Path, failed: Value) -> (Kernel, Measured) {
        let cache = Cache {
            root: dir.to_owned(),
        };
        let k = Fake::spec("6.16.12")
            .resolve(&cache, &Fake::options())
            .unwrap();
        let cell = crate::record::fixtures::fixture(400, 1000.0, crate::workload::FolioSpec::Base);
        let host = crate::kernel::host::capture().unwrap();
        let doc = json!({"schema": "ptelab/sweep/v1", "host": host, "cells": [cell],
            "failed": failed});
        let out = crate::guest::boot::run::GuestOutput {
            stdout: Vec::new(),
            exit_code: 0,
            accel: Accel::Tcg,
            qemu_version: "QEMU emulator version 9.2.0".into(),
            kernel_release: "6.16.12-fake".into(),
            boot_to_exit: Duration::from_secs(1),
            counts: None,
            symbols: None,
            symbol_table: None,
        };
        let m = Measured::parse(doc.to_string().as_bytes(), &k, &out).unwrap();
        (k, m)
    }

    #[test]
    fn old_logs_are_pruned_newest_kept() {
        let dir = tempfile::tempdir().unwrap();
        for t in [
            "2026-11-23T100000Z-a",
            "2026-11-23T110000Z-b",
            "2026-11-23T120000Z-c",
        ] {
            std::fs::write(dir.path().join(format!("{t}.log")), "x").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        prune_logs(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "2026-11-23T110000Z-b.log",
                "2026-11-23T120000Z-c.log",
                "notes.txt"
            ]
        );
    }

    #[test]
    fn a_guest_answer_is_checked_against_the_record_schema() {
        assert!(measured(b"not json").is_err());
        assert!(measured(br#"{"schema":"ptelab/doctor/v1","host":{}}"#).is_err());
        let cell = crate::record::fixtures::fixture(400, 1000.0, crate::workload::FolioSpec::Base);
        let host = crate::kernel::host::capture().unwrap();
        let doc = json!({"schema": "ptelab/sweep/v1", "host": host, "cells": [cell],
            "failed": [{"cell": "reclaim 64M 64K", "error": "layout mismatch"}]});
        let m = measured(doc.to_string().as_bytes()).unwrap();
        assert_eq!(
            (m.host, m.cells.len(), m.interrupted, m.failed),
            (
                host.clone(),
                1,
                false,
                vec!["reclaim 64M 64K: layout mismatch".to_string()]
            )
        );
        let mut bench = serde_json::to_value(&cell).unwrap();
        let obj = bench.as_object_mut().unwrap();
        obj.insert("schema".into(), json!("ptelab/bench/v1"));
        obj.insert("host".into(), serde_json::to_value(&host).unwrap());
        assert_eq!(
            measured(bench.to_string().as_bytes()).unwrap().cells,
            vec![cell]
        );
    }

    /// A cache in `dir` with two fake kernels, 6.16.12 and 6.17.8.
    #[cfg(test)]
    fn two_fake_kernels(dir: &Path) -> (Cache, Kernel, Kernel) {
        let cache = Cache {
            root: dir.to_owned(),
        };
        let kernel = |v| Fake::spec(v).resolve(&cache, &Fake::options()).unwrap();
        let (a, b) = (kernel("6.16.12"), kernel("6.17.8"));
        (cache, a, b)
    }

    #[test]
    fn a_kernel_boots_once_and_its_x86_disk_jobs_once_more() {
        let d = tempfile::tempdir().unwrap();
        let (_cache, a, b) = two_fake_kernels(d.path());
        let job = |kernel, name: &str, disk: Option<u64>, seed: Option<u64>| Job {
            kernel,
            name: name.into(),
            args: vec!["sweep".into()],
            program: None,
            disk,
            setup: Setup {
                seed,
                ..Setup::default()
            },
        };
        let jobs = [
            job(&a, "toggle", None, None),
            job(&b, "toggle", None, None),
            job(&a, "reclaim", Some(16 << 20), None),
            job(&a, "mremap", None, None),
            job(&b, "ro-rw", None, None),
            job(&a, "padded", None, Some(7)),
            job(&a, "reclaim-4K", Some(8 << 20), None),
        ];
        assert_eq!(
            per_kernel(&jobs),
            [vec![0, 3], vec![1, 4], vec![2, 6], vec![5]],
            "one boot per kernel, setup and CPU model"
        );
        // arm64 has one CPU model: the disk job joins the boot, last.
        let mut arm = a.clone();
        arm.arch = Arch::Arm64;
        let jobs = [
            job(&arm, "reclaim", Some(16 << 20), None),
            job(&arm, "toggle", None, None),
        ];
        assert_eq!(per_kernel(&jobs), [vec![1, 0]]);
    }

    /// A fleet of `cache` for x86-64 guests under TCG, booting through
    /// `executor`: nothing is built or probed.
    #[cfg(test)]
    fn fleet_on(cache: &Cache, executor: Box<dyn Executor>) -> Fleet {
        let settings = Settings {
            accel: AccelRequest::Tcg,
            memory: 1 << 30,
            timeout: Duration::from_secs(60),
            jobs: 1,
            files: vec![],
            append: vec![],
            profile: ProfileRequest::Off,
            executing: Executing::Local,
        };
        let arch = ArchSetup {
            binary: cache.root.join("ptelab-guest"),
            accel: Accel::Tcg,
            profile: false,
            uncounted: None,
        };
        Fleet {
            settings,
            per_arch: [(Arch::X86_64, arch)].into(),
            plugin: None,
            symbols: symbols_dir(cache),
            logs: cache.root.join("logs"),
            disks: cache.root.join("disks"),
            interrupted: crate::kernel::signals::interrupted(),
            executor,
        }
    }

    /// Whatever executor boots them, a kernel's jobs share one boot whose
    /// job carries each command (with what the fleet adds), answers come
    /// back in job order, and a boot that fails fails each of its jobs.
    #[test]
    fn answers_from_an_executor_come_back_in_job_order() {
        let d = tempfile::tempdir().unwrap();
        let (cache, a, b) = two_fake_kernels(d.path());
        let answer = |job: &GuestJob| -> executor::Answer {
            if job.kernel.to_string_lossy().contains("6.17.8") {
                return Err(crate::error::usage("no such kernel on the node"));
            }
            Ok(job
                .steps
                .iter()
                .map(|s| GuestOutput {
                    stdout: s.args.join(" ").into_bytes(),
                    exit_code: 0,
                    accel: job.accel,
                    qemu_version: "10.0.2".into(),
                    kernel_release: "6.16.12".into(),
                    boot_to_exit: Duration::from_secs(1),
                    counts: None,
                    symbols: None,
                    symbol_table: None,
                })
                .collect())
        };
        let fleet = fleet_on(&cache, Box::new(executor::Fake(answer)));
        let job = |kernel, name: &str| Job {
            kernel,
            name: name.into(),
            args: vec!["sweep".into(), name.into()],
            program: None,
            disk: None,
            setup: Setup::default(),
        };
        let jobs = [job(&a, "toggle"), job(&b, "toggle"), job(&a, "mremap")];
        let done = fleet.run_per_kernel(&jobs).unwrap();
        let stdout = |f: &Finished| String::from_utf8(f.answer.as_ref().unwrap().stdout.clone());
        assert_eq!(stdout(&done[0]).unwrap(), "sweep --icount --windows toggle");
        assert_eq!(stdout(&done[2]).unwrap(), "sweep --icount --windows mremap");
        assert_eq!(done[0].log, done[2].log, "one boot, one log");
        let e = done[1].answer.as_ref().unwrap_err();
        assert!(crate::error::is_usage(e) && e.to_string().contains("no such kernel"));
    }

    #[test]
    fn memory_fits_are_refused_with_the_memory_that_would_fit() {
        let g = 1u64 << 30;
        assert!(check_fits(400 << 20, g).is_ok());
        let e = check_fits(g, g).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("--memory"), "{e}");
        assert!(usable_memory(memory_for(g)) >= g);
    }

    #[test]
    fn the_fleet_records_and_tags_a_kernel_by_its_source() {
        let d = tempfile::tempdir().unwrap();
        let (k, m) = fake_answer(d.path(), json!([]));
        let guest = m.host.guest.clone().unwrap();
        assert_eq!(guest.kernel_source, "fake:6.16.12 fake-image-6.16.12");
        assert_eq!(guest.kernel_sha256, k.sha256);
        assert!(guest.not_measured.is_empty());
        let store = crate::store::Store::open(d.path().join("ptelab.db")).unwrap();
        let id = m.store(&store, "sweep", &k, &[]).unwrap();
        assert_eq!(store.resolve("fake:6.16.12").unwrap(), id);
    }
}
