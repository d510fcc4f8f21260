//! `ptelab patch`: a patch's figures for its cover letter, base against
//! head, on both arches (docs/trees.md, "A patch's tables").

use std::path::PathBuf;

use clap::Args;

use super::flags::StoreOpts;
use super::vm::{kernel_specs, GuestOpts};
use crate::error::bail_usage;
use crate::guest::KernelSpec;
use crate::workload::Arch;

#[derive(Debug, Args)]
pub struct PatchArgs {
    /// The base kernel: tree:~/linux@v7.3 (your tree at a revision), or
    /// any kernel spec (debian:6.18.15).
    #[arg(long, value_name = "SPEC")]
    pub base: String,
    /// The head kernel: tree:~/linux@HEAD, or any kernel spec.
    #[arg(
        long,
        value_name = "SPEC",
        required_unless_present = "series",
        conflicts_with = "series"
    )]
    pub head: Option<String>,
    /// A patch series (an mbox, as `b4 am` writes it): the head is the base
    /// with it applied (`git am`).
    #[arg(long, value_name = "FILE.mbox")]
    pub series: Option<PathBuf>,
    /// Arches (comma-separated): x86_64, arm64 [default: both].
    #[arg(long, value_delimiter = ',', value_name = "ARCH")]
    pub arch: Vec<String>,
    /// Seeds to measure: `auto` (those whose code the patch touches; all
    /// when the kernels' sources cannot say), `all`, or ids (000,003).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auto",
        value_name = "auto|all|ID"
    )]
    pub seeds: Vec<String>,
    /// Small sizes and short budgets, as `reproduce --quick`.
    #[arg(long)]
    pub quick: bool,
    /// Also write the tables as Markdown to FILE (for a cover letter's web
    /// view; the text printed is the plain-text mail's), with a plot per
    /// seed and arch in FILE's stem + `-plots/` (SVG), linked from it.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Functions shown per cell in the mechanism's changes.
    #[arg(long, default_value_t = 4)]
    pub top: usize,
    #[command(flatten)]
    pub guest: GuestOpts,
    #[command(flatten)]
    pub out: StoreOpts,
    #[command(flatten)]
    pub cluster: crate::cluster::ClusterOpts,
}

impl PatchArgs {
    /// The base and head specs, typed (the head: `--head`, or the base with
    /// `--series`).
    pub fn specs(&self) -> anyhow::Result<(KernelSpec, KernelSpec)> {
        let base = KernelSpec::parse(&self.base)?;
        let head = match (&self.head, &self.series) {
            (Some(h), _) => kernel_specs(std::slice::from_ref(h))?.remove(0),
            (None, Some(series)) => {
                if !series.is_file() {
                    bail_usage!(
                        "--series {} is not a file: pass an mbox of the patches (as `b4 am` writes it)",
                        series.display()
                    );
                }
                match base.with_series(series) {
                    Some(h) => h,
                    None => bail_usage!(
                        "--series applies to a tree kernel (tree:PATH@REV without a series of its own), \
                         not --base {}; or give --head",
                        self.base
                    ),
                }
            }
            (None, None) => bail_usage!("give --head SPEC or --series FILE.mbox"),
        };
        if base == head {
            bail_usage!("--base and --head are the same kernel ({base}): nothing to compare");
        }
        Ok((base, head))
    }

    /// `--arch`, typed: default both, duplicates dropped.
    pub fn arches(&self) -> anyhow::Result<Vec<Arch>> {
        super::flags::arch_list(&self.arch)
    }
}
