//! The command-line definition, in one place (clap derive). Every value is
//! typed at the flag (`cli::values`); validation against the machine
//! (memory, root, offered folio sizes) happens in each command's plan step.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use ptelab_model::Granule;

use super::values::NormalizeFlag;
use super::values::{self, TextFormat};
use crate::error::bail_usage;
use crate::guest::source::{self, KernelChoice, KernelSpec};
use crate::store::Location;
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};

/// ptelab: a lab for Linux large-folio page-table batching.
///
/// Measures mprotect/mremap/reclaim on the running kernel with a requested and
/// verified folio layout, and models the kernel's PTE batching for x86-64 and
/// arm64 (contpte).
#[derive(Debug, Parser)]
#[command(name = "ptelab", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// What this machine and kernel offer (THP/mTHP knobs, pagemap, tracepoint, KVM, ...).
    Doctor(DoctorArgs),
    /// One measurement cell on the running kernel.
    Bench(BenchArgs),
    /// A grid of cells (sizes x folio layouts) on the running kernel.
    Sweep(SweepArgs),
    /// The same workload on the executable model: primitive counts per strategy.
    Model(ModelArgs),
    /// Compare every kernel-observable effect of a workload with the model's prediction.
    Crosscheck(CrosscheckArgs),
    /// List runs in the results database.
    Runs(RunsArgs),
    /// Print one run from the results database.
    Show(ShowArgs),
    /// Compare two runs cell by cell with a verdict per cell.
    Compare(CompareArgs),
    /// Measure this machine's between-run repeatability (A/A runs); compare
    /// takes it as its noise threshold.
    Calibrate(CalibrateArgs),
    /// Write an HTML or Markdown report of a run.
    Report(ReportArgs),
    /// Every seed experiment: published figure, measured here, modelled, verdicts.
    Reproduce(ReproduceArgs),
    /// Guest kernels: fetch Debian's into the cache, list cached or offered ones.
    Kernel(super::kernels::KernelArgs),
    /// Run bench, sweep, crosscheck, doctor or model in QEMU guests of other
    /// kernels (x86_64 or arm64): `ptelab vm --kernel debian:6.17.13 -- bench
    /// mprotect-toggle --size 4M`. Under TCG the figures are guest
    /// instructions, not time (docs/guests.md).
    Vm(super::vm::VmArgs),
    /// Find the kernel behind a change of a bench figure: over the Debian
    /// versions between two (`--good debian:6.16.12 --bad debian:6.17.13`),
    /// or over a kernel git tree's commits (`--repo DIR --good v6.16 --bad
    /// v6.17-rc1`), each booted in a guest (docs/bisect.md).
    Bisect(super::bisect::BisectArgs),
    /// A patch's figures for its cover letter: the seeds whose code it
    /// touches, measured on the base and the head (`--base
    /// tree:~/linux@v7.3 --head tree:~/linux@HEAD`, or `--series
    /// FILE.mbox`), both arches, with the mechanism's changes
    /// (docs/trees.md).
    Patch(super::patch::PatchArgs),
    /// Run a task file a cluster's executor wrote: what a Slurm task runs
    /// (set by the submitting ptelab, not typed; docs/cluster.md).
    #[command(hide = true)]
    Task(super::cluster::TaskArgs),
}

impl Command {
    /// Bytes of files this command writes at once when, run in a guest, it
    /// needs a disk of its own (docs/guests.md): the reclaim workload's
    /// page-cache file (largest size x regions) or its `--swapfile`. `None`
    /// for every other command.
    pub fn guest_disk_bytes(&self) -> Option<u64> {
        let (workload, largest, m) = match self {
            Command::Bench(b) => (
                b.workload,
                b.size.unwrap_or_else(|| b.workload.default_size()),
                &b.measure,
            ),
            Command::Sweep(s) => (
                s.workload,
                s.sizes.iter().copied().max().unwrap_or(0),
                &s.measure,
            ),
            _ => return None,
        };
        (workload == WorkloadKind::Reclaim).then(|| {
            largest
                .saturating_mul(m.regions as u64)
                .max(m.swapfile.unwrap_or(0))
        })
    }
}

/// Output and database options of the commands that read runs.
#[derive(Debug, Args, Clone)]
pub struct OutputOpts {
    /// Print one JSON document on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Results database: an SQLite file, or a PostgreSQL server as
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB (docs/cluster.md).
    #[arg(
        long,
        env = "PTELAB_DB",
        default_value = "ptelab.db",
        value_name = "PATH|URL"
    )]
    pub db: Location,
}

/// Output and store options of every command that stores a run: one group,
/// so `--db`, `--tag` and `--no-store` mean the same everywhere.
#[derive(Debug, Args, Clone)]
pub struct StoreOpts {
    /// Print one JSON document on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Results database: an SQLite file, or a PostgreSQL server as
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB (docs/cluster.md).
    #[arg(
        long,
        env = "PTELAB_DB",
        default_value = "ptelab.db",
        value_name = "PATH|URL"
    )]
    pub db: Location,
    /// Tag the stored run (repeatable): `compare` and `report` accept the
    /// tag as a run name, and `compare --replicates` takes every run
    /// carrying it.
    #[arg(long = "tag", value_name = "TAG", value_parser = values::tag)]
    pub tags: Vec<String>,
    /// Do not store results in the database.
    #[arg(long, conflicts_with = "tags")]
    pub no_store: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// How a cell is measured on the running kernel.
#[derive(Debug, Args, Clone)]
pub struct MeasureOpts {
    /// Number of regions, each its own VMA, each operated on per iteration.
    #[arg(long, default_value_t = 1)]
    pub regions: u32,
    /// CPU to pin the measuring thread to (default: the last online CPU).
    #[arg(long, value_name = "CPU")]
    pub pin: Option<usize>,
    /// Do not pin the measuring thread.
    #[arg(long, conflicts_with = "pin")]
    pub no_pin: bool,
    /// Fixed number of timed iterations (disables the adaptive stop rule).
    #[arg(long, value_name = "N", conflicts_with = "time")]
    pub iters: Option<u64>,
    /// Time budget for the samples of one cell (adaptive: stops early once the
    /// 95% CI half-width of the median is under 1%).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = values::duration)]
    pub time: Duration,
    /// Blocks each cell's time budget is split into. Each block measures a
    /// fresh instance of the cell, and a sweep interleaves the blocks of its
    /// cells, so that host noise bursts and placement luck hit one block, not
    /// the whole cell. Ignored with --iters (one block).
    #[arg(long, default_value_t = crate::measure::runner::DEFAULT_BLOCKS,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub blocks: u32,
    /// Keep a cell whose observed folio layout differs from the request.
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Measure without layout control or verification (needed when not root).
    #[arg(long)]
    pub allow_unverified: bool,
    /// Place an anonymous mapping right below the region so they merge into one
    /// VMA (reproduces the seed 001 reproducer's merging case).
    #[arg(long)]
    pub neighbor: bool,
    /// Skip the TLB-flush counting pass.
    #[arg(long)]
    pub no_flush_count: bool,
    /// Report each sample's window for ptelab's QEMU plugin: what a guest
    /// of `ptelab vm --profile` is run with (set by the host, not typed).
    #[arg(long, hide = true)]
    pub windows: bool,
    /// The clock counts guest instructions (a QEMU TCG guest under icount;
    /// set by the host, not typed): the memory-latency probe, one
    /// instruction per load there, is not taken, and samples last a
    /// quarter of a timer tick (`runner::ICOUNT_SAMPLE_TARGET`).
    #[arg(long, hide = true)]
    pub icount: bool,
    /// reclaim: swap the anonymous region out to a temporary swapfile of SIZE
    /// (e.g. 256M; made in $PTELAB_RECLAIM_DIR, default /var/tmp, for each
    /// block, then swapped off and removed; a killed run's swapfile is
    /// removed by the next ptelab). Without it reclaim drops page-cache
    /// folios; PTELAB_RECLAIM_MEMORY=anon|file states the kind explicitly.
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub swapfile: Option<u64>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workload to run.
    #[arg(value_enum)]
    pub workload: WorkloadKind,
    /// Region size (binary suffixes: 4K, 400K, 40M, 1G). Default: the seed's.
    /// It must hold at least one folio of --folio.
    #[arg(long, value_parser = values::size)]
    pub size: Option<u64>,
    /// Folio layout: 4K, 16K..1M (mTHP), 2M (PMD THP), 2M-pte (PMD THP mapped by PTEs).
    #[arg(long, default_value = "4K", value_parser = values::folio)]
    pub folio: FolioSpec,
    #[command(flatten)]
    pub measure: MeasureOpts,
    #[command(flatten)]
    pub out: StoreOpts,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Workload to run.
    #[arg(value_enum)]
    pub workload: WorkloadKind,
    /// Comma-separated region sizes. A size that cannot hold one folio of
    /// a layout is skipped for that layout, with a note.
    #[arg(long, value_name = "SIZES", value_delimiter = ',',
          default_value = "4K,40K,400K,4M,40M", value_parser = values::size)]
    pub sizes: Vec<u64>,
    /// Comma-separated folio layouts.
    #[arg(long, value_name = "FOLIOS", value_delimiter = ',', default_value = "4K",
          value_parser = values::folio)]
    pub folios: Vec<FolioSpec>,
    #[command(flatten)]
    pub measure: MeasureOpts,
    #[command(flatten)]
    pub out: StoreOpts,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Workload to model.
    #[arg(value_enum, required_unless_present_any = ["list_strategies", "predict"])]
    pub workload: Option<WorkloadKind>,
    /// Architecture.
    #[arg(long, value_enum, ignore_case = true, default_value_t = Arch::X86_64)]
    pub arch: Arch,
    /// Base page size (arm64: 4K, 16K or 64K; x86_64: 4K).
    #[arg(long, default_value = "4K", value_parser = values::granule)]
    pub granule: Granule,
    /// Kernel strategy name, or `all`.
    #[arg(long, default_value = "all")]
    pub strategy: String,
    /// Region size.
    #[arg(long, value_parser = values::size)]
    pub size: Option<u64>,
    /// Folio layout (default 4K; with --predict, every stored one).
    #[arg(long, value_parser = values::folio)]
    pub folio: Option<FolioSpec>,
    /// Start the region this many base pages into its first folio.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// arm64: model without CONFIG_ARM64_CONTPTE.
    #[arg(long)]
    pub no_contpte: bool,
    /// arm64: model a CPU with BBML2-noabort (contpte_convert elides its TLBI).
    #[arg(long)]
    pub bbml2: bool,
    /// List the strategies with the kernel versions they stand for.
    #[arg(long)]
    pub list_strategies: bool,
    /// Predict guest instructions per call from the model's counters, with
    /// costs fitted on stored TCG guest runs (docs/model.md, "The cost
    /// model"); the positional workload, --sizes and --folio select the
    /// predicted cells.
    #[arg(long)]
    pub predict: bool,
    /// With --predict: the kernels whose stored guest runs the costs are
    /// fitted on, as `ptelab vm --kernel` named them (default: every kernel
    /// with stored guest runs of the fit workloads on --arch).
    #[arg(
        long,
        value_name = "KERNELS",
        value_delimiter = ',',
        requires = "predict"
    )]
    pub fit: Vec<String>,
    /// With --predict: the workloads fitted on.
    #[arg(
        long,
        value_name = "WORKLOADS",
        value_enum,
        value_delimiter = ',',
        default_value = "mprotect-toggle",
        requires = "predict"
    )]
    pub fit_workloads: Vec<WorkloadKind>,
    /// With --predict: the kernels predicted (default: every kernel with
    /// stored guest runs on --arch).
    #[arg(
        long,
        value_name = "KERNELS",
        value_delimiter = ',',
        requires = "predict"
    )]
    pub kernel: Vec<String>,
    /// With --predict: the region sizes predicted (default: all stored).
    #[arg(long, value_name = "SIZES", value_delimiter = ',', value_parser = values::size,
          requires = "predict", conflicts_with = "size")]
    pub sizes: Vec<u64>,
    /// With --predict: print Markdown.
    #[arg(long, requires = "predict", conflicts_with = "json")]
    pub markdown: bool,
    #[command(flatten)]
    pub out: StoreOpts,
}

#[derive(Debug, Args)]
pub struct CrosscheckArgs {
    /// Workloads to check (default: all that can be observed here).
    #[arg(value_enum)]
    pub workloads: Vec<WorkloadKind>,
    /// Comma-separated region sizes.
    #[arg(long, value_name = "SIZES", value_delimiter = ',', default_value = "4K,64K,2M,64M",
          value_parser = values::size)]
    pub sizes: Vec<u64>,
    /// Comma-separated folio layouts.
    #[arg(long, value_name = "FOLIOS", value_delimiter = ',', default_value = "4K,64K,2M-pte",
          value_parser = values::folio)]
    pub folios: Vec<FolioSpec>,
    /// CPU to pin to (the process re-executes itself there first, so its mm
    /// has only ever run on that CPU and flushes are local).
    #[arg(long, default_value_t = 0)]
    pub pin: usize,
    /// Skip the batching scenarios (mixed AnonExclusive folio, mid-folio range).
    #[arg(long)]
    pub no_scenarios: bool,
    /// Mark each flush-compared call for ptelab's QEMU plugin where the
    /// kernel has no tlb:tlb_flush tracepoint: what a guest of `ptelab vm`
    /// is run with (set by the host, not typed).
    #[arg(long, hide = true)]
    pub windows: bool,
    /// Hold the model to stored, profiled TCG guest runs instead of this
    /// kernel: per cell, every out-of-line kernel function the model counts
    /// against the entries ptelab's QEMU plugin counted, and the TLB
    /// invalidations (docs/model.md). Gather them with `ptelab vm --profile
    /// … -- sweep …`; --sizes and --folios do not apply.
    #[arg(long)]
    pub stored: bool,
    /// With --stored: the guests' arch (default: every arch stored).
    #[arg(long, value_enum, ignore_case = true, requires = "stored")]
    pub arch: Option<Arch>,
    /// With --stored: the kernels, as `ptelab vm --kernel` named them
    /// (default: every kernel stored).
    #[arg(
        long,
        value_name = "KERNELS",
        value_delimiter = ',',
        requires = "stored"
    )]
    pub kernel: Vec<String>,
    #[command(flatten)]
    pub out: StoreOpts,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Store run documents (`ptelab show RUN --json` output, schema
    /// ptelab/run/v1) as new runs, e.g. results brought back from a VM guest.
    #[arg(long, value_name = "FILE", hide = true)]
    pub import: Vec<PathBuf>,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Run id, `latest`, `latest~N`, or a tag (the newest run carrying it).
    pub run: String,
    /// Print CSV (one row per cell).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Baseline run: id, `latest`, `latest~N`, a tag (the newest run
    /// carrying it), or a kernel spec (the newest guest run of that kernel,
    /// however it was spelt: docs/guests.md); several separated by commas
    /// make a replicated comparison, where each run counts once
    /// (docs/statistics.md).
    pub a: String,
    /// Candidate run(s), as A.
    pub b: String,
    /// A tag names every run carrying it, not just the newest: each side is
    /// then a set of runs and the run is the unit (Student's t on ln run
    /// medians), so between-run noise is measured, not assumed.
    #[arg(long)]
    pub replicates: bool,
    /// Noise threshold: a cell is a regression or improvement only when its
    /// whole confidence interval is beyond this relative change (0.02 = 2%).
    /// Default: 2%, or this machine's between-run repeatability when
    /// `ptelab calibrate` measured a larger one.
    #[arg(long, value_name = "FRACTION")]
    pub noise: Option<f64>,
    /// Family-wise significance level (Holm-corrected across cells).
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Bootstrap seed (decimal or 0x-hex); printed with the result.
    #[arg(long, value_parser = values::seed)]
    pub seed: Option<u64>,
    /// Bootstrap resamples per cell.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    /// Output format (or --json).
    #[arg(long, value_enum, ignore_case = true, default_value_t = TextFormat::Text)]
    pub format: TextFormat,
    /// Pair cells that differ only in their folio layout (e.g. a `--folio 4K`
    /// run against a `--folio 64K` run); each side must still match its own
    /// requested layout.
    #[arg(long)]
    pub across_folios: bool,
    /// Compare the mechanism instead: per kernel function, entries and
    /// instructions per call on each side and the change, largest first,
    /// and TLB invalidations per call (runs of `ptelab vm --profile`).
    #[arg(long, conflicts_with_all = ["replicates", "across_folios", "fail_on_regression"])]
    pub functions: bool,
    /// Functions listed per cell with --functions.
    #[arg(long, default_value_t = 15, requires = "functions")]
    pub top: usize,
    /// With --functions: only this kernel function (its symbol).
    #[arg(long, value_name = "NAME", requires = "functions")]
    pub function: Option<String>,
    /// Correct each cell for machine drift between the runs with the
    /// kernel-speed probe every block records (ns per getppid): `auto` when
    /// both runs ran the same kernel release on the same machine, `probe`
    /// always, `none` never. See docs/statistics.md, "Machine drift".
    #[arg(long, value_enum, default_value_t = NormalizeFlag::Auto)]
    pub normalize: NormalizeFlag,
    /// Exit 1 when any cell regressed.
    #[arg(long)]
    pub fail_on_regression: bool,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// `ptelab calibrate`: back-to-back runs of one grid, compared pairwise.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Runs of the grid; every pair is an A/A comparison.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(3..=50))]
    pub runs: u32,
    /// Wall time the runs are spread over (evenly spaced starts, idle in
    /// between), so that the calibration sees more than one minute of the
    /// host's noise; `0` runs them back to back.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = values::span)]
    pub span: Duration,
    /// Region sizes of the mprotect-toggle grid.
    #[arg(long, value_name = "SIZES", value_delimiter = ',', default_value = "400K,4M,40M",
          value_parser = values::size)]
    pub sizes: Vec<u64>,
    /// Folio layouts of the grid.
    #[arg(long, value_name = "FOLIOS", value_delimiter = ',', default_value = "4K,64K",
          value_parser = values::folio)]
    pub folios: Vec<FolioSpec>,
    /// Time budget per cell and run.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = values::duration)]
    pub time: Duration,
    /// Blocks per cell (see `ptelab bench --help`).
    #[arg(long, default_value_t = crate::measure::runner::DEFAULT_BLOCKS,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub blocks: u32,
    /// CPU to pin to (default: the last online CPU).
    #[arg(long, value_name = "CPU")]
    pub pin: Option<usize>,
    /// Measure the bias of a guest figure instead: one cell booted --boots
    /// times per kernel, each boot with its own QEMU -seed and padding of
    /// the kernel command line and the process environment; compare and
    /// reproduce take it as the guest noise threshold (docs/guests.md).
    #[arg(long, requires = "kernels",
          conflicts_with_all = ["runs", "span", "sizes", "folios", "time", "blocks", "pin"])]
    pub guest: bool,
    /// Guest kernel (with --guest; repeatable or comma-separated):
    /// debian:6.17.8, debian:6.18.15-arm64, an image of your own build.
    #[arg(
        long = "kernel",
        alias = "kernels",
        value_name = "SPEC",
        value_delimiter = ',',
        requires = "guest"
    )]
    pub kernels: Vec<String>,
    /// Guest arch (with --guest): x86_64 or arm64 (default: the spec's,
    /// else this host's).
    #[arg(long, requires = "guest")]
    pub arch: Option<String>,
    /// Boots per kernel (with --guest).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=20))]
    pub boots: u32,
    /// How guests boot (with --guest; --jobs defaults to one).
    #[command(flatten)]
    pub vm: super::vm::GuestOpts,
    /// Where the guests boot (with --guest; a Slurm task's time limit goes
    /// as --sbatch=--time=LIMIT, since --time is the host runs').
    #[command(flatten)]
    pub exec: crate::cluster::ExecutorOpts,
    /// Guest memory (with --guest).
    #[arg(long, value_parser = values::size, default_value = "1G", value_name = "SIZE")]
    pub memory: u64,
    #[command(flatten)]
    pub out: StoreOpts,
    /// The guest command (with --guest, after `--`; default: bench
    /// mprotect-toggle --size 400K --folio 4K): bench or sweep with its
    /// own flags. Every cell it measures gets its bias.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run id, `latest`, `latest~N` or tag.
    pub run: String,
    /// Baseline run to plot ratios against (ratio = RUN / baseline).
    #[arg(long)]
    pub vs: Option<String>,
    /// Another run whose model cells are shown beside the measured times.
    #[arg(long, value_name = "RUN")]
    pub model: Option<String>,
    /// Output file: *.html (one self-contained file) or *.md (Markdown).
    /// With --json the report's view model is also printed on stdout.
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Seeds to reproduce (000..004; default all).
    pub seeds: Vec<String>,
    /// Small sizes and short budgets: finishes in minutes.
    #[arg(long)]
    pub quick: bool,
    /// Also measure each seed in QEMU guests of other kernels: `auto` (the
    /// Debian kernels just before and just after each seed's change),
    /// Debian kernel specs for every seed (debian:6.16.12,debian:6.17.13),
    /// or two kernels, one of them your own, base then head, compared as
    /// `ptelab patch` compares them (tree:~/linux@v7.3,tree:~/linux@HEAD).
    #[arg(long, value_delimiter = ',', value_name = "auto|SPEC")]
    pub kernels: Vec<String>,
    /// Guest arches (comma-separated): x86_64, arm64 [default: both].
    #[arg(long, value_delimiter = ',', value_name = "ARCH")]
    pub arch: Vec<String>,
    #[command(flatten)]
    pub guest: crate::vm::GuestOpts,
    /// HTML report path (.html) or Markdown (.md).
    #[arg(short, long, default_value = "ptelab-report.html")]
    pub output: PathBuf,
    #[command(flatten)]
    pub out: StoreOpts,
    #[command(flatten)]
    pub cluster: crate::cluster::ClusterOpts,
}

/// The release a spec names, when it is one reproduce's claims can be
/// judged on: a Debian cloud kernel with a patch level and no arch of its own.
fn release(spec: &KernelSpec) -> Option<source::Version> {
    let listing = source::listing();
    let src = spec.versions()?;
    (src.title() == listing.title() && src.is_default(spec) && src.version(spec).patch.is_some())
        .then(|| src.version(spec))
}

/// A comma-separated `--arch` list, typed: default both, duplicates dropped;
/// the first bad arch is a usage error.
pub fn arch_list(raw: &[String]) -> anyhow::Result<Vec<Arch>> {
    let mut arches = Vec::new();
    for a in raw {
        let arch = Arch::parse_flag(a)?;
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    if arches.is_empty() {
        arches = Arch::ALL.to_vec();
    }
    Ok(arches)
}

impl ReproduceArgs {
    /// `--kernels` and `--arch`, typed: None without --kernels; else the
    /// kernels and the arches (duplicates dropped; default both). The first
    /// bad kernel, then the first bad arch, is a usage error.
    pub fn guest_kernels(&self) -> anyhow::Result<Option<(KernelChoice, Vec<Arch>)>> {
        if self.kernels.is_empty() {
            if !self.arch.is_empty() {
                bail_usage!(
                    "--arch chooses the guests' arches: give --kernels auto or --kernels SPEC,… too"
                );
            }
            return Ok(None);
        }
        let choice = if self.kernels == ["auto"] {
            KernelChoice::Auto
        } else {
            let mut versions = Vec::new();
            for k in &self.kernels {
                match release(&KernelSpec::parse(k)?) {
                    Some(v) => versions.push(v),
                    None => bail_usage!(
                        "reproduce --kernels takes auto or Debian cloud kernels with a patch level \
                         and no arch (debian:6.16.12,debian:6.17.13; --arch picks the arches), \
                         or exactly two kernels, one of your own (base and head, as ptelab patch), \
                         not '{k}'"
                    ),
                }
            }
            versions.sort();
            versions.dedup();
            KernelChoice::Given(versions)
        };
        Ok(Some((choice, arch_list(&self.arch)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn verify_cli() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_parses_common_options() {
        let cli = Cli::try_parse_from([
            "ptelab",
            "bench",
            "mprotect-toggle",
            "--size",
            "400K",
            "--folio",
            "64K",
            "--pin",
            "1",
            "--iters",
            "100",
            "--json",
        ])
        .unwrap();
        let Command::Bench(b) = cli.command else {
            panic!()
        };
        assert_eq!(b.size, Some(400 << 10));
        assert_eq!(b.folio, FolioSpec::Mthp(64 << 10));
        assert_eq!(b.measure.time, Duration::from_secs(2));
        assert_eq!(b.measure.iters, Some(100));
        assert!(b.out.json);
    }

    #[test]
    fn lists_are_typed_at_the_flag_defaults_included() {
        let cli = Cli::try_parse_from(["ptelab", "sweep", "mprotect-toggle"]).unwrap();
        let Command::Sweep(s) = cli.command else {
            panic!()
        };
        assert_eq!(s.sizes, [4 << 10, 40 << 10, 400 << 10, 4 << 20, 40 << 20]);
        assert_eq!(s.folios, [FolioSpec::Base]);
        let cli = Cli::try_parse_from([
            "ptelab",
            "calibrate",
            "--sizes",
            "4K,1M",
            "--folios",
            "2m-pte,64k",
            "--span",
            "0",
            "--tag",
            "a",
        ])
        .unwrap();
        let Command::Calibrate(c) = cli.command else {
            panic!()
        };
        assert_eq!(c.sizes, [4096, 1 << 20]);
        assert_eq!(c.folios, [FolioSpec::PmdPte, FolioSpec::Mthp(64 << 10)]);
        assert_eq!(c.span, Duration::ZERO);
        assert_eq!(c.out.tags, ["a"]);
    }

    #[test]
    fn bad_values_are_refused_at_the_flag_saying_what_is_accepted() {
        for (args, needle) in [
            (
                &["bench", "mprotect-toggle", "--size", "12Q"][..],
                "K, M, G",
            ),
            (&["bench", "mprotect-toggle", "--folio", "8K"], "2M-pte"),
            (&["sweep", "reclaim", "--sizes", "4K,x"], "e.g. 4K"),
            (&["bench", "reclaim", "--time", "0s"], "500ms"),
            (&["model", "reclaim", "--arch", "sparc"], "x86_64, arm64"),
            (&["compare", "1", "2", "--format", "html"], "text, markdown"),
            (&["compare", "1", "2", "--seed", "q"], "0x-hex"),
            (&["bench", "reclaim", "--tag", "latest"], "no comma"),
            (
                &["bench", "reclaim", "--tag", "a", "--no-store"],
                "--no-store",
            ),
        ] {
            let err = Cli::try_parse_from(std::iter::once("ptelab").chain(args.iter().copied()))
                .unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
        }
        let cli = Cli::try_parse_from(["ptelab", "model", "reclaim", "--arch", "AArch64"]).unwrap();
        let Command::Model(m) = cli.command else {
            panic!()
        };
        assert_eq!(m.arch, Arch::Arm64);
    }

    #[test]
    fn reproduce_kernels_and_arches_are_typed_before_anything_runs() {
        let guests = |args: &[&str]| {
            let cli = Cli::try_parse_from(["ptelab", "reproduce"].iter().chain(args)).unwrap();
            let Command::Reproduce(r) = cli.command else {
                panic!()
            };
            r.guest_kernels()
        };
        assert!(guests(&[]).unwrap().is_none());
        let (choice, arches) = guests(&["--kernels", "auto"]).unwrap().unwrap();
        assert!(matches!(choice, KernelChoice::Auto));
        assert_eq!(arches, Arch::ALL.to_vec());
        let (choice, arches) = guests(&[
            "--kernels",
            "debian:6.17.13,debian:6.16.12",
            "--kernels",
            "debian:6.17.13",
            "--arch",
            "aarch64,arm64",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(arches, [Arch::Arm64]);
        let KernelChoice::Given(v) = choice else {
            panic!("given")
        };
        let v: Vec<String> = v.iter().map(|v| v.to_string()).collect();
        assert_eq!(v, ["6.16.12", "6.17.13"]);
        for (args, needle) in [
            (&["--kernels", "debian:6.17"][..], "not 'debian:6.17'"),
            (
                &["--kernels", "debian:6.17.13-arm64"],
                "not 'debian:6.17.13-arm64'",
            ),
            (&["--kernels", "/boot/vmlinuz"], "not '/boot/vmlinuz'"),
            (
                &["--kernels", "debian:6.17.13-rt"],
                "not 'debian:6.17.13-rt'",
            ),
            (&["--kernels", "auto,debian:6.17.13"], "not 'auto'"),
            (
                &["--kernels", "auto", "--arch", "sparc"],
                "unknown --arch 'sparc'",
            ),
            (&["--arch", "arm64"], "give --kernels auto"),
            // The first bad kernel wins, and any bad kernel over a bad arch.
            (
                &["--kernels", "debian:6.17,debian:x", "--arch", "sparc"],
                "not 'debian:6.17'",
            ),
        ] {
            let e = guests(args).err().unwrap();
            assert!(crate::error::is_usage(&e), "{args:?}: {e:#}");
            assert!(format!("{e:#}").contains(needle), "{args:?}: {e:#}");
        }
    }

    #[test]
    fn only_reclaim_needs_a_guest_disk_sized_by_its_files() {
        let bytes = |words: &str| {
            let cli =
                Cli::try_parse_from(std::iter::once("ptelab").chain(words.split_whitespace()))
                    .unwrap();
            cli.command.guest_disk_bytes()
        };
        assert_eq!(
            bytes("bench reclaim --size 64M --folio 64K"),
            Some(64 << 20)
        );
        assert_eq!(
            bytes("bench reclaim"),
            Some(64 << 20),
            "the seed's default size"
        );
        assert_eq!(
            bytes("sweep reclaim --sizes 4M,32M --regions 2"),
            Some(64 << 20)
        );
        assert_eq!(
            bytes("sweep reclaim --sizes 4M --swapfile 48M"),
            Some(48 << 20)
        );
        assert_eq!(bytes("bench mprotect-toggle --size 64M"), None);
        assert_eq!(bytes("doctor"), None);
    }

    #[test]
    fn unknown_workload_is_a_usage_error() {
        let err = Cli::try_parse_from(["ptelab", "bench", "mprotect-foo"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("mprotect-toggle"));
    }
}
