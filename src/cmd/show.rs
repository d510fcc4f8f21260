//! `ptelab show` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::ShowArgs;

pub fn run(_args: &ShowArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab show` is not implemented yet")
}
