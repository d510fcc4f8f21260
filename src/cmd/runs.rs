//! `ptelab runs` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::RunsArgs;

pub fn run(_args: &RunsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab runs` is not implemented yet")
}
