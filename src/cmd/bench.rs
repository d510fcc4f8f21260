//! `ptelab bench` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::BenchArgs;

pub fn run(_args: &BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab bench` is not implemented yet")
}
