//! `ptelab sweep` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::SweepArgs;

pub fn run(_args: &SweepArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab sweep` is not implemented yet")
}
