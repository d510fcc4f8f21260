//! mremap: `move_ptes()` (placeholder, filled in below).

use crate::arch::Arch;
use crate::cx::Cx;
use crate::workload::CallRecord;
use crate::ModelError;

/// Run the mremap-move workload.
///
/// # Errors
/// Not yet modelled.
pub fn mremap_workload<A: Arch>(
    _cx: &mut Cx<A>,
    _base: u64,
    _start: u64,
    _end: u64,
    _mapped: u64,
) -> Result<CallRecord, ModelError> {
    Err(ModelError::Unsupported("mremap-move".into()))
}
