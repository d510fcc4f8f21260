//! Seed 004 (`reclaim`): placeholder until the method is implemented.

use super::ops::{BatchTime, KernelOp};
use crate::kernel::region::Region;

/// Reclaim of large folios.
pub struct Reclaim {
    regions: Vec<Region>,
}

impl Reclaim {
    pub fn new(_regions: Vec<Region>) -> anyhow::Result<Reclaim> {
        anyhow::bail!("reclaim: no kernel backend yet")
    }
}

impl KernelOp for Reclaim {
    fn calls_per_iteration(&self) -> u64 {
        1
    }
    fn run(&mut self, _iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        anyhow::bail!("reclaim: no kernel backend yet")
    }
    fn regions(&self) -> &[Region] {
        &self.regions
    }
}
