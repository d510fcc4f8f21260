mod common;

mod bench_cli;
mod bisect_cli;
mod crosscheck_cli;
mod crosscheck_guest;
mod doctor;
mod guest_binary;
mod kernel_cli;
mod knobs;
mod layers;
mod model_cli;
mod profile_guest;
mod report_cli;
mod store_cli;
mod store_kill;
mod vm_cli;
mod workloads_cli;
