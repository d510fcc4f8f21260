//! THP/mTHP knobs under /sys/kernel/mm/transparent_hugepage: read them, set
//! only what a folio spec needs, and restore every knob touched on success,
//! error, panic, SIGINT and SIGTERM. A system-wide lock serializes ptelab
//! processes that change knobs (they are global).
//!
//! CONTRACT (implemented by the kernel-layer helper; keep these signatures):
//!
//! ```ignore
//! /// Every knob: "enabled", "defrag", "shmem_enabled", "khugepaged/defrag",
//! /// "hugepages-64kB/enabled", ... -> the selected value ("madvise").
//! pub fn read_knobs() -> anyhow::Result<BTreeMap<String, String>>;
//! /// Anonymous mTHP sizes in bytes the kernel offers (order >= 2, below PMD).
//! pub fn offered_mthp_sizes() -> Vec<u64>;
//! /// Refuse (usage error, listing what is offered) a spec this kernel cannot give.
//! pub fn check_offered(spec: FolioSpec) -> anyhow::Result<()>;
//! pub struct KnobGuard { .. }          // Drop restores; holds the system lock
//! impl KnobGuard {
//!     /// Take the lock (calling `on_wait` with who holds it while waiting),
//!     /// recover knobs left changed by a killed ptelab, snapshot the knobs.
//!     pub fn acquire(on_wait: &mut dyn FnMut(&str)) -> anyhow::Result<KnobGuard>;
//!     /// Set exactly the knobs `spec` needs (others unchanged).
//!     pub fn configure_for(&mut self, spec: FolioSpec) -> anyhow::Result<()>;
//!     /// Knobs as found before this guard changed anything.
//!     pub fn original(&self) -> &BTreeMap<String, String>;
//!     pub fn restore(&mut self) -> anyhow::Result<()>;
//! }
//! /// Install SIGINT/SIGTERM handling once; returns the flag long loops poll.
//! pub fn interrupted() -> &'static AtomicBool;
//! ```
