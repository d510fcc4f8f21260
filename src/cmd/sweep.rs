//! `ptelab sweep WORKLOAD --sizes LIST --folios LIST`: the seeds' region-size
//! sweep, one cell per size and folio layout, each stored as it finishes.

use std::process::ExitCode;

use crate::cli::flags::SweepArgs;
use crate::workload::folio::parse_folio_list;
use crate::workload::size::parse_size_list;

pub fn run(args: &SweepArgs) -> anyhow::Result<ExitCode> {
    let sizes = parse_size_list(&args.sizes)?;
    let folios = parse_folio_list(&args.folios)?;
    if sizes.is_empty() || folios.is_empty() {
        crate::bail_usage!("--sizes and --folios need at least one value each");
    }
    super::run_kernel(
        "sweep",
        args.workload,
        &sizes,
        &folios,
        &args.measure,
        &args.out,
        &args.tags,
    )
}
