//! `ptelab task run FILE` (hidden): boot the job a cluster's executor wrote
//! to FILE and write the guests' answer beside it (`fleet::task`). The
//! submitting ptelab reads the answer back and stores the runs.

use std::process::ExitCode;

use crate::cli::cluster::{TaskArgs, TaskCommand};

pub fn run(args: &TaskArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        TaskCommand::Run { file } => crate::fleet::task::run_file(file)?,
    }
    Ok(ExitCode::SUCCESS)
}
