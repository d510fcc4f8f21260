//! `ptelab patch`: a patch's figures for its cover letter, base against
//! head, on both arches (docs/trees.md, "A patch's tables").

use std::path::PathBuf;

use clap::Args;

use super::flags::{ReproduceArgs, StoreOpts};
use super::vm::{kernel_specs, GuestOpts};
use crate::error::bail_usage;
use crate::guest::KernelSpec;
use crate::workload::Arch;

/// Functions shown per cell in the mechanism's changes, by default.
const DEFAULT_TOP: usize = 4;

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
    #[arg(long, default_value_t = DEFAULT_TOP)]
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

impl ReproduceArgs {
    /// `reproduce --kernels A,B` where A or B is not one of Debian's kernels
    /// (a tree, your own image): the seeds' claims are about upstream
    /// releases and cannot be judged there, so the two are compared as
    /// `patch --base A --head B` does, on every seed asked for. None when
    /// reproduce runs as itself.
    pub fn as_patch(&self) -> anyhow::Result<Option<PatchArgs>> {
        if self.kernels.is_empty() || self.kernels == ["auto"] {
            return Ok(None);
        }
        let specs = self
            .kernels
            .iter()
            .map(|k| KernelSpec::parse(k))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Debian's kernels, releases or not, are reproduce's (which refuses
        // those it cannot judge on, saying why).
        if specs.iter().all(|s| s.versions().is_some()) {
            return Ok(None);
        }
        let [base, head] = &self.kernels[..] else {
            bail_usage!(
                "reproduce --kernels with kernels other than Debian's ({}) compares \
                 exactly two, base then head, as ptelab patch does; got {}",
                self.kernels.join(","),
                self.kernels.len()
            );
        };
        let markdown = match self.output.extension().and_then(|e| e.to_str()) {
            Some("md") => Some(self.output.clone()),
            _ => {
                eprintln!(
                    "ptelab: two kernels of your own are compared as ptelab patch compares them: \
                     the tables are printed (-o FILE.md writes them as Markdown too); the HTML \
                     report is for the seeds' release kernels"
                );
                None
            }
        };
        let seeds = match self.seeds.is_empty() {
            true => vec!["all".to_string()],
            false => self.seeds.clone(),
        };
        Ok(Some(PatchArgs {
            base: base.clone(),
            head: Some(head.clone()),
            series: None,
            arch: self.arch.clone(),
            seeds,
            quick: self.quick,
            markdown,
            top: DEFAULT_TOP,
            guest: self.guest.clone(),
            out: self.out.clone(),
            cluster: self.cluster.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{Cli, Command};
    use clap::Parser;

    fn reproduce(args: &[&str]) -> ReproduceArgs {
        let argv = ["ptelab", "reproduce"].iter().chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Reproduce(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn two_kernels_of_your_own_are_a_patch_base_then_head() {
        let r = reproduce(&[
            "003",
            "--kernels",
            "tree:/src/linux@v7.3,tree:/src/linux@HEAD",
            "--arch",
            "arm64",
            "--quick",
            "-o",
            "cover.md",
        ]);
        let p = r.as_patch().unwrap().expect("a patch");
        assert_eq!(p.base, "tree:/src/linux@v7.3");
        assert_eq!(p.head.as_deref(), Some("tree:/src/linux@HEAD"));
        assert_eq!(p.series, None);
        assert_eq!(
            (p.seeds, p.arch, p.quick),
            (vec!["003".into()], vec!["arm64".into()], true)
        );
        assert_eq!(p.markdown, Some(PathBuf::from("cover.md")));
        assert_eq!(p.top, DEFAULT_TOP);
        // A Debian release against your own image: a patch too, every seed.
        let r = reproduce(&["--kernels", "debian:6.18.15,tree:/src/linux@HEAD"]);
        let p = r.as_patch().unwrap().expect("a patch");
        assert_eq!((p.seeds, p.markdown), (vec!["all".into()], None));
    }

    #[test]
    fn release_kernels_and_auto_are_reproduce_itself() {
        for kernels in ["auto", "debian:6.16.12,debian:6.17.13", "debian:6.18.15"] {
            assert!(
                reproduce(&["--kernels", kernels])
                    .as_patch()
                    .unwrap()
                    .is_none(),
                "{kernels}"
            );
        }
        assert!(reproduce(&[]).as_patch().unwrap().is_none());
    }

    #[test]
    fn other_than_two_kernels_of_your_own_is_refused() {
        for kernels in [
            "tree:/l@a",
            "tree:/l@a,tree:/l@b,tree:/l@c",
            "debian:6.16.12,debian:6.17.13,tree:/l@a",
        ] {
            let e = reproduce(&["--kernels", kernels]).as_patch().unwrap_err();
            assert!(crate::error::is_usage(&e), "{e}");
            assert!(e.to_string().contains("exactly two, base then head"), "{e}");
        }
    }
}
