//! `ptelab report` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::ReportArgs;

pub fn run(_args: &ReportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab report` is not implemented yet")
}
