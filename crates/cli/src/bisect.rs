//! `ptelab bisect`: find the kernel change behind a figure.

use std::path::PathBuf;

use clap::Args;

use super::flags::StoreOpts;
use super::values;
use super::vm::{guest_arch, GuestOpts};
use crate::record::{Counter, Metric};
use crate::workload::Arch;

#[derive(Debug, Args)]
pub struct BisectArgs {
    /// The good endpoint: a Debian kernel (debian:6.16.12), a commit of
    /// your tree (tree:~/linux@v6.16: a bisect over the tree's commits), or
    /// with --repo a commit, tag or branch (v6.16).
    #[arg(long, value_name = "SPEC|REV")]
    pub good: String,
    /// The bad endpoint, newer than --good: debian:6.17.13,
    /// tree:~/linux@v6.17-rc1, or with --repo a commit, tag or branch
    /// (v6.17-rc1).
    #[arg(long, value_name = "SPEC|REV")]
    pub bad: String,
    /// A Linux kernel git tree: bisect its commits (each built out of tree,
    /// booted and measured) instead of Debian's versions. The tree's branch
    /// and work tree are left as found.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Advanced: build with this shell command instead of make, run in the
    /// tree with OUT set to the image file it must write (and ARCH); for a
    /// bisect over a tree's commits.
    #[arg(long, value_name = "CMD")]
    pub build_cmd: Option<String>,
    /// Guest arch: x86_64 or arm64 (default: the spec's, else this host's).
    #[arg(long)]
    pub arch: Option<String>,
    #[command(flatten)]
    pub guest: GuestOpts,
    /// Guest runs per step (default: 1 under TCG, whose instruction counts
    /// repeat exactly; 3 under KVM, whose times do not).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub replicates: Option<u32>,
    /// What each step is judged by, per call: the bench cell's figure,
    /// `instructions` (TCG guests) or `time` (KVM guests), by default the
    /// one the accelerator gives; or a mechanism counter, which every
    /// step's guest counts with ptelab's QEMU plugin under TCG: `tlbi` (TLB
    /// invalidations), `tlbi:KIND` (page, range, asid, all, other, dsb on
    /// arm64; invlpg, invpcid, cr3-write on x86_64), `calls:FUNCTION`
    /// (entries into a kernel function, e.g. calls:vm_normal_page),
    /// `insns:FUNCTION` (instructions executed in it).
    #[arg(long, value_name = "METRIC", value_parser = metric)]
    pub metric: Option<MetricFlag>,
    /// The phase followed, of a bench that measures several (one cell
    /// each): prot-transition's none-to-rw or rw-to-none, mremap-move's
    /// mremap or iteration; reclaim's is its method (e.g. swpout-whole).
    #[arg(long, value_name = "NAME")]
    pub phase: Option<String>,
    /// The figure (per call, in the metric's unit) between good and bad;
    /// default: the midpoint of the endpoints.
    #[arg(long, value_name = "FIGURE")]
    pub threshold: Option<f64>,
    /// The relative difference the endpoints must exceed to be bisected.
    #[arg(long, default_value_t = 0.02, value_name = "FRACTION", value_parser = fraction)]
    pub noise: f64,
    /// Write a Markdown report (a regression mail's shape) to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Guest memory (binary suffixes: 512M, 2G).
    #[arg(long, value_parser = values::size, default_value = "1G", value_name = "SIZE")]
    pub memory: u64,
    #[command(flatten)]
    pub out: StoreOpts,
    #[command(flatten)]
    pub cluster: super::cluster::ClusterOpts,
    /// The measurement, after `--`: a `bench` of one cell, with its flags
    /// (e.g. `-- bench mprotect-toggle --size 4M --folio 4K`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl BisectArgs {
    /// `--arch`, typed.
    pub fn guest_arch(&self) -> anyhow::Result<Option<Arch>> {
        guest_arch(&self.arch)
    }
}

/// `--metric`: the bench figure in a metric, or a mechanism counter.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricFlag {
    Figure(Metric),
    Counter(Counter),
}

fn metric(text: &str) -> Result<MetricFlag, String> {
    match text {
        "instructions" => Ok(MetricFlag::Figure(Metric::Instructions)),
        "time" => Ok(MetricFlag::Figure(Metric::Time)),
        _ => Counter::parse(text).map(MetricFlag::Counter),
    }
}

/// `--noise`: a fraction between 0 and 1.
fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err("a fraction between 0 and 1, e.g. 0.02 for 2%".into()),
    }
}
