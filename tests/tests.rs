mod common;

mod doctor;
mod knobs;
mod store_cli;
mod bench_cli;
mod model_cli;
