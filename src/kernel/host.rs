//! Facts about this machine and kernel, captured with every run and printed by
//! `ptelab doctor`.
//!
//! CONTRACT (implemented by the kernel-layer helper; keep these signatures):
//!
//! ```ignore
//! #[derive(Clone, Debug, Serialize, Deserialize)]
//! pub struct Host {
//!     pub kernel_release: String, pub kernel_version: String, pub kernel_cmdline: String,
//!     pub arch: String, pub page_size: u64, pub cpu_model: String, pub cores: usize,
//!     pub mem_total_bytes: u64, pub mem_available_bytes: u64, pub is_root: bool,
//!     pub paravirt: Option<String>,      // e.g. "KVM/PVM guest, paravirtual page-table ops"
//!     pub thp_knobs: BTreeMap<String, String>,
//!     pub machine_id: String, pub tool_version: String, pub git_revision: Option<String>,
//! }
//! pub fn capture() -> anyhow::Result<Host>;
//! ```
